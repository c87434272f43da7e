"""Tracing a program's child processes: ``profile(..., trace_children=True)``
and ``frametrace run --follow-children``.  ``enable(plan)`` makes every
child started meanwhile trace itself and hand its trace to
``plan.deliver``; ``step()`` moves a child that steps onto the parent's
schedule.  What a user sees: docs/distributed.md; how each kind of child
starts and ends tracing: docs/internals.md, "Child processes".
"""
from __future__ import annotations

import atexit
import os
import pickle
import signal
import sys
import threading
import traceback
import warnings
from typing import TYPE_CHECKING, Any, Callable, Optional

from . import _running, _tracer
from ._endings import SigtermWatch, block_sigterm, die_of_sigterm, new_watch, watch_sigterm
from ._output import say

if TYPE_CHECKING:
    from .tracer import Options

_plan: Optional["Plan"] = None  # this process traces its children
_enabled: list = []  # the plans enabled, innermost last
_child: Optional["_ChildRun"] = None  # this process is a traced child
_ending: Optional["_ChildRun"] = None  # its trace is being written (or was)
_unregister_step: Optional[Callable[[], None]] = None  # frametrace.step() reaches step()
_original_preparation: Optional[Callable[[str], dict]] = None
_fork_hook = False
_warned_pickle = False
_KEY = "frametrace_trace_child"  # the preparation data's entry


class Plan:
    """What a traced child does: its tracer's options, and deliver(trace),
    called with its Trace as it ends.  Pickled to spawn and forkserver
    children: deliver must pickle (frametrace.trace_handler() does)."""

    def __init__(self, options: Options, deliver: Callable[[Any], Any], ignore: tuple = (),
                 schedule: Any = None, python_steps: Optional[int] = None):
        self.options = options
        self.deliver = deliver
        # A child that steps (frametrace.step(), or the parent's prof.step()
        # in a forked child) is profiled on this schedule from then on.
        self.schedule = schedule
        self.python_steps = python_steps
        # Code kept out of a forked child's trace as out of the parent's
        # (the command's frames on the stack); code objects do not pickle,
        # and a spawned child's stack has none of them.
        self.ignore = tuple(ignore)

    def __getstate__(self) -> dict:
        return dict(self.__dict__, ignore=())


class _ChildRun:
    __slots__ = ("plan", "tracer", "method", "pid", "parent_pid", "session", "claim",
                 "writer", "written", "sigterm")

    def __init__(self, plan: Plan, tracer: Any, method: str, parent_pid: int):
        self.plan = plan
        self.tracer = tracer
        self.method = method
        self.pid = os.getpid()
        self.parent_pid = parent_pid
        self.session: Any = None  # its own session, once it steps
        self.claim = threading.Lock()  # acquire(False) is one C call: safe in a handler
        self.writer: Optional[int] = None  # the thread that writes its trace
        self.written = threading.Event()
        self.sigterm = False  # came to the writing thread: dies once written


def enable(plan: Plan) -> None:
    """From now on, the children this process starts trace themselves
    (by plan, until disable(plan); the latest enabled plan wins)."""
    global _plan, _fork_hook, _original_preparation
    _enabled.append(plan)
    _plan = plan
    if not _fork_hook and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)  # for good: once
        _fork_hook = True
    try:
        from multiprocessing import spawn
    except ImportError:  # no multiprocessing on this platform
        return
    if _original_preparation is None:
        _original_preparation = spawn.get_preparation_data
        spawn.get_preparation_data = _preparation_data


def disable(plan: Plan) -> None:
    """Children started from now on are not traced (those running go on)."""
    global _plan, _original_preparation
    if plan not in _enabled:
        return
    _enabled.remove(plan)
    _plan = _enabled[-1] if _enabled else None  # an outer one (run's, around a session's)
    if _plan is not None:
        return
    spawn: Any = sys.modules.get("multiprocessing.spawn")
    if spawn is not None and spawn.get_preparation_data is _preparation_data:
        spawn.get_preparation_data = _original_preparation
        _original_preparation = None


def _preparation_data(name: str) -> dict:
    """multiprocessing.spawn.get_preparation_data while enabled: the data
    a spawn or forkserver child unpickles first, with the entry that starts
    its tracer."""
    global _warned_pickle
    assert _original_preparation is not None
    data = _original_preparation(name)
    plan = _plan
    if plan is not None:
        try:
            pickle.dumps(plan)  # an error here, not inside Process.start()
        except Exception as exc:  # noqa: BLE001 - any reason it does not pickle
            if not _warned_pickle:
                _warned_pickle = True
                warnings.warn(f"frametrace: children started with spawn or forkserver are not "
                              f"traced: what receives their traces does not pickle ({exc}); "
                              f"frametrace.trace_handler(dir) does", RuntimeWarning, stacklevel=2)
        else:
            data[_KEY] = _Bootstrap(plan, os.getpid())
    return data


