"""The flight recorder: a tracer that runs for the whole job and writes the
trace of the steps that went wrong (``frametrace.flight_recorder``).

    with frametrace.flight_recorder("dumps") as recorder:
        for batch in loader:
            train_step(batch)
            frametrace.step()

Every ``frametrace.step()`` (or ``recorder.step()``) marks where each
thread's records are (``Tracer.mark()``).  A dump is a snapshot of the
records since the mark of the step ``steps`` steps back
(``Tracer.snapshot(since=...)``), written by a writer thread.  When dumps
are taken, what they hold and what they cost: :doc:`/flight-recorder`;
``StepBounds`` decides which step is slow or hung.

A running recorder is registered in ``frametrace._running`` (``frametrace
attach --dump`` asks it there), and, on Linux, names its signal and dump_dir to other
processes in a memfd it keeps open, named
``frametrace-flight-recorder-PID`` (``/proc/PID/fd``): it goes with the
process, and a forked child's copy names its parent.  ``attach --dump``
sends that signal when it cannot ask through ``sys.remote_exec``.
"""
from __future__ import annotations

import bisect
import collections
import json
import os
import re
import signal as signal_module
import socket
import sys
import threading
import time
from typing import Any, Callable, Optional, Union

from . import _running, _tracer
from .export import read_clock_anchor, write_trace
from ._trace import StepRecord, Trace, as_trace
from .tracer import Options, Tracer

__all__ = ["FlightRecorder", "flight_recorder"]

_DEFAULT_SIGNAL = getattr(signal_module, "SIGUSR2", None)
ADVERT_PREFIX = "frametrace-flight-recorder-"  # + pid: the memfd's name


# The slow-step bound's statistics: the median of the last WINDOW steps,
# and the noise: the NOISE_QUANTILE of the last NOISE_WINDOW steps (a few
# slow steps do not move it; a busy machine's delays or steps that vary
# do).  A step is slow past SPREAD times the noise's distance above the
# median: on a 2-core machine kept busy by other processes, 0.3 ms steps
# stayed under it in 100,000 (benchmarks/flight_noise.py).
WINDOW = 101
NOISE_WINDOW = 5000
NOISE_QUANTILE = 0.999
SPREAD = 3.0
# ... and past the median plus SLOW_MARGIN_MS (slow_margin_ms): a quiet
# machine's rare delays.
SLOW_MARGIN_MS = 100.0
# A hang (hang_ms=None): HANG_FACTOR times the slow-step bound, at least
# HANG_MIN_NS.
HANG_FACTOR = 10.0
HANG_MIN_NS = 1_000_000_000


class StepBounds:
    """Which step is slow, and when a running one has hung, from the
    durations (ns) of the recent steps; see docs/flight-recorder.md.
    The flight recorders' one implementation (the torch one inherits it),
    kept apart so its statistics are tested on made-up durations.

    ``slow_ns`` is None while no step would be slow (the first ``warmup``
    steps, without slow_ms); ``hang_ns`` likewise."""

    __slots__ = ("slow_factor", "slow_ms", "margin_ms", "hang_ms", "warmup", "durations",
                 "_recent", "_noise", "_ordered", "slow_ns", "hang_ns")

    def __init__(self, *, slow_factor: Optional[float], slow_ms: Optional[float],
                 margin_ms: float, hang_ms: Optional[float], warmup: int):
        self.slow_factor, self.slow_ms, self.margin_ms = slow_factor, slow_ms, margin_ms
        self.hang_ms, self.warmup = hang_ms, warmup
        # Each window in order and sorted (kept so, not sorted every step).
        self.durations: collections.deque = collections.deque()  # the last WINDOW
        self._recent: list = []
        self._noise: collections.deque = collections.deque()  # the last NOISE_WINDOW
        self._ordered: list = []
        self.slow_ns: Optional[float] = None
        self.hang_ns: Optional[float] = None
        self._update()

    def add(self, duration_ns: int) -> bool:
        """Counts a step that ended; whether it was slow (against the bound
        of the steps before it)."""
        bound = self.slow_ns
        for window, ordered, size in ((self.durations, self._recent, WINDOW),
                                      (self._noise, self._ordered, NOISE_WINDOW)):
            window.append(duration_ns)
            bisect.insort(ordered, duration_ns)
            if len(window) > size:
                del ordered[bisect.bisect_left(ordered, window.popleft())]
        self._update()
        return bound is not None and duration_ns > bound

    def _update(self) -> None:
        # Runs every step, traced: inline, no statistics.median() frames.
        bound = self.slow_ms * 1e6 if self.slow_ms is not None else None
        n = len(self.durations)
        if self.slow_factor is not None and n >= max(self.warmup, 1):
            ordered = self._recent
            median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
            noise = self._ordered[int(NOISE_QUANTILE * len(self._ordered))]
            recent = max(self.slow_factor * median, median + SPREAD * (noise - median),
                         median + self.margin_ms * 1e6)
            bound = recent if bound is None or recent < bound else bound
        self.slow_ns = bound
        if self.hang_ms is not None:
            self.hang_ns = self.hang_ms * 1e6
        else:
            self.hang_ns = None if bound is None else max(HANG_FACTOR * bound, HANG_MIN_NS)


