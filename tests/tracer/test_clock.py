"""Timestamps are on the time.monotonic_ns() base, whichever counter the
hot path reads."""
import time

import pytest

import frametrace
from frametrace.testing import assert_valid_trace


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
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    ev = events[[i for i, e in enumerate(events) if e.name == "marker"][-1]]
    # Conversion error of the cycle counter: well under a microsecond.
    slack = 2_000 if tracer.clock == "cycles" else 0
    assert before - slack <= ev.start_ns <= ev.end_ns <= after + slack
