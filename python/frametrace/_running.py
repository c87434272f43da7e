"""What runs in this process, kept in one place: the ``frametrace.profile``
session, the flight recorder, the traced child's step, and ``frametrace
run``'s program.  Their owners register them here and get back the
function that unregisters them; the other modules look them up here, not
in each other.

The attributes below are read, never assigned, outside this module: a read
is no call, so ``frametrace.step()`` and the flight recorder's watchdog
look them up without adding a call to the trace a tracer is recording.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, Optional

# The session entered (frametrace.profile), if any.
session: Optional[Any] = None
# The flight recorder entered, if any (frametrace attach --dump asks it).
recorder: Optional[Any] = None
# What frametrace.step() calls: the session's step, else the flight
# recorder's, else the traced child's; None (one read) when none runs.
step_receiver: Optional[Callable[[], Any]] = None
# `frametrace run` runs its program (the pytest plugin's fixture skips),
# and its --fork-traces tracers, if any.
program_running = False
fork_tracers: Optional[Any] = None

_session_step: Optional[Callable[[], Any]] = None
_child_step: Optional[Callable[[], Any]] = None
_lock = threading.RLock()  # re-entered by a SIGTERM handler (a traced child's end)


def _receiver() -> Optional[Callable[[], Any]]:
    if session is not None:
        return _session_step
    return recorder.step if recorder is not None else _child_step


def register_session(new: Any, check: Callable[[], None],
                     step: Callable[[], Any]) -> Callable[[], None]:
    """Makes new the session, stepped by step() (frametrace.step() calls
    it); check() runs first, under the same lock (it raises to refuse).
    Refused while another session runs."""
    global session, _session_step, step_receiver
    with _lock:
        if session is not None:
            raise RuntimeError("a frametrace profiling session is already running: "
                               "sessions do not nest")
        check()
        session, _session_step = new, step
        step_receiver = _receiver()

    def unregister() -> None:
        with _lock:
            if session is new:
                forget_session()
    return unregister


def forget_session() -> Optional[Any]:
    """The session is no longer running here (a forked child's hook calls
    it without the lock: one thread); it is returned."""
    global session, _session_step, step_receiver
    old, session, _session_step = session, None, None
    step_receiver = _receiver()
    return old


def register_recorder(new: Any) -> Callable[[], None]:
    """Makes new the flight recorder that frametrace.step() steps."""
    global recorder, step_receiver
    with _lock:
        if recorder is not None:
            raise RuntimeError("a flight recorder is running already")
        recorder = new
        step_receiver = _receiver()

    def unregister() -> None:
        global recorder, step_receiver
        with _lock:
            if recorder is new:
                recorder = None
                step_receiver = _receiver()
    return unregister


def flight_recorders() -> list:
    """The flight recorders running (frametrace attach --dump's agent)."""
    current = recorder
    return [] if current is None else [current]


def register_child_step(step: Callable[[], Any]) -> Callable[[], None]:
    """In a traced child: step() is what frametrace.step() calls when
    neither a session nor a flight recorder runs."""
    global _child_step, step_receiver
    with _lock:
        _child_step = step
        step_receiver = _receiver()

    def unregister() -> None:
        global _child_step, step_receiver
        with _lock:
            if _child_step is step:
                _child_step = None
                step_receiver = _receiver()
    return unregister


def register_program(forks: Optional[Any]) -> Callable[[], None]:
    """`frametrace run` runs its program (forks: its --fork-traces
    tracers, or None) until the returned function is called."""
    global program_running, fork_tracers
    with _lock:
        program_running, fork_tracers = True, forks

    def unregister() -> None:
        global program_running, fork_tracers
        with _lock:
            program_running, fork_tracers = False, None
    return unregister


def _after_fork_in_child() -> None:
    # Another thread may have held the lock at the fork.  Registered first
    # (imported before the modules that register here): their own at-fork
    # hooks, which run after it, may take it.
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
