"""Tracing a running process from outside: ``frametrace.attach(pid)`` and
``frametrace attach PID`` (CPython 3.14+, PEP 768 ``sys.remote_exec``).

    result = frametrace.attach(pid, duration=2.0, output="trace.json")

The attaching side runs on any supported CPython.  It checks the target
(a Linux process running CPython 3.14 or later that allows remote
debugging), writes a small script into a private directory, and has the
target's own interpreter binary (``/proc/PID/exe``: ``sys.remote_exec``
works only between equal major.minor versions) hand it over.  One attach
traces a process at a time, and one script is handed to it at a time
(claims in the abstract socket namespace: a second ``sys.remote_exec``
before the target ran the first would replace it).  The target's
main thread runs the script at its next bytecode boundary.  The script
imports frametrace (in the target's environment), says hello over a Unix
socket in that directory, and, once told to go, starts a tracer on all the
target's threads and returns: the main thread goes on with its own code at
once.  A thread of frametrace's ("frametrace attach") then waits for the
end: the duration, the N-th step, the attacher asking to stop or going
away (its socket closes), or the target exiting (an ``atexit`` hook).  The
thread that decides stops the tracer there (the latched stop: frames
running then end exactly at it, flagged open_at_stop; those running at
the start are open_at_start), the trace is written by the target (the C
writers release the GIL), and the result goes back over the socket.

What the target sees of it: frametrace imported, one extra thread while
attached, an ``atexit`` hook and (for steps) a ``sys.monitoring`` tool id,
both removed when done.  It prints nothing and raises nothing into the
target's code.  The trace holds the target's frames only: the script's and
frametrace's own functions are ignored by the tracer; frametrace's thread
waits in one C call (``select.select``) begun before the start, so it
records nothing, or that call at most.

Other users.  The target's files are its user's: as root, attach runs
nothing of them with root's privileges.  The target's version is read
from its interpreter's ELF file (or the libpython it maps), never by
running it; the hand-over runs the target's interpreter with the target's
uid, gid and groups and an empty environment (it can do nothing the target
cannot); the private directory is given to that user only once the script
and socket are in it, and everything root does there afterwards goes
through the descriptor opened when it was made (no path the user could
redirect); the target checks that it can write the output (it writes the
trace, as itself) before the tracer starts; what the target advertises
for ``attach --dump`` is read with bounds and checked before use.

A limit of ``sys.remote_exec``: a signal handler that raises just as the
script starts (Ctrl-C at that instant) raises into the script, and CPython
reports that as the script's error instead of raising it in the target's
code.

``dump(pid)`` (``frametrace attach PID --dump``) asks the flight recorders
running in the target to dump: its script (no import; it hands the request
over through ``_serve_dump``) returns at once, each recorder's writer
thread takes its dump and reports it over the socket.  When the script
cannot run, the recorder's advertised signal is sent instead (see
``dump``).

Steps: with ``steps=N`` the tracer stops at the N-th call of
``frametrace.step()`` (in any thread) after the attach, so the trace holds
the rest of the step under way and N-1 whole steps; with
``step_function="module:qualname"`` it stops when the N-th call of that
function begun after the attach returns (N whole calls).  Each is a step on
the trace's steps track.

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
