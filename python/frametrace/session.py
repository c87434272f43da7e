"""Profiling sessions (``frametrace.profile``): a training loop profiled
over a schedule of steps, with user ranges, and the Python tracer limited
to the first active steps; how to use them: docs/sessions.md.

Everything the session itself runs while the Python tracer is on is kept out
of the trace: its methods are ignored by the tracer, it reads the clock
through the extension, and ranges are a C type.
"""
from __future__ import annotations

import atexit
import builtins
import collections
import functools
import os
import sys
import threading
import traceback
import warnings
from types import FrameType
from typing import Any, Callable, Literal, Optional, Sequence, Union

from . import _children, _running, _tracer
from ._output import say
from ._ranks import distributed_info
from .export import read_clock_anchor
from .schedule import ProfilerAction, Schedule
from ._trace import RangeRecord, StepRecord, Trace
from .tracer import Options, Tracer

_now = _tracer._clock_ns  # a C function of the extension: never traced
_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def trace_handler(directory: Union[str, "os.PathLike[str]"], *,
                  compress: bool = False, format: Optional[str] = None) -> Callable[[Trace], str]:
    """An ``on_trace_ready`` handler that writes each trace to directory, as
    Chrome trace JSON ``frametrace.<pid>.<cycle>.json`` (``.json.gz`` with
    compress=True; ``frametrace.rank<N>.<pid>.<cycle>.json`` for a rank of
    a distributed job), which the Perfetto UI opens (``frametrace view``)
    and ``frametrace.load()`` reads.  format: "json" (the default),
    "json.gz", "pftrace", or "parquet": directory is then a dataset each
    trace adds its tables to, partitioned by rank and cycle (also when
    directory's name ends in ``.parquet``; needs ``pip install
    'frametrace[data]'``).  (``Trace.save(path)`` writes one trace now.)"""
    directory = os.fspath(directory)
    if format is None:
        format = "parquet" if directory.rstrip(os.sep).endswith(".parquet") else \
            "json.gz" if compress else "json"
    if format not in _HANDLER_FORMATS:
        raise ValueError(f"format must be one of {', '.join(map(repr, _HANDLER_FORMATS))}, "
                         f"got {format!r}")
    if compress and format != "json.gz":
        raise ValueError(f"compress=True goes only with format 'json.gz', not {format!r}")
    if format == "parquet":
        from ._dataset import check_available

        check_available()
    return _Saver(directory, "." + format)


_HANDLER_FORMATS = ("json", "json.gz", "pftrace", "parquet")


class _Saver:
    """frametrace.trace_handler()'s handler: a class, not a closure, so that
    it pickles (a child process started with spawn gets it, see
    profile(trace_children=True))."""

    def __init__(self, directory: str, suffix: str):
        self.directory = directory
        self.suffix = suffix

    def __call__(self, trace: Trace) -> str:
        if self.suffix == ".parquet":  # the directory is the dataset, whatever its name
            from ._dataset import write_dataset

            write_dataset(trace, self.directory)
            return self.directory
        # {rank} is the trace's, when it has one (Trace.save()).
        rank = "" if trace.distributed is None or trace.distributed.get("rank") is None else "rank{rank}."
        return trace.save(os.path.join(self.directory,
                                       f"frametrace.{rank}{trace.pid}.{trace.cycle}{self.suffix}"))

    def __repr__(self) -> str:
        if self.suffix in (".json", ".json.gz"):
            return f"frametrace.trace_handler({self.directory!r}, compress={self.suffix == '.json.gz'})"
        return f"frametrace.trace_handler({self.directory!r}, format={self.suffix[1:]!r})"


class range(_tracer.Range):  # noqa: A001 - the public name is frametrace.range
    """``with frametrace.range("forward"):`` marks a named span, recorded
    while a session records (whether or not Python tracing is on).  Also a
    decorator: ``@frametrace.range("load")``."""

    __slots__ = ()

    def __call__(self, func: Callable) -> Callable:
        if not callable(func):
            raise TypeError(f"range() decorates a callable, not {type(func).__name__}")
        name = self.name

        @functools.wraps(func)
        def ranged(*args: Any, **kwargs: Any) -> Any:
            with _tracer.Range(name):
                return func(*args, **kwargs)

        return ranged


