"""frametrace.torch.flight_recorder: a flight recorder whose dumps hold
torch's ops of the dumped steps (``frametrace.flight``).

Kineto hands its ops over only when its trace stops, so torch.profiler runs
beside the recorder's tracer in cycles of ``cycle_steps`` steps (a schedule
of RECORD steps ending in RECORD_AND_SAVE, repeated for the whole job) and
the recorder keeps the last completed cycle's results.  A dump joins the
ops of the cycles its window meets, waiting on the writer thread for the
running one, except where docs/flight-recorder.md says it does not (then
``metadata.dump.torch`` says from which step on it is Python only).
"""
from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Union

from . import _tracer
from .flight import FlightRecorder
from ._trace import Trace
from .torch import _activities_of, _torch_activities, join_torch

__all__ = ["TorchFlightRecorder"]


class _Cycle:
    """One cycle of torch.profiler: the steps it records, its span on
    frametrace's clock, and (once it ended) torch's results."""

    __slots__ = ("first_step", "start_ns", "end_ns", "result", "failed")

    def __init__(self, first_step: int, start_ns: int):
        self.first_step = first_step
        self.start_ns = start_ns
        self.end_ns: Optional[int] = None
        self.result: Any = None  # torch.autograd.profiler.profile, once ended
        self.failed: Optional[str] = None  # why it never will


class _TorchPart:
    """What a dump takes of torch: the completed cycles its window meets,
    and the running one it waits for (or, not waiting, lacks)."""

    __slots__ = ("cycles", "waiting", "lacking", "why", "give_up")

    def __init__(self, cycles: list, waiting: Optional[_Cycle], lacking: Optional[_Cycle],
                 why: Optional[str]):
        self.cycles, self.waiting, self.lacking, self.why = cycles, waiting, lacking, why
        self.give_up = False


