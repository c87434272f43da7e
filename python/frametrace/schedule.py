"""Which steps of a loop a profiling session records: torch.profiler's
schedule, with the same step semantics.

A session counts steps from 0 (each ``prof.step()`` ends one).  With
``schedule(wait=w, warmup=u, active=a, repeat=r, skip_first=s)``:

- the first ``s`` steps are not recorded;
- then cycles of ``w + u + a`` steps follow: ``w`` waiting steps, ``u``
  warm-up steps and ``a`` active (recorded) steps;
- after ``r`` cycles nothing more is recorded; ``repeat=0`` cycles on until
  the loop ends.

A trace is ready at the end of each cycle's last active step.  Warm-up
steps record nothing, as in torch.profiler, and have the same purpose: a
session arms its tracer at the start of warm-up (the hook on every thread,
or the sys.monitoring tool id, with recording off), so that the first active
step pays no start-up and, on CPython 3.12+, not the instrumentation of
every code object CPython does on its first run after the events go on.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3  # the last active step of a cycle


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"schedule {name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"schedule {name} must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class Schedule:
    """A step -> ProfilerAction function; build it with ``schedule()``."""

    wait: int
    warmup: int
    active: int
    repeat: int = 0
    skip_first: int = 0

    def __post_init__(self) -> None:
        _check_count("wait", self.wait, 0)
        _check_count("warmup", self.warmup, 0)
        _check_count("active", self.active, 1)
        _check_count("repeat", self.repeat, 0)
        _check_count("skip_first", self.skip_first, 0)

    @property
    def cycle_length(self) -> int:
        return self.wait + self.warmup + self.active

    def __call__(self, step: int) -> ProfilerAction:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an int >= 0, got {step!r}")
        return self._action(step)

    def _action(self, step: int) -> ProfilerAction:
        # Arithmetic only, no calls: sessions run it while tracing.
        if step < self.skip_first:
            return ProfilerAction.NONE
        step -= self.skip_first
        cycle_length = self.wait + self.warmup + self.active  # not the property: a call
        if self.repeat and step // cycle_length >= self.repeat:
            return ProfilerAction.NONE
        pos = step % cycle_length
        if pos < self.wait:
            return ProfilerAction.NONE
        if pos < self.wait + self.warmup:
            return ProfilerAction.WARMUP
        if pos < cycle_length - 1:
            return ProfilerAction.RECORD
        return ProfilerAction.RECORD_AND_SAVE


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0,
             skip_first: int = 0) -> Schedule:
    """``frametrace.schedule(wait=1, warmup=1, active=3, repeat=2)``: see the
    module's documentation for the step semantics."""
    return Schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                    skip_first=skip_first)
