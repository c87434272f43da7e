"""The ways the program ``frametrace run`` runs can end without coming back
to the command (SIGTERM, ``os._exit``), each made to write the trace
first, once, and then to end the process as it would have ended untraced.
What is promised: docs/guarantees.md, "However a run ends"; how:
docs/internals.md, "How a run ends".
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Callable, NoReturn, Optional

from . import _tracer

_active: Optional["Endings"] = None  # the run under way in this process
GRACE_MS = 1000  # the main thread's time to run its SIGTERM handler first


class Endings:
    """The ways a run's program ends, armed with end(status, why) ->
    status, which stops the recording, writes the trace and says so (it
    must not raise), and stop(), called first (before any call the trace
    would show), which stops the recording or does nothing."""

    def __init__(self) -> None:
        self._forked = False  # set in a forked child: no call needed to know it
        self._end: Optional[Callable[[int, str], int]] = None
        self._stop: Callable[[], Any] = _nothing
        self._claim = threading.Lock()  # acquire(False) is one C call: safe in a handler
        self._owner: Optional[int] = None  # the thread that writes
        self._written = threading.Event()
        self._sigterm = False  # came while the trace was written
        self._real_exit = os._exit
        self._handler = False
        self._closed = False

    def arm(self, end: Callable[[int, str], int], stop: Optional[Callable[[], Any]] = None) -> None:
        """From now on (until close) SIGTERM and os._exit write the trace."""
        global _active
        self._end = end
        self._stop = _nothing if stop is None else stop
        _active = self
        os._exit = self._os_exit
        if threading.current_thread() is threading.main_thread():
            try:
                handler = signal.getsignal(signal.SIGTERM)
                previous = getattr(handler, "__self__", None)  # an earlier run's, closed
                if handler is signal.SIG_DFL or (isinstance(previous, Endings)
                                                 and previous._closed):
                    signal.signal(signal.SIGTERM, self._on_sigterm)
                    self._handler = True
                    watch_sigterm(new_watch(), self._on_sigterm)
            except (ValueError, OSError):  # not allowed here: SIGTERM kills untraced
                pass

    def claim(self) -> None:
        """The program came back to the command, which writes the trace.
        If an os._exit is writing it on another thread, waits for that to
        end the process."""
        if self._claim.acquire(blocking=False):
            self._owner = threading.get_ident()
            return
        while True:  # the other thread calls the real os._exit once written
            self._written.wait()
            threading.Event().wait(1.0)

    def close(self) -> None:
        """The trace is written (or the run is over): os._exit is the real
        one again, SIGTERM ends the process at once; one that came
        meanwhile ends it now.  The handler stays: setting SIG_DFL back
        would drop a SIGTERM caught just before (CPython ignores a caught
        signal whose handler has become SIG_DFL)."""
        self._closed = True
        if os._exit == self._os_exit:
            os._exit = self._real_exit
        self._written.set()
        if self._sigterm:
            die_of_sigterm()

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        dies = True  # whatever happens below, as SIGTERM would have ended it
        try:
            if self._forked or self._closed:
                return
            self._stop_quietly()
            if not self._claim.acquire(blocking=False):
                if self._owner not in (None, threading.get_ident()):
                    self._written.wait()  # another thread's write: it ends the process
                    return
                dies = False
                self._sigterm = True  # this thread writes: ends once written (close)
                return
            self._owner = threading.get_ident()
            if self._end is not None:
                self._end(-signal.SIGTERM, "was ended by SIGTERM")
        finally:
            if dies:
                die_of_sigterm()

    def _os_exit(self, status: int) -> NoReturn:
        code = status
        try:  # never returns, whatever the write meets
            if not self._forked and self._end is not None:
                code = self._write_before_exit(status)
        finally:
            _flush_stderr()
            self._real_exit(code)

    def _write_before_exit(self, status: int) -> int:
        """The exit status once the trace is written (by this thread, or
        by the one already writing it)."""
        self._stop_quietly()
        if not self._claim.acquire(blocking=False):
            if self._owner != threading.get_ident():
                self._written.wait()  # the write under way, then this exit
            return status
        self._owner = threading.get_ident()
        assert self._end is not None
        return self._end(status, f"called os._exit({status})")

    def _stop_quietly(self) -> None:
        # An interrupt stop() kept, or a session's refusal (stop() from its
        # own writer thread), must not keep the process from ending.
        try:
            self._stop()
        except BaseException:  # noqa: B036 - the process ends below all the same
            pass

    def own_code(self) -> tuple:
        """What runs in the program's process, kept out of its trace."""
        return tuple(f.__code__ for f in (
            Endings._on_sigterm, Endings._os_exit, Endings._write_before_exit,
            Endings._stop_quietly, die_of_sigterm, _flush_stderr,
            Endings.claim, Endings.close, _nothing, SigtermWatch._fire, SigtermWatch.relay,
            SigtermWatch.close, SigtermWatch._end_thread, watch_sigterm, new_watch))