class _Bootstrap:
    """Unpickled in a spawn or forkserver child, before prepare() and the
    process object: starts the child's tracer."""

    def __init__(self, plan: Plan, parent_pid: int):
        self.plan = plan
        self.parent_pid = parent_pid  # a forkserver's child: not its OS parent

    def __reduce__(self) -> tuple:
        return (_bootstrap_child, (self.plan, self.parent_pid))


def _bootstrap_child(plan: Plan, parent_pid: int) -> None:
    enable(plan)  # its own children are traced too
    _start(plan, "spawn", parent_pid)


def _after_fork_in_child() -> None:
    global _child, _ending
    _child = _ending = None  # a traced child's child: its own trace
    _stop_stepping()
    plan = _plan
    if plan is not None:
        _start(plan, "fork", os.getppid())


def _start(plan: Plan, method: str, parent_pid: int) -> None:
    global _child
    from .tracer import Tracer

    # Made before the tracer starts: its calls are not the child's.
    watch = new_watch() if _sigterm_is_free() else None
    _start_stepping()  # step() does nothing until _child is set
    try:
        tracer = Tracer(options=plan.options)
        for code in _OWN_CODE + plan.ignore:
            tracer._ignore(code)
        tracer.start()
    except (RuntimeError, TypeError, ValueError) as exc:
        _stop_stepping()
        if watch is not None:
            watch.close()
        # Another profiler in the child: said, not silently untraced.
        say(f"frametrace: child process {os.getpid()} is not traced: {exc}")
        return
    _child = _ChildRun(plan, tracer, method, parent_pid)
    _arm_exits(watch)


def _start_stepping() -> None:
    global _unregister_step
    _stop_stepping()
    _unregister_step = _running.register_child_step(step)


def _stop_stepping() -> None:
    global _unregister_step
    unregister, _unregister_step = _unregister_step, None
    if unregister is not None:
        unregister()