class FlightRecorder:
    """See ``frametrace.flight_recorder``."""

    def __init__(self, dump_dir: Union[str, "os.PathLike[str]"], *, steps: int = 3,
                 slow_factor: Optional[float] = 3.0, slow_ms: Optional[float] = None,
                 slow_margin_ms: float = SLOW_MARGIN_MS, hang_ms: Optional[float] = None,
                 warmup: int = 5, format: str = "json", signal: Any = _DEFAULT_SIGNAL,
                 max_dumps: int = 10, min_interval: float = 60.0, watchdog: bool = True,
                 options: Optional[Options] = None, **tracer_options: Any):
        self.dump_dir = os.fspath(dump_dir)
        for name, value in (("steps", steps), ("warmup", warmup), ("max_dumps", max_dumps)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, not {type(value).__name__}")
            if value < (1 if name == "steps" else 0):
                raise ValueError(f"{name} must be >= {1 if name == 'steps' else 0}, got {value}")
        numbers: tuple[tuple[str, Any], ...] = (
            ("slow_factor", slow_factor), ("slow_ms", slow_ms), ("slow_margin_ms", slow_margin_ms),
            ("hang_ms", hang_ms), ("min_interval", min_interval))
        for name, number in numbers:
            if number is None and name in ("slow_factor", "slow_ms", "hang_ms"):
                continue
            if isinstance(number, bool) or not isinstance(number, (int, float)):
                raise TypeError(f"{name} must be a number, not {type(number).__name__}")
            if not number >= 0 or (name == "slow_factor" and number <= 1) \
                    or (name == "hang_ms" and number <= 0):
                least = {"slow_factor": "> 1", "hang_ms": "> 0"}.get(name, ">= 0")
                raise ValueError(f"{name} must be {least}, got {number}")
        if slow_factor is None and slow_ms is None:
            raise ValueError("slow_factor and slow_ms are both None: no step would be slow")
        if format not in ("json", "json.gz", "pftrace", "parquet"):
            raise ValueError(f"format must be 'json', 'json.gz', 'pftrace' or 'parquet', "
                             f"got {format!r}")
        if format == "parquet":  # refused now, not at the first dump
            from ._dataset import check_available

            check_available()
        if signal is not None and not isinstance(signal, int):
            raise TypeError(f"signal must be a signal number or None, not {type(signal).__name__}")
        self.steps, self.slow_factor, self.slow_ms = steps, slow_factor, slow_ms
        self.slow_margin_ms, self.hang_ms = slow_margin_ms, hang_ms
        self.warmup, self.format, self.signal = warmup, format, signal
        self.max_dumps, self.min_interval, self.watchdog = max_dumps, float(min_interval), watchdog
        self.tracer = Tracer(options=Options.given("flight_recorder", options, tracer_options))
        self.dumps: list[str] = []  # the files written, in order
        self.errors: list[BaseException] = []  # raised writing a dump, or relaying the signal
        self.step_number = 0
        self._lock = threading.RLock()
        self._marks: collections.deque = collections.deque(maxlen=steps)  # (step, mark, ns)
        self._bounds = StepBounds(slow_factor=slow_factor, slow_ms=slow_ms,
                                  margin_ms=slow_margin_ms, hang_ms=hang_ms, warmup=warmup)
        self._step_start = 0
        self._hang_dumped = -1  # the step the watchdog dumped
        self._hang_path: Optional[str] = None  # its dump, if one was taken
        self._last_dump = float("-inf")
        self._taken = 0
        self._queue: collections.deque = collections.deque()
        self._wake = threading.Condition(self._lock)
        self._closing = False
        self._threads: list[threading.Thread] = []
        self._old_excepthook: Any = None
        self._sockets: Optional[tuple] = None  # the signal's: (watchdog's, handler's)
        self._requests: collections.deque = collections.deque()  # (reason, done)
        self._advert = -1  # the memfd naming the signal (Linux), or -1
        self._relay_error: Optional[OSError] = None  # the watchdog's last relay failure
        self._unregister: Optional[Callable[[], None]] = None  # from _running, while entered
        # A companion recording beside the tracer (frametrace.torch's
        # flight recorder): _between_steps() runs in step() after a step
        # ended, before the next begins (under the lock, outside both
        # steps' durations); _on_stop() after the tracer stopped, before
        # the writer is told to finish.  Attributes, not methods: no call
        # in the plain recorder's step().
        self._between_steps: Optional[Any] = None
        self._on_stop: Optional[Any] = None

    # ---- the job's side ---------------------------------------------------

    def __enter__(self) -> "FlightRecorder":
        if _running.recorder is not None:  # said before anything starts
            raise RuntimeError("a flight recorder is running already")
        os.makedirs(self.dump_dir, exist_ok=True)
        writer = threading.Thread(target=self._write_loop, name="frametrace-dump-writer",
                                  daemon=True)
        self._threads = [writer]
        if self.watchdog or self.signal is not None:
            self._threads.append(threading.Thread(target=self._watch, daemon=True,
                                                  name="frametrace-watchdog"))
        if self.signal is not None:
            self._install_signal()
        self._old_excepthook = threading.excepthook
        try:
            for thread in self._threads:
                # The recorder's own threads are not the job: started before
                # the tracer, their work between dumps is a wait in C.
                thread.start()
            threading.excepthook = self._thread_exception
            self._advertise()  # before the start: the job's trace has none of it
            self.tracer.start()
        except BaseException:  # refused (another profiler), no thread, or interrupted
            self._unadvertise()
            self._close()  # the signal, threading.excepthook, the threads started
            raise
        try:
            self._unregister = _running.register_recorder(self)  # frametrace.step() reaches it
        except BaseException:  # another recorder entered meanwhile, in another thread
            self._stop()
            raise
        self._begin_step()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc is not None:
                self._dump(f"exception {exc_type.__name__}", limited=False, kind="exception")
        finally:
            unregister, self._unregister = self._unregister, None
            if unregister is not None:
                unregister()
            self._stop()

    def _stop(self) -> None:
        self._unadvertise()
        try:
            self.tracer.stop()  # raises an interrupt that came meanwhile, once stopped
            if self._on_stop is not None:
                self._on_stop()
        finally:
            self._close()

    def _close(self) -> None:
        threading.excepthook = self._old_excepthook
        with self._lock:
            self._closing = True
            self._restore_signal()
            self._wake.notify_all()
        if self._sockets is not None:
            self._sockets[1].send(b"\0")  # the watchdog's select returns
        for thread in self._threads:
            if thread.ident is not None:  # started (a failed start: not)
                thread.join()
        if self._sockets is not None:
            for sock in self._sockets:
                sock.close()
        self.tracer.clear()

    def step(self) -> None:
        """Ends the current step (``frametrace.step()`` calls it): a dump
        if it was slow."""
        now = time.monotonic_ns()
        with self._lock:
            if self._bounds.add(now - self._step_start):
                # A step the watchdog dumped as hung is dumped again now
                # that it ended, whole (with torch's ops, in the torch
                # recorder), whatever min_interval says.
                hung = self._hang_path if self._hang_dumped == self.step_number else None
                self._dump(f"slow step {self.step_number}", limited=hung is None, kind="slow",
                           about=None if hung is None else {"after_hang": hung})
            self.step_number += 1
            if self._between_steps is not None:
                self._between_steps()
            self._begin_step()

    def dump(self, reason: str = "requested") -> Optional[str]:
        """Dumps the last steps now (the one running cut at this moment);
        the path the writer thread will write, or None past max_dumps."""
        return self._dump(reason, limited=False)

    def request_dump(self, reason: str = "requested", done: Any = None) -> None:
        """Asks for a dump now and returns at once: the writer thread takes
        it (after a dump it may be writing) as ``dump(reason)`` would.
        done(path, error), if given, is called in that thread when the
        dump is written (error None) or failed, or when none is taken
        (path None: max_dumps reached, or the recorder ended)."""
        with self._lock:
            if not self._closing:
                self._requests.append((reason, done))
                self._wake.notify_all()
                return
        if done is not None:
            done(None, "the flight recorder has ended")

    # ---- inside -------------------------------------------------------------

    def _begin_step(self) -> None:
        self._step_start = time.monotonic_ns()
        self._marks.append((self.step_number, self.tracer.mark(), self._step_start))

    def _dump(self, reason: str, *, limited: bool, kind: str = "requested",
              done: Any = None, about: Optional[dict] = None) -> Optional[str]:
        """kind: what asked (slow, hung, signal, exception, requested, request:
        request_dump's); done: request_dump's; about: more for its metadata."""
        with self._lock:
            now = time.monotonic()
            if self._taken >= self.max_dumps or not self.tracer.active:
                return None
            if limited and now - self._last_dump < self.min_interval:
                return None
            first_step, mark, _ = self._marks[0]
            snap = self.tracer.snapshot(since=mark)
            self._taken += 1
            self._last_dump = now
            slug = re.sub(r"[^A-Za-z0-9]+", "-", reason).strip("-")[:40]
            path = os.path.join(self.dump_dir, f"frametrace-dump-{os.getpid()}-{self._taken}-"
                                               f"{slug}.{self.format}")
            # Each step from its mark to the next (the first from the
            # window's start: its clock read came just before its mark).
            bounds = [max(start, snap.start_ns) for _, _, start in self._marks] + [snap.stop_ns]
            steps = [StepRecord(f"step#{n}", n, bounds[i], max(bounds[i], bounds[i + 1]))
                     for i, (n, _, _) in enumerate(self._marks)]
            info = {"reason": reason, "steps": [first_step, self.step_number],
                    "snapshot_ns": snap.stop_ns, "window_start_ns": snap.start_ns}
            if about:
                info.update(about)
            extra = self._dump_taken(snap, info, kind)
            self._queue.append((path, snap, steps, info, done, extra))
            self._wake.notify_all()
            return path

    # What a companion adds to a dump (see _between_steps): overridden.
    def _dump_taken(self, snap: Tracer, info: dict, kind: str) -> Any:
        """Called with the lock held as a dump is taken; what it returns
        goes with the dump to _dump_ready() and _complete()."""
        return None

    def _dump_ready(self, extra: Any) -> bool:
        """(Lock held) whether the writer may write the dump now; once
        closing, it must be."""
        return True

    def _complete(self, trace: Trace, info: dict, extra: Any) -> None:
        """On the writer thread, before the dump is written."""

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while True:
                    # The first dump that may be written (in order, but one
                    # waiting for its companion lets the next go).
                    job = next((it for it in self._queue if self._dump_ready(it[5])), None)
                    if job is not None or self._requests or (self._closing and not self._queue):
                        break
                    self._wake.wait()
                requests, self._requests = self._requests, collections.deque()
                refused = []
                for reason, done in requests:
                    try:
                        if self._dump(reason, limited=False, kind="request", done=done) is None:
                            refused.append((done, f"max_dumps ({self.max_dumps}) reached"
                                            if self._taken >= self.max_dumps
                                            else "the flight recorder has ended"))
                    except Exception as exc:  # noqa: BLE001 - kept, the writer goes on
                        self.errors.append(exc)
                        refused.append((done, f"{type(exc).__name__}: {exc}"))
                if job is None:
                    job = next((it for it in self._queue if self._dump_ready(it[5])), None)
                if job is not None:
                    self._queue.remove(job)
            for done, why in refused:
                if done is not None:
                    _call(done, None, why)
            if job is None:
                if self._closing and not self._queue:
                    return
                continue
            path, snap, steps, info, done, extra = job
            error: Optional[str] = None
            try:
                trace = as_trace(snap)
                trace.steps, trace.clock_anchor = steps, read_clock_anchor()
                trace.process_name = f"python {os.getpid()} (dump: {info['reason']})"
                trace.extra_metadata = {"dump": info}
                self._complete(trace, info, extra)
                write_trace(trace, path)
            except BaseException as exc:  # noqa: B036 - kept, the job goes on
                self.errors.append(exc)
                error = f"{type(exc).__name__}: {exc}"
            else:
                self.dumps.append(path)
            finally:
                snap.clear()
            if done is not None:
                _call(done, path, error)

    def _watch(self) -> None:
        """The watchdog: dumps a step running past its bound, and the
        signal's dumps (read from the wakeup socket)."""
        import select
        period = 0.05
        while True:
            with self._lock:
                if self._closing:
                    return
                if self._sockets is not None and self.signal is not None:
                    # Chained again behind a handler installed since
                    # (signal.signal, loop.add_signal_handler for this
                    # signal); under the lock: never after _close() ended it.
                    try:
                        _tracer._relay_signal(self.signal, self._sockets[1].fileno())
                    except OSError as exc:  # the watchdog goes on: hangs, the signal
                        self._relay_failed(exc)
                    else:
                        self._relay_error = None
                bound = self._bounds.hang_ns if self.watchdog else None
                running = time.monotonic_ns() - self._step_start
                if (bound is not None and running > bound
                        and self._hang_dumped != self.step_number and _running.recorder is self):
                    self._hang_dumped = self.step_number
                    self._hang_path = self._dump(f"hung step {self.step_number}", limited=True,
                                                 kind="hung")
            if self._sockets is None:
                time.sleep(period)
                continue
            ready, _, _ = select.select([self._sockets[0]], [], [], period)
            if ready:
                data = self._sockets[0].recv(256)
                if self.signal is not None and self.signal in data and _running.recorder is self:
                    self._dump(f"signal {_signal_name(self.signal)}", limited=True, kind="signal")

    def _relay_failed(self, exc: OSError) -> None:
        """(Lock held) relaying the signal again failed: kept in errors, as a
        failed dump is, once until it succeeds again (tried every period)."""
        if self._relay_error is not None and str(self._relay_error) == str(exc):
            return
        self._relay_error = exc
        assert self.signal is not None  # only a recorder with a signal relays it
        failure = OSError(exc.errno, f"relaying {_signal_name(self.signal)} again failed "
                                     f"(its dumps may not come): {exc.strerror or exc}")
        failure.__cause__ = exc
        self.errors.append(failure)

    def _thread_exception(self, args: Any) -> None:
        self._dump(f"exception {args.exc_type.__name__} in {getattr(args.thread, 'name', '?')}",
                   limited=True, kind="exception")
        self._old_excepthook(args)

    def _install_signal(self) -> None:
        """The signal caught in C (signal_relay.c): see the module's doc."""
        assert self.signal is not None
        self._sockets = socket.socketpair()
        for sock in self._sockets:
            sock.setblocking(False)
        try:
            _tracer._relay_signal(self.signal, self._sockets[1].fileno())
        except BaseException:
            for sock in self._sockets:
                sock.close()
            self._sockets = None
            raise

    def _advertise(self) -> None:
        """The memfd that tells frametrace attach --dump the signal to send
        when it cannot ask through sys.remote_exec (see the module's doc)."""
        if not hasattr(os, "memfd_create"):
            return
        name = None if self.signal is None else _signal_name(self.signal)
        about = {"pid": os.getpid(), "signal": self.signal, "signal_name": name,
                 "caught_in_c": self.signal is not None,
                 "dump_dir": os.path.abspath(self.dump_dir), "format": self.format,
                 "max_dumps": self.max_dumps, "min_interval": self.min_interval}
        try:
            fd = os.memfd_create(f"{ADVERT_PREFIX}{os.getpid()}", os.MFD_CLOEXEC)
        except OSError:
            return  # no memfd here (seccomp, an old kernel): no advert, nothing else
        try:
            os.write(fd, json.dumps(about).encode())
        except OSError:
            os.close(fd)
            return
        self._advert = fd

    def _unadvertise(self) -> None:
        if self._advert >= 0:
            os.close(self._advert)
            self._advert = -1

    def _restore_signal(self) -> None:
        if self.signal is not None and self._sockets is not None:
            _tracer._unrelay_signal(self.signal)


def _signal_name(signum: int) -> str:
    """SIGUSR2, or the number (kill -37 takes it) for a real-time signal
    other than SIGRTMIN and SIGRTMAX, which have no name in signal."""
    try:
        return signal_module.Signals(signum).name
    except ValueError:
        return str(signum)


def _call(done: Any, path: Optional[str], error: Optional[str]) -> None:
    try:
        done(path, error)
    except BaseException:  # noqa: B036 - the writer goes on
        pass


def flight_recorder(dump_dir: Union[str, "os.PathLike[str]"], **options: Any) -> FlightRecorder:
    """A flight recorder writing its dumps to dump_dir (a context manager),
    with its options (what each does: :doc:`/flight-recorder`): steps=3,
    slow_factor=3.0, slow_ms=None, slow_margin_ms=100.0, hang_ms=None,
    warmup=5, format="json"
    ("json.gz", "pftrace", "parquet"), signal=SIGUSR2 (None: no signal), max_dumps=10,
    min_interval=60.0, watchdog=True, and the tracer's options
    (``frametrace.Options``: buffer_size, c_calls, backend, max_memory,
    ignore, include, one by one or as ``options=``)."""
    return FlightRecorder(dump_dir, **options)


if sys.platform == "win32":  # pragma: no cover - no SIGUSR2
    _DEFAULT_SIGNAL = None