def _nothing() -> None:
    pass


_real_exit = os._exit  # before any run wraps it


def die_of_sigterm() -> NoReturn:
    """Ends this process as SIGTERM ends one with no handler (status -15),
    from any thread, whatever its handler and mask are now."""
    _flush_stderr()
    try:
        _tracer._die_of_signal(signal.SIGTERM)
    except OSError:
        pass
    _real_exit(128 + signal.SIGTERM)  # a SIGTERM that could not kill


class SigtermWatch:
    """SIGTERM caught in C as well as by its Python handler (which Python
    runs in the main thread between bytecodes): a C thread of the
    extension's, with no thread state (no thread of the trace), is woken
    by it and GRACE_MS later, if the process is still there (its main
    thread blocked in C), runs the handler itself.  One a process: a new
    one ends the one before; a forked child has none."""

    def __init__(self) -> None:
        read, self._write = os.pipe()
        try:
            os.set_blocking(self._write, False)  # a signal handler writes to it
            self._handler: Optional[Callable[[int, Any], Any]] = None
            self._fds = (read, self._write)
            _tracer._watch_relayed(read, GRACE_MS, self._fire)  # its thread's from now on
        except BaseException:
            os.close(read)
            os.close(self._write)
            raise

    def relay(self, handler: Callable[[int, Any], Any]) -> None:
        """From now on (SIGTERM's Python handler being handler, set in the
        main thread) SIGTERM wakes this watch, no longer the one before.
        OSError if it cannot."""
        global _watching
        self._handler = handler
        _tracer._relay_signal(signal.SIGTERM, self._write)  # the relay's fd: this one's
        previous, _watching = _watching, self
        if previous is not None and previous is not self:
            previous._end_thread()

    def close(self) -> None:
        """Its thread ends; SIGTERM goes to its Python handler alone."""
        global _watching
        if _watching is self:
            _watching = None
            _tracer._unrelay_signal(signal.SIGTERM)
        self._end_thread()

    def _end_thread(self) -> None:
        if self._write >= 0:
            os.close(self._write)  # its thread reads the end, closes its side and ends
            self._write = -1

    def _fire(self) -> None:
        """On the watch's thread, GRACE_MS after a SIGTERM."""
        if self._handler is not None:
            self._handler(signal.SIGTERM, None)


_watching: Optional[SigtermWatch] = None  # this process's


def watch_sigterm(watch: Optional[SigtermWatch], handler: Callable[[int, Any], Any]) -> None:
    """watch relays SIGTERM to handler (just set); where it cannot, or
    there is no watch, the handler alone runs it, as Python runs it."""
    if watch is None:
        return
    try:
        watch.relay(handler)
    except OSError:
        watch.close()


def new_watch() -> Optional[SigtermWatch]:
    """A SigtermWatch, or None where no thread or pipe can be had."""
    try:
        return SigtermWatch()
    except (OSError, RuntimeError):
        return None


def _flush_stderr() -> None:
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


# A forked child's SIGTERM and os._exit are its own: the default (or
# --follow-children's, set by its own at-fork hook, which runs after this
# one).  SIGTERM is blocked across the fork so that none reaches the child
# before SIG_DFL is back: CPython would drop it (caught by the inherited
# handler, then found SIG_DFL), where untraced it kills the child.
_blocked_at_fork = False


def _before_fork() -> None:
    global _blocked_at_fork
    run = _active
    if run is not None and run._handler and not run._forked:
        _blocked_at_fork = block_sigterm()


def _after_fork_in_parent() -> None:
    global _blocked_at_fork
    if _blocked_at_fork:
        _blocked_at_fork = False
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _after_fork_in_child() -> None:
    global _blocked_at_fork, _watching
    watch = _watching
    if watch is not None:  # its thread is the parent's
        _watching = None
        for fd in watch._fds:
            os.close(fd)
        watch._write = -1
    run = _active
    if run is not None:
        run._forked = True
        if run._handler:
            run._handler = False
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            except (ValueError, OSError):
                pass
    if _blocked_at_fork:
        _blocked_at_fork = False
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # one pending kills now


def block_sigterm() -> bool:
    """Blocks SIGTERM in this thread: True if it was not blocked before."""
    try:
        return signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except (AttributeError, OSError, ValueError):
        return False


# At import: before frametrace._children's hook, which sets a child's own
# SIGTERM handler only where SIGTERM has none.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