def _pair_ranges(marks: Sequence[tuple], start_ns: int, end_ns: int,
                 open_before: Optional[dict] = None) -> list:
    """Range marks ("B"/"E", name, thread_id, ns) -> RangeRecords, within
    [start_ns, end_ns]; open_before: {thread_id: [(name, ns), ...]} the
    ranges open when the window began (from its start, open_at_start)."""
    open_by_thread: dict = {tid: [(name, start_ns, True) for name, _ns in stack]
                            for tid, stack in (open_before or {}).items()}
    done = []
    for mark, name, tid, ns in marks:
        ns = min(max(ns, start_ns), end_ns)
        stack = open_by_thread.setdefault(tid, [])
        if mark == "B":
            stack.append((name, ns, False))
            continue
        i = _innermost(stack, name)
        if i < 0:
            done.append(RangeRecord(name, tid, start_ns, ns, open_at_start=True))
            continue
        # Inner ranges left open by an exception end here too.
        for inner_name, inner_start, inner_oas in stack[i:]:
            done.append(RangeRecord(inner_name, tid, inner_start, ns, open_at_start=inner_oas))
        del stack[i:]
    for tid, stack in open_by_thread.items():
        for name, ns, oas in stack:
            done.append(RangeRecord(name, tid, ns, end_ns, open_at_start=oas, open_at_end=True))
    done.sort(key=lambda r: (r.thread_id, r.start_ns, -r.end_ns))
    return done


def _fold_ranges(open_ranges: dict, marks: Sequence[tuple]) -> None:
    """Keeps in open_ranges ({thread_id: [(name, ns), ...]}) the ranges that
    marks leave open: the state a window starts from."""
    for mark, name, tid, ns in marks:
        stack = open_ranges.setdefault(tid, [])
        if mark == "B":
            stack.append((name, ns))
            continue
        i = _innermost(stack, name)
        if i >= 0:
            del stack[i:]  # and the inner ones an exception left open
        if not stack:
            del open_ranges[tid]


def _innermost(stack: list, name: str) -> int:
    """Where the innermost open range of that name is in a thread's stack of
    (name, ...) entries, or -1."""
    for i in reversed(builtins.range(len(stack))):
        if stack[i][0] == name:
            return i
    return -1


class _Window:
    """One active window of a session."""

    __slots__ = ("cycle", "start_ns", "tracer", "marks", "steps", "python_steps_left",
                 "open_before")

    def __init__(self, cycle: int, start_ns: int, python_steps: Optional[int],
                 open_before: dict):
        self.cycle = cycle
        self.start_ns = start_ns
        self.tracer: Optional[Tracer] = None
        self.marks: list = []
        self.open_before = open_before  # ranges open when it began
        self.steps: list = []
        self.python_steps_left = python_steps  # None: every step


# At most this many windows wait for on_trace_ready, the one it is running
# on included: a loop whose windows close faster than they are written
# waits at the close rather than keeping every window's rings.
_MAX_PENDING = 2


class _ThreadFlags(threading.local):
    writer = False  # this thread is a session's writer


_flags = _ThreadFlags()


