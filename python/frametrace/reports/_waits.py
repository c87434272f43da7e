"""Which recorded C calls wait: their time is blocking (on a lock, a
sleep, a file descriptor, another thread or process), not work.  The list
is the one docs/viewing.md gives.  Before CPython 3.14 a wait through
``with lock:`` makes no call the tracer sees (no ``__enter__`` call is
reported), so it stays the caller's self time."""
from __future__ import annotations

WAIT_CALLS: frozenset[str] = frozenset({
    # Lock, RLock and every Condition, Event, Semaphore, Queue and (before
    # 3.13) Thread.join wait built on them; __enter__ called explicitly or,
    # from 3.14, by a with statement.
    "lock.acquire", "lock.acquire_lock", "lock.__enter__",
    "RLock.acquire", "RLock.__enter__",
    "_ThreadHandle.join",  # Thread.join on 3.13+
    "time.sleep",
    "select.select", "poll.poll", "epoll.poll", "devpoll.poll", "kqueue.control",
    "posix.waitpid", "posix.wait", "posix.wait3", "posix.wait4", "posix.waitid",
    "signal.pause", "signal.sigwait", "signal.sigwaitinfo", "signal.sigtimedwait",
})
"""The C functions (as events name them) counted as waits."""


def is_wait(name: str, kind: str) -> bool:
    """True for a C function of WAIT_CALLS."""
    return kind == "c" and name in WAIT_CALLS
