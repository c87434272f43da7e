"""Timestamps are on the time.monotonic_ns() base, whichever counter the
hot path reads."""
import json
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


def test_monotonic_ns_lies_inside_its_recorded_call():
    """Every time.monotonic_ns() a traced program reads lies inside the C
    call frametrace recorded for that very read, across the whole window,
    also when the window's last work leaves the caches cold (a cold clock
    read at the stop is many times as slow as a warm one)."""
    junk = bytearray(8 << 20)
    read = []
    out = []
    with frametrace.profile(on_trace_ready=out.append):
        for _ in range(30):
            read.append(time.monotonic_ns())
            sum(range(20_000))
        junk[:] = bytes(len(junk))
    (trace,) = out
    calls = [e for e in trace.events if e.name == "time.monotonic_ns"]
    assert len(calls) == len(read)
    outside = [(value - e.start_ns, e.end_ns - value) for value, e in zip(read, calls)
               if not e.start_ns <= value <= e.end_ns]
    assert not outside, (f"{len(outside)} of {len(read)} reads outside their call "
                         f"(ns after its start, ns before its end): {outside}; "
                         f"anchor widths {trace.tracer.anchor_widths_ns}")


def test_anchor_widths_are_recorded(tmp_path):
    """Each anchor's width, the clock's own uncertainty, is on the tracer,
    in the trace's metadata and in the written file: start's, a snapshot's,
    stop's; tight on the cycle counter, 0 where ticks are ns."""
    with frametrace.trace() as tracer:
        marker()
        snap = tracer.snapshot()
        marker()
    widths = tracer.anchor_widths_ns
    assert len(widths) == 3  # start, the snapshot, stop
    assert len(snap.anchor_widths_ns) == 2  # its own stop: the snapshot's
    if tracer.clock == "cycles":
        # The tightest of several reads: warm ones are tens of ns wide, a
        # cold one a microsecond or more.
        assert all(0 < w < 1_000 for w in widths), widths
    else:
        assert widths == (0, 0, 0)
    out = []
    with frametrace.profile(on_trace_ready=out.append):
        marker()
    (trace,) = out
    assert trace.metadata()["anchor_widths_ns"] == list(trace.tracer.anchor_widths_ns)
    path = trace.save(str(tmp_path / "t.json"))
    with open(path) as fh:
        other = json.load(fh)["otherData"]["frametrace"]
    assert other["anchor_widths_ns"] == list(trace.tracer.anchor_widths_ns)
