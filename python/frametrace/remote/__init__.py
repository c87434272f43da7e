"""Tracing a running process from outside, on CPython 3.14+ (PEP 768
``sys.remote_exec``): ``attach(pid)`` (``frametrace attach PID``) and
``dump(pid)``, which asks the flight recorders running there to dump
(``frametrace attach PID --dump``).  What they do and what the target sees:
docs/attach.md; how they work: docs/internals.md, "Attach".

The parts: ``_attacher`` (attach and its checks, the hand-over and the
conversation), ``_dump`` (attach --dump), ``_target`` (what is read of a
target's files), ``_handover`` (the claims, the private folder),
``_scripts`` (the scripts the target runs), ``_wire`` (the messages),
``_agent`` (what runs in the target).
"""
from __future__ import annotations

# _begin and _serve_dump: the names the scripts call in the target's
# frametrace (an attacher of another version may have written them).
from ._agent import _begin, _serve_dump  # noqa: F401
from ._attacher import AttachResult, attach
from ._dump import DumpResult, dump
from ._errors import AttachError

__all__ = ["AttachError", "AttachResult", "DumpResult", "attach", "dump"]