class _Writer:
    """Runs a session's on_trace_ready off the training thread: one thread,
    the windows in order, started when a window closes and ending when none
    is left.  Not a daemon: the interpreter's exit waits for the writes."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        # (handler or None, trace, the trace it replaces as last_trace)
        self.queue: collections.deque = collections.deque()
        self.thread: Optional[threading.Thread] = None
        self.errors: list = []  # (cycle, exception) not raised yet
        self.ending: Optional[threading.Thread] = None  # the thread, done, ending

    def settle(self) -> bool:
        """Before a window's tracer starts: waits for the writes still
        pending and for the writer thread's end, so that no trace records
        the writer (a tracer records every thread); whether it waited for
        a write."""
        with self.cond:
            waited = bool(self.queue)
            while self.queue or self.thread is not None:
                self.cond.wait()
        ending = self.ending
        if ending is not None and self.thread is None:
            ending.join()
            self.ending = None
        return waited

    def submit(self, handler: Optional[Callable[[Trace], Any]], trace: Trace,
               previous: Optional[Trace]) -> None:
        """Hands trace over to handler, and previous (the session's last
        trace until now) to be let go: freeing a tracer's rings takes
        milliseconds, none of them the training thread's."""
        with self.cond:
            while len(self.queue) >= _MAX_PENDING:
                self.cond.wait()
            self.queue.append((handler, trace, previous))
            if self.thread is not None:
                return
            thread = threading.Thread(target=self._run, name="frametrace-writer", daemon=False)
            try:
                thread.start()
            except RuntimeError:
                # No new thread (the interpreter is exiting): run it here.
                self.queue.pop()
            else:
                self.thread = thread
                _writers.add(self)
                return
        if handler is not None:
            self._call(handler, trace)

    def _call(self, handler: Callable[[Trace], Any], trace: Trace) -> None:
        try:
            handler(trace)
        except BaseException as exc:  # noqa: B036 - raised at the next step() or exit
            with self.cond:
                self.errors.append((trace.cycle, exc))

    def _run(self) -> None:
        _flags.writer = True
        # The program goes on beside this thread: its long work with the
        # GIL (torch's join, rendering slices) gives the GIL away in turns.
        _tracer._share_gil(True)
        while True:
            with self.cond:
                if not self.queue:
                    self.thread = None
                    self.ending = threading.current_thread()
                    _writers.discard(self)
                    self.cond.notify_all()
                    return
                handler, trace, previous = self.queue[0]
            if handler is not None:
                self._call(handler, trace)
            with self.cond:
                self.queue.popleft()
                self.cond.notify_all()
            # Outside the lock: the tracers (their rings) no one else holds
            # are freed here.
            del handler, trace, previous

    def wait(self) -> None:
        """Returns when every window handed over has been handled."""
        with self.cond:
            while self.queue:
                self.cond.wait()

    def take_error(self) -> Optional[BaseException]:
        with self.cond:
            if not self.errors:
                return None
            cycle, exc = self.errors.pop(0)
        _note(exc, f"frametrace: raised by on_trace_ready for cycle {cycle}, "
                   f"on the session's writer thread")
        return exc

    def forget(self) -> None:
        """In a forked child: the parent's writes are the parent's."""
        self.cond = threading.Condition(threading.Lock())
        self.queue.clear()
        self.thread = self.ending = None
        self.errors.clear()


def _note(exc: BaseException, note: str) -> None:
    add_note = getattr(exc, "add_note", None)  # 3.11+
    if add_note is not None and note not in getattr(exc, "__notes__", ()):
        add_note(note)


_writers: set = set()  # writers whose thread runs


