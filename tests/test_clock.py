"""Timestamps are on the time.monotonic_ns() base, whichever counter the
hot path reads."""
import time

import pytest

import frametrace
from frametrace import _tracer
from invariants import check_invariants, only


def marker():
    return None


def probe():
    before = time.monotonic_ns()
    marker()
    after = time.monotonic_ns()
    return before, after


@pytest.mark.parametrize("repeat", range(3))
def test_event_times_agree_with_monotonic_ns(repeat):
    with frametrace.trace() as tracer:
        for _ in range(1000):
            marker()  # spread the trace out a little
        before, after = probe()
    events = tracer.getEvents()
    check_invariants(tracer, events)
    ev = events[[i for i, e in enumerate(events) if e.name == "marker"][-1]]
    # Conversion error of the cycle counter: well under a microsecond.
    slack = 2_000 if tracer.clock == "cycles" else 0
    assert before - slack <= ev.start_ns <= ev.end_ns <= after + slack


def test_clock_choice(monkeypatch):
    monkeypatch.setenv("FRAMETRACE_CLOCK", "monotonic")
    assert frametrace.Tracer().clock == "monotonic"
    monkeypatch.delenv("FRAMETRACE_CLOCK")
    assert frametrace.Tracer().clock in ("cycles", "monotonic")


def test_conversion_is_exact_at_anchors_and_monotone():
    anchors = [(1000, 50), (4000, 1050), (10000, 4050)]
    ticks = [1000, 2500, 4000, 4001, 7000, 10000, 13000]
    assert _tracer._ticks_to_ns(anchors, ticks) == [50, 550, 1050, 1050, 2550, 4050, 5550]
    dense = list(range(1000, 10001, 7))
    ns = _tracer._ticks_to_ns(anchors, dense)
    assert ns == sorted(ns)
    # A fresh cursor per call: out-of-order queries still convert right.
    assert _tracer._ticks_to_ns(anchors, [7000, 2500]) == [2550, 550]
    with pytest.raises(ValueError, match="increase"):
        _tracer._ticks_to_ns([(5, 5), (5, 6)], [5])
