"""The errors of attach and dump."""
from __future__ import annotations


class AttachError(RuntimeError):
    """Attaching failed, or the target ended before the trace was written.
    Unless the message says otherwise, the target was left untouched."""


class Unreachable(AttachError):
    """sys.remote_exec cannot reach the target's Python code: too old,
    remote debugging disabled, or its main thread not back in Python in
    time (``dump`` may send the flight recorder's signal instead)."""