class Profile:
    """A profiling session; see ``frametrace.profile``."""

    def __init__(
        self,
        *,
        schedule: Optional[Callable[[int], ProfilerAction]] = None,
        python_steps: Optional[int] = None,
        on_trace_ready: Optional[Callable[[Trace], Any]] = None,
        trace_children: bool = False,
        options: Optional[Options] = None,
        _ignore: Sequence[Any] = (),
        _children_ready: Optional[Callable[[Trace], Any]] = None,
        _step_hook: Optional[Callable[[bool], None]] = None,
        _trace_extra: Optional[dict] = None,
        **tracer_options: Any,
    ):
        if schedule is not None and not callable(schedule):
            raise TypeError(f"schedule must be frametrace.schedule(...) or a callable, "
                            f"not {type(schedule).__name__}")
        if python_steps is not None:
            if isinstance(python_steps, bool) or not isinstance(python_steps, int):
                raise TypeError(f"python_steps must be an int or None, not {type(python_steps).__name__}")
            if python_steps < 0:
                raise ValueError(f"python_steps must be >= 0, got {python_steps}")
            if isinstance(schedule, Schedule) and python_steps > schedule.active:
                raise ValueError(f"python_steps={python_steps} is larger than the schedule's "
                                 f"active={schedule.active}: Python can only be traced in active steps")
        if on_trace_ready is not None and not callable(on_trace_ready):
            raise TypeError(f"on_trace_ready must be callable, not {type(on_trace_ready).__name__}")
        self.options = Options.given("profile", options, tracer_options)
        Tracer(options=self.options)  # the backend runs in this Python: said now
        if not isinstance(trace_children, bool):
            raise TypeError(f"trace_children must be True or False, not {type(trace_children).__name__}")
        # What a child hands its trace to: on_trace_ready, or another
        # profiler's handler of Python-only traces (frametrace.torch's).
        deliver = on_trace_ready if _children_ready is None else _children_ready
        if trace_children and deliver is None:
            raise ValueError("trace_children=True needs on_trace_ready (frametrace.trace_handler(dir), say): "
                             "each child hands its trace to it")
        self.schedule = schedule
        # Decided once, not with isinstance() at each step: a C call the
        # tracer would record.  Schedule._action is ignored code, with no calls.
        self._step_action: Optional[Callable[[int], ProfilerAction]] = (
            schedule._action if isinstance(schedule, Schedule) else schedule)
        self.python_steps = python_steps
        self.on_trace_ready = on_trace_ready
        # Code kept out of this session's traces besides its own (the CLI's, runpy's).
        self._ignored = _SESSION_CODE + tuple(_ignore)
        self._children: Optional[_children.Plan] = None
        if trace_children:
            assert deliver is not None  # checked above
            self._ignored += _children.parent_code()
            self._children = _children.Plan(self.options, deliver, self._ignored,
                                            schedule, python_steps)
        self.step_num = 0
        self.last_trace: Optional[Trace] = None
        self._action = ProfilerAction.NONE
        self._window: Optional[_Window] = None
        # The next window's tracer, armed during warmup (see _prepare()).
        self._prepared: Optional[Tracer] = None
        self._step_start = 0
        self._cycle = 0
        self._entered = False
        self._finished = False
        self._forked = False  # this process is a fork of the one that entered
        self._writer = _Writer()
        # Range marks between windows, folded at each step into the ranges
        # open, so that a window knows those that began before it.
        self._outside_marks: list = []
        self._open_ranges: dict = {}
        # Another profiler's step (frametrace.torch): _step_hook(False) in
        # each step() after the step ended and its window closed (the
        # tracer stopped), before the next step begins; _step_hook(True) at
        # exit, before the handlers are waited for.  The tracer records
        # it only between two steps of one window.
        self._step_hook = _step_hook
        self._trace_extra = dict(_trace_extra or {})  # more Trace fields (a traced child's session)
        self._unregister: Optional[Callable[[], None]] = None

    def ignore_code(self, codes: Sequence[Any]) -> None:
        """Keeps these code objects out of this process's traces of the
        session (not its children's): the frames of frametrace's own
        wrappers (``frametrace run``, ``frametrace.torch``)."""
        self._ignored += tuple(codes)

    # -- the public protocol ---------------------------------------------

    def __enter__(self) -> "Profile":
        self._unregister = _running.register_session(self, self._first_entry, _step_session)
        try:
            if self._children is not None:
                _children.enable(self._children)
            _tracer._set_range_sink(self._outside_marks)
            self._begin_step(_now())
        except BaseException:
            self._release()
            raise
        return self

    def _first_entry(self) -> None:
        if self._entered:
            raise RuntimeError("this session has already run; create a new one")
        self._entered = True

    def step(self) -> None:
        """Ends the current step of the loop and starts the next (nothing, in
        a process forked from the one running the session)."""
        if self._forked:
            _children.step()  # a traced child's own session, if any
            return
        if not self._entered or self._finished:
            raise RuntimeError("step() called outside a session: use it inside "
                               "'with frametrace.profile(...) as prof:'")
        if _flags.writer:
            raise RuntimeError(_ON_WRITER.format("step()"))
        window = self._window
        # Stop Python tracing first thing, so that nothing of the session's
        # own work lands in the trace.
        if window is not None and window.tracer is not None and (
                window.python_steps_left == 1 or self._action is ProfilerAction.RECORD_AND_SAVE):
            window.tracer.stop()
        now = _now()
        if window is not None:
            # Plain tuples and +=: no call the tracer would see.
            window.steps += [(self.step_num, self._step_start, now)]
            if window.python_steps_left is not None:
                window.python_steps_left -= 1
            if self._action is ProfilerAction.RECORD_AND_SAVE:
                self._close_window(now)
        self.step_num += 1
        if self._window is None and self._outside_marks:
            self._fold_outside()
        if self._step_hook is not None:
            try:
                self._step_hook(False)
            finally:
                self._begin_step(now)
        else:
            self._begin_step(now)
        if self._writer.errors:  # an attribute, no call: nothing in the trace
            self._raise_pending()

    def stop(self) -> None:
        """Stops Python tracing now; the session goes on recording steps and
        ranges to the end of its window."""
        if _flags.writer:
            raise RuntimeError(_ON_WRITER.format("stop()"))
        window = self._window
        if window is not None and window.tracer is not None:
            window.tracer.stop()
            window.python_steps_left = 0

    def __exit__(self, *exc_info: object) -> Literal[False]:
        if not self._entered:
            # Marking it finished would break the 'with' that comes later.
            raise RuntimeError("__exit__() of a session that was never entered: use "
                               "'with frametrace.profile(...) as prof:'")
        if _flags.writer:
            raise RuntimeError(_ON_WRITER.format("__exit__()"))
        try:
            if self._window is not None:
                window = self._window
                if window.tracer is not None:
                    window.tracer.stop()
                now = _now()
                window.steps += [(self.step_num, self._step_start, now)]
                self._close_window(now)
        finally:
            try:
                try:
                    if self._step_hook is not None and not self._forked:
                        self._step_hook(True)
                finally:
                    if not self._forked:
                        self._writer.wait()
            finally:
                self._finished = True
                self._release()
        error = self._writer.take_error()
        if error is not None:
            # The body's own exception, if any, goes on; the handler's is told.
            if exc_info and exc_info[0] is not None:
                _report(error)
            else:
                self._report_rest()
                raise error
        return False

    # -- windows -------------------------------------------------------------

    def _begin_step(self, now: int) -> None:
        self._step_start = now
        if self._step_action is None:
            self._action = ProfilerAction.RECORD
        else:
            self._action = self._step_action(self.step_num)
        if self._action in _RECORDING:
            if self._window is None:
                self._open_window(now)
        elif self._action is ProfilerAction.WARMUP:
            if self._prepared is None and self.python_steps != 0:
                self._prepare()
        elif self._prepared is not None:
            self._unprepare()  # a schedule that went from warmup to wait

    def _prepare(self) -> None:
        """At the start of warmup: the next window's tracer made and armed
        (conflict checks, thread names, its ring, the hook on every thread
        or the sys.monitoring tool id), recording off, so that the first
        active step pays neither that nor, on 3.12+, CPython's
        instrumentation of the code it runs."""
        tracer = Tracer(options=self.options)
        for code in self._ignored:
            tracer._ignore(code)
        tracer.arm()  # refused (another profiler): raised from this step
        self._prepared = tracer

    def _unprepare(self) -> None:
        tracer, self._prepared = self._prepared, None
        if tracer is not None:
            tracer.disarm()

    def _fold_outside(self) -> None:
        marks, self._outside_marks = self._outside_marks, []
        _tracer._set_range_sink(self._outside_marks)
        _fold_ranges(self._open_ranges, marks)

    def _open_window(self, now: int) -> None:
        if self.python_steps != 0 and self._writer.settle():
            # The window starts once the previous one is written.
            now = self._step_start = _now()
        self._fold_outside()
        window = _Window(self._cycle, now, self.python_steps,
                         {tid: list(stack) for tid, stack in self._open_ranges.items()})
        self._cycle += 1
        self._window = window
        _tracer._set_range_sink(window.marks)
        if self.python_steps != 0:
            tracer, self._prepared = self._prepared, None
            if tracer is None:  # no warmup: made and armed now
                tracer = Tracer(options=self.options)
                for code in self._ignored:
                    tracer._ignore(code)
            try:
                tracer.start()  # armed: the clock and the threads, in C
            except BaseException:
                # Refused (another profiler holds the hook): the window is
                # dropped, so that this error is the one the program sees,
                # not one from closing a window with a tracer that never ran.
                self._window = None
                _tracer._set_range_sink(self._outside_marks)
                raise
            window.tracer = tracer

    def _close_window(self, now: int) -> None:
        window = self._window
        assert window is not None
        self._window = None
        _tracer._set_range_sink(self._outside_marks)
        tracer = window.tracer
        if tracer is not None:
            tracer.stop()
        _fold_ranges(self._open_ranges, window.marks)
        trace = Trace(
            ranges=_pair_ranges(window.marks, window.start_ns, now, window.open_before),
            steps=[StepRecord(f"step#{n}", n, start, end) for n, start, end in window.steps],
            session_start_ns=window.start_ns,
            session_end_ns=now,
            tracer_start_ns=tracer.start_ns if tracer is not None else None,
            tracer_stop_ns=tracer.stop_ns if tracer is not None else None,
            stats=tracer.stats if tracer is not None else _tracer.Stats((0, 0)),  # stopped: known
            pid=os.getpid(),
            threads=tracer.threads if tracer is not None else [],
            cycle=window.cycle,
            tracer=tracer,
            clock_anchor=read_clock_anchor(),
            distributed=distributed_info(),
            **self._trace_extra,
        )
        if trace.stats.dropped:
            _warn_dropped(trace, self.options)
        previous, self.last_trace = self.last_trace, trace
        if previous is not None and previous.tracer is None:
            previous = None  # nothing costly to free
        if self.on_trace_ready is not None or previous is not None:
            # Off the training thread: the loop goes on while it writes.
            self._writer.submit(self.on_trace_ready, trace, previous)

    def _raise_pending(self) -> None:
        error = self._writer.take_error()
        if error is not None:
            raise error

    def _report_rest(self) -> None:
        while True:
            error = self._writer.take_error()
            if error is None:
                return
            _report(error)

    def _release(self) -> None:
        unregister, self._unregister = self._unregister, None
        if unregister is not None:
            unregister()
        if self._children is not None:
            _children.disable(self._children)
        self._unprepare()
        _tracer._set_range_sink(None)
        if self._window is not None:
            if self._window.tracer is not None:
                self._window.tracer.stop()
            self._window = None