def _sigterm_is_free() -> bool:
    """SIGTERM has no handler, and this thread may set one."""
    try:
        return (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
    except (ValueError, OSError):
        return False


def _arm_exits(watch: Any) -> None:
    """The ways a child ends, each made to write its trace first (atexit
    is registered once, at import)."""
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        # Run after the process object's bootstrap clears the finalizers.
        util.register_after_fork(_KEEP, _after_multiprocessing_bootstrap)
    handled = False
    if _sigterm_is_free():
        try:
            signal.signal(signal.SIGTERM, _on_sigterm)
            handled = True
        except (ValueError, OSError):  # not allowed here: SIGTERM kills untraced
            pass
    if handled:
        watch_sigterm(watch, _on_sigterm)
    elif watch is not None:
        watch.close()


class _Keep:
    """What multiprocessing.util.register_after_fork holds weakly."""


_KEEP = _Keep()


def _after_multiprocessing_bootstrap(_: Any) -> None:
    util = sys.modules["multiprocessing.util"]
    # Lowest priority: after the pool's and the queues' finalizers, just
    # before the bootstrap's os._exit.
    util.Finalize(None, finish, exitpriority=-(1 << 30))


def _on_sigterm(signum: int, frame: Any) -> None:
    dies = True
    try:
        dies = _finish(sigterm=True)
    finally:  # whatever finish() met, the child dies of SIGTERM as it would have
        if dies:
            die_of_sigterm()


def step() -> bool:
    """In a traced child, its step() (frametrace.step() with no session, or
    a forked copy of the parent's session's step()): the first one stops
    the whole-life tracer, dropping what it recorded, and starts a session
    of the child's own on the parent's schedule, its steps counted as the
    child's loop counts them (this first call ended its step 0, which is
    not recorded); later ones step that session.  False outside a traced
    child."""
    run = _child
    if run is None or run.pid != os.getpid():
        return False
    if run.session is not None:
        run.session.step()
        return True
    from .session import Profile

    run.tracer.stop()
    run.tracer.clear()
    plan = run.plan
    session = Profile(schedule=plan.schedule, python_steps=plan.python_steps,
                      on_trace_ready=plan.deliver, _ignore=_OWN_CODE + plan.ignore,
                      options=plan.options,
                      _trace_extra={"parent_pid": run.parent_pid, "process_name": _process_name(run)})
    session.step_num = 1
    session.__enter__()
    run.session = session
    return True


def finish() -> None:
    """In a traced child: stops its tracer and delivers its trace (once;
    one under way on another thread is waited for)."""
    _finish(sigterm=False)


def _finish(sigterm: bool) -> bool:
    """finish(); for SIGTERM's handler, False if it came to the thread
    that writes (which dies of it once written)."""
    global _child, _ending
    run = _child
    if run is None or run.pid != os.getpid():
        run = _ending
        if run is None or run.pid != os.getpid():
            return True
    me = threading.get_ident()
    if not run.claim.acquire(blocking=False):
        if run.writer not in (None, me):
            run.written.wait()  # another thread's write, then this ending
        elif sigterm:
            run.sigterm = True
            return False
        return True
    run.writer = me
    _child, _ending = None, run
    tracer = run.tracer
    tracer.stop()
    _stop_stepping()  # after the stop: not in the trace
    # A SIGTERM now (a Pool's terminate() while a worker that ended
    # normally writes) waits for the write: blocked, then delivered.
    blocked = block_sigterm()
    try:
        if run.session is not None:
            _end_session(run)
        else:
            _deliver(run, tracer)
    finally:
        run.written.set()
        if blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if run.sigterm and not sigterm:
        die_of_sigterm()
    return True


def _end_session(run: _ChildRun) -> None:
    try:
        run.session.__exit__(None, None, None)  # its last window, and waits for the writes
    except BaseException:  # noqa: B036 - a child's end: told, never raised into it
        say(f"frametrace: the session of child process {run.pid} failed:\n"
            f"{traceback.format_exc().rstrip()}")


def _deliver(run: _ChildRun, tracer: Any) -> None:
    from .export import read_clock_anchor
    from ._trace import as_trace

    trace = as_trace(tracer)
    trace.pid, trace.parent_pid = run.pid, run.parent_pid
    trace.clock_anchor, trace.process_name = read_clock_anchor(), _process_name(run)
    try:
        run.plan.deliver(trace)
    except BaseException:  # noqa: B036 - a child's end: told, never raised into it
        say(f"frametrace: the trace of child process {run.pid} could not be written:\n"
            f"{traceback.format_exc().rstrip()}")
    finally:
        tracer.clear()


def _process_name(run: _ChildRun) -> str:
    """"child PID of PARENT", with multiprocessing's name of the process, or
    "DataLoader worker N of PARENT" in torch's DataLoader worker N (as
    torch calls its workers), after "rank N " in a rank."""
    from ._ranks import distributed_info, rank_of

    rank = rank_of(distributed_info())
    where = "" if rank is None else f"rank {rank} "
    worker = _dataloader_worker_id()
    if worker is not None:
        return f"{where}DataLoader worker {worker} of {run.parent_pid}"
    what = ""
    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        current = process.current_process()
        if current is not None and current.name != "MainProcess":
            what = f" ({current.name})"
    return f"{where}child {run.pid}{what} of {run.parent_pid}"


def _dataloader_worker_id() -> Optional[int]:
    """Which worker of a torch DataLoader this process is (torch's
    ``get_worker_info().id``), None in any other; torch is not imported."""
    data = sys.modules.get("torch.utils.data")
    get = getattr(data, "get_worker_info", None)
    if get is None:
        return None
    try:
        worker_id = get().id
    except Exception:  # noqa: BLE001 - not a worker (None), or a torch without it
        return None
    return worker_id if isinstance(worker_id, int) and not isinstance(worker_id, bool) else None


atexit.register(finish)

# Never in a child's trace.
_OWN_CODE = tuple(f.__code__ for f in (
    _bootstrap_child, _after_fork_in_child, _start, _arm_exits, _after_multiprocessing_bootstrap,
    _on_sigterm, die_of_sigterm, step, finish, _finish, _end_session, block_sigterm, _deliver,
    _process_name, _dataloader_worker_id, _preparation_data, _sigterm_is_free, new_watch,
    watch_sigterm, SigtermWatch._fire, SigtermWatch.relay, SigtermWatch.close, SigtermWatch._end_thread))


def parent_code() -> tuple:
    """What runs in a parent that traces its children, kept out of its trace."""
    return (_preparation_data.__code__, _Bootstrap.__init__.__code__, Plan.__init__.__code__)


del _tracer  # imported for the extension's at-fork hooks to be registered first