class TorchFlightRecorder(FlightRecorder):
    """A flight recorder with torch.profiler beside it; see
    ``frametrace.torch.flight_recorder``."""

    def __init__(self, dump_dir: Union[str, "os.PathLike[str]"], *,
                 cycle_steps: Optional[int] = None, activities: Optional[Sequence[Any]] = None,
                 record_shapes: bool = False, **options: Any):
        super().__init__(dump_dir, **options)
        if cycle_steps is None:
            cycle_steps = max(self.steps, 10)
        if isinstance(cycle_steps, bool) or not isinstance(cycle_steps, int):
            raise TypeError(f"cycle_steps must be an int, not {type(cycle_steps).__name__}")
        if cycle_steps < self.steps:
            raise ValueError(f"cycle_steps must be >= steps ({self.steps}), got {cycle_steps}: "
                             f"a dump's window must fit in two cycles")
        if not isinstance(record_shapes, bool):
            raise TypeError(f"record_shapes must be a bool, not {type(record_shapes).__name__}")
        self.cycle_steps, self.activities, self.record_shapes = (cycle_steps, activities,
                                                                 record_shapes)
        self.torch_profiler: Any = None
        self._last: Optional[_Cycle] = None  # the last completed cycle
        self._current: Optional[_Cycle] = None  # the one recording
        self._delivered: Any = None  # set by torch's on_trace_ready
        # From when and why torch.profiler stopped early (its failed set).
        self._off: Optional[_Cycle] = None
        self._between_steps = self._torch_step
        self._on_stop = self._torch_stop

    # ---- torch's side (the training thread) ---------------------------------

    def __enter__(self) -> "TorchFlightRecorder":
        try:
            import torch
            import torch.profiler as tp
        except ImportError as exc:
            raise ImportError(f"frametrace.torch needs torch, which does not import here "
                              f"({exc}): pip install torch") from exc
        record, save = tp.ProfilerAction.RECORD, tp.ProfilerAction.RECORD_AND_SAVE
        k = self.cycle_steps

        def schedule(step: int) -> Any:
            return save if step % k == k - 1 else record

        prof = tp.profile(activities=_torch_activities(torch, self.activities),
                          schedule=schedule, on_trace_ready=self._torch_ready,
                          record_shapes=self.record_shapes, with_stack=False)
        # The dump's step track stands for torch's ProfilerStep#N.
        prof.record_steps = False
        # torch's step machinery between two steps: kept out of the Python
        # trace (what it calls, a cycle's stop and start, still shows).
        for code in (tp.profile.step, tp.profile._transit_action, tp.profile._trace_ready,
                     schedule, TorchFlightRecorder._torch_step,
                     TorchFlightRecorder._torch_ready):
            self.tracer._ignore(code)
        prof.__enter__()  # torch first: its start is not in the Python trace
        self.torch_profiler = prof
        self._current = _Cycle(0, _tracer._clock_ns())
        try:
            super().__enter__()
        except BaseException:
            self._torch_stop()
            raise
        return self

    def _torch_ready(self, prof: Any) -> None:
        """torch's on_trace_ready, inside its step(): only takes the cycle's
        results (the joining is the writer thread's): torch's next cycle
        starts a profile of its own (as without acc_events), with no
        earlier one to warn "Profiler clears events" about."""
        self._delivered, prof.profiler = prof.profiler, None

    def _torch_step(self) -> None:
        """Between two steps (FlightRecorder.step, lock held): torch's
        step(); at a cycle's end, the cycle kept and the next begun."""
        prof = self.torch_profiler
        if prof is None:
            return
        before = _tracer._clock_ns()
        try:
            prof.step()
        except Exception as exc:  # noqa: BLE001 - the job goes on, Python only
            self.errors.append(exc)
            self._torch_failed(f"torch.profiler failed: {exc!r}")
            return
        self._cycle_ended(before, _tracer._clock_ns())

    def _cycle_ended(self, end_ns: int, next_start_ns: Optional[int]) -> None:
        result, self._delivered = self._delivered, None
        cycle = self._current
        if result is None or cycle is None:
            return
        cycle.end_ns, cycle.result = end_ns, result
        self._last = cycle  # the one before it is no longer any window's
        self._current = (_Cycle(cycle.first_step + self.cycle_steps, next_start_ns)
                         if next_start_ns is not None else None)
        self._wake.notify_all()

    def _torch_failed(self, why: str) -> None:
        prof, self.torch_profiler = self.torch_profiler, None
        self._off = _Cycle(self.step_number, _tracer._clock_ns())
        self._off.failed = why
        if self._current is not None:
            self._current.failed = why
            self._current = None
        if prof is not None:
            try:
                prof.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - failed already; said once
                pass
        self._wake.notify_all()

    def _torch_stop(self) -> None:
        """At the end (the tracer stopped): torch's exit ends the running
        cycle, whose results the dumps still waiting get."""
        prof = self.torch_profiler
        if prof is None:
            return
        with self._lock:
            self.torch_profiler = None
            before = _tracer._clock_ns()
            try:
                prof.__exit__(None, None, None)
            except Exception as exc:  # noqa: BLE001 - the dumps go Python only
                self.errors.append(exc)
                self._torch_failed(f"torch.profiler failed at the end: {exc!r}")
                return
            self._cycle_ended(before, None)
            if self._current is not None:  # torch delivered nothing
                self._torch_failed("torch.profiler delivered no results at its end")

    # ---- the dumps ------------------------------------------------------------

    def _dump_taken(self, snap: Any, info: dict, kind: str) -> _TorchPart:
        start, stop = snap.start_ns, snap.stop_ns
        last, current = self._last, self._current
        cycles = [last] if last is not None and last.end_ns is not None and \
            last.end_ns > start else []
        if current is None:
            off = self._off if self._off is not None and self._off.start_ns < stop else None
            return _TorchPart(cycles, None, off, off.failed if off is not None else None)
        if current.start_ns >= stop:
            return _TorchPart(cycles, None, None, None)
        if kind in ("hung", "signal", "request"):
            if kind == "hung":
                # That cycle ends after the hung step does, if ever.
                for item in self._queue:
                    if isinstance(item[5], _TorchPart) and item[5].waiting is current:
                        item[5].give_up = True
            who = {"hung": "a hung step's dump", "signal": "a signal's dump",
                   "request": "request_dump()'s (attach --dump's) dump"}[kind]
            return _TorchPart(cycles, None, current, f"its torch.profiler cycle was still "
                                                     f"recording ({who} does not wait for it)")
        return _TorchPart(cycles, current, None, None)

    def _dump_ready(self, extra: Any) -> bool:
        if not isinstance(extra, _TorchPart) or extra.waiting is None:
            return True
        w = extra.waiting
        return w.result is not None or w.failed is not None or extra.give_up or self._closing

    def _complete(self, trace: Trace, info: dict, extra: Any) -> None:
        part: _TorchPart = extra
        cycles = list(part.cycles)
        lacking, why = part.lacking, part.why
        if part.waiting is not None:
            w = part.waiting
            if w.result is not None:
                cycles.append(w)
            else:
                lacking = w
                why = w.failed or ("its torch.profiler cycle was still recording when a step "
                                   "hung" if part.give_up else "its torch.profiler cycle had "
                                   "not ended at the recorder's end")
        start, stop = info["window_start_ns"], info["snapshot_ns"]
        kept, cut = [], 0
        try:
            anchor = trace.clock_anchor or {}
            offset = anchor["wall_ns"] - anchor["monotonic_ns"]
            for cycle in cycles:
                kineto = getattr(cycle.result, "kineto_results", None)
                if kineto is None:
                    continue
                for a in _activities_of(kineto, with_args=self.record_shapes):
                    s, e = a.start - offset, a.end - offset
                    if start <= s and e <= stop:
                        kept.append(a)
                    elif s < stop and e > start:
                        cut += 1
            join_torch(trace, kept)
        except Exception as exc:  # noqa: BLE001 - the Python trace is still written
            self.errors.append(exc)
            kept, cut = [], 0
            info["torch"] = f"python only: joining torch's ops failed: {exc!r}"
        else:
            if lacking is None:
                info["torch"] = "included"
            else:
                # torch's ops end at the lacking part's start (the whole
                # window Python only if it began before the window).
                info["torch"] = f"python only from step {lacking.first_step} on: {why}"
                info["torch_until_ns"] = max(start, lacking.start_ns)
        info["torch_ops"] = len(kept)
        info["torch_ops_cut"] = cut