def _after_fork_in_child() -> None:
    """A forked child does not go on with its parent's session: the
    extension stopped the window's tracer at the fork; here the session is
    detached, so that it records nothing and delivers no trace."""
    for writer in _writers:
        writer.forget()
    _writers.clear()
    session = _running.forget_session()
    if session is not None:
        session._forked = True
        session._window = None
        session._prepared = None  # the extension disarmed it at the fork
        _tracer._set_range_sink(None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_ON_WRITER = ("{} called from on_trace_ready: the handler runs on the session's writer "
              "thread, beside the training loop, and cannot step or end the session")


def _report(error: BaseException) -> None:
    """A handler's exception that cannot be raised: written to stderr."""
    say("frametrace: on_trace_ready failed:\n" + "".join(
        traceback.format_exception(type(error), error, error.__traceback__)).rstrip())


def _report_at_exit() -> None:
    """A session never ended: its writes are done (the interpreter waited
    for the writer thread); what failed is told, not lost."""
    session = _running.session
    if session is not None and not session._forked:
        session._writer.wait()
        session._report_rest()


atexit.register(_report_at_exit)


def _warn_dropped(trace: Trace, options: Options) -> None:
    """Says, at the step() that closes it, that a window's rings overflowed
    (a lazy torch.compile, an import or any first call may record far more
    than a step does)."""
    steps = f", steps {trace.steps[0].step}-{trace.steps[-1].step}" if trace.steps else ""
    # Told at the program's line (its step() or with), whichever of
    # frametrace's step()s or exits it went through.
    package = os.path.dirname(__file__) + os.sep
    level = 2  # the caller of this function
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(package):
        level, frame = level + 1, frame.f_back
    held = trace.tracer.ring_bytes if trace.tracer is not None else None
    name, value = options.to_keep(trace.stats.dropped_records or 2 * (trace.stats.dropped or 0), held)
    if name == "max_memory":
        why = f"the threads' rings together reached max_memory={options.max_memory:,} bytes"
    else:
        why = (f"per thread: buffer_size is {options.buffer_size:,} records, a call and a "
               f"return are two")
    hint = (f"{name}={value} would have kept them" if value is not None
            else f"even buffer_size={_tracer.MAX_BUFFER_SIZE}, the most, would not keep them all")
    warnings.warn(f"frametrace: {trace.stats.dropped:,} events of cycle {trace.cycle}{steps} were lost "
                  f"entirely (the oldest, {why}); {hint}", RuntimeWarning, stacklevel=level)


def profile(
    *,
    schedule: Optional[Callable[[int], ProfilerAction]] = None,
    python_steps: Optional[int] = None,
    on_trace_ready: Optional[Callable[[Trace], Any]] = None,
    trace_children: bool = False,
    options: Optional[Options] = None,
    **tracer_options: Any,
) -> Profile:
    """A profiling session (a context manager).

    schedule: ``frametrace.schedule(...)`` (or any step -> ProfilerAction
    callable); None records everything between enter and exit as one window.
    python_steps: trace Python only in the first N active steps of each
    window (default: all of them); the tracer's stop is latched and the
    window goes on recording steps and ranges.  on_trace_ready(trace) is
    called after each active window ends, on the session's writer thread
    while the loop goes on, windows in order (``frametrace.trace_handler(dir)``
    writes them to files); what it raises is raised by the next
    ``prof.step()`` or at exit, which waits for it.  ``prof.stop()`` stops
    Python tracing early.
    buffer_size, c_calls, backend, max_memory, ignore, include: the
    tracers' options (``frametrace.Options``; :doc:`/tracing`
    describes the patterns), one by one or as ``options=`` (not both);
    ``prof.options`` holds them.
    trace_children: every child process started while the session runs
    (fork, spawn, forkserver) traces itself and hands its trace to
    ``on_trace_ready`` in the child, which must pickle for spawn and
    forkserver: :doc:`/distributed`.
    """
    return Profile(schedule=schedule, python_steps=python_steps, on_trace_ready=on_trace_ready,
                   trace_children=trace_children, options=Options.given("profile", options,
                                                                         tracer_options))


def step() -> None:
    """Ends the current step of the running session (``prof.step()`` of the
    ``frametrace.profile`` that is active, in any thread), and does nothing
    when no session runs: a program can mark its steps and run untraced,
    under ``frametrace run --steps``, or under its own session."""
    # The session's step, else the flight recorder's, else a traced
    # child's (profiled on the parent's schedule from its first step).
    receiver = _running.step_receiver
    if receiver is not None:
        receiver()


def _step_session() -> None:  # frametrace.step() while a session runs
    session = _running.session
    if session is not None and not _flags.writer:
        session.step()


def _nested_code(func: Callable, name: str):
    return next(c for c in func.__code__.co_consts if getattr(c, "co_name", None) == name)


# The session's own code, never recorded by the tracers it starts.
_SESSION_CODE: tuple = (
    Profile.__enter__, Profile.step, Profile.stop, Profile.__exit__,
    Profile._begin_step, Profile._prepare, Profile._unprepare, Profile._open_window,
    Profile._close_window, Profile._release, Profile._first_entry,
    Profile._raise_pending, _Writer.take_error, _Writer.submit, _Writer._run, _Writer._call,
    Schedule._action, _nested_code(range.__call__, "ranged"), step, _step_session,
)
