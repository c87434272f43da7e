"""Flight-recorder overflow: the newest records are kept, the count of the
rest is reported, and every invariant still holds."""
import threading

import frametrace
from frametrace.testing import assert_valid_trace
from support import find, only, qual
from targets import calls


def busy(n):
    for i in range(n):
        calls.leaf(i)
    return calls.branch(3)


def test_tiny_ring_drops_oldest_and_keeps_invariants():
    with frametrace.trace(buffer_size=64, c_calls=False) as tracer:
        busy(5000)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    me = threading.get_ident()
    assert tracer.stats.dropped > 0
    assert [(t.thread_id, t.dropped) for t in tracer.threads] == [(me, tracer.stats.dropped)]
    # 2 records per leaf call; the ring keeps the last 64 records.
    assert tracer.stats.dropped_records >= 2 * 5000 - 64
    # dropped counts events: of busy, 5003 leaf calls and branch, exactly
    # those not shown at all (busy is shown, its call lost).
    shown = [e for e in events if e.name in ("busy", "leaf", "branch")]
    assert tracer.stats.dropped == 1 + 5003 + 1 - len(shown)
    # The newest calls survive, complete.
    br = only(events, "branch")
    assert len([i for i in find(events, "leaf") if events[i].parent == br]) == 3
    # busy returned after overwritten records: its call is gone, it starts
    # at the earliest retained record, flagged.
    b = events[only(events, "busy")]
    assert b.open_at_start and not b.open_at_stop
    # Frames open across the whole window come from the stack at stop.
    test_frame = events[only(events, qual("test_tiny_ring_drops_oldest_and_keeps_invariants"))]
    assert test_frame.open_at_start and test_frame.open_at_stop
    assert test_frame.end_ns == tracer.stop_ns
    assert events[only(events, "busy")].parent == only(events, qual("test_tiny_ring_drops_oldest_and_keeps_invariants"))


def test_overflow_while_frames_stay_open():
    def loop(tracer):
        for i in range(3000):
            calls.leaf(i)
            if i == 2999:
                tracer.stop()

    with frametrace.trace(buffer_size=16) as tracer:
        loop(tracer)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    lp = events[only(events, qual("test_overflow_while_frames_stay_open.<locals>.loop"))]
    # Entered before the window, still running at stop: from the stop stack.
    assert lp.open_at_start and lp.open_at_stop
    # Lost entirely: the leaf calls not shown; loop is shown, its call lost.
    assert tracer.stats.dropped == 3000 - len(find(events, "leaf"))
    assert tracer.stats.dropped_records == 2 * tracer.stats.dropped + 1


def test_dropped_counts_events_once_stopped_and_records_any_time():
    tracer = frametrace.Tracer(buffer_size=8, c_calls=False)
    assert tracer.stats == (0, 0) and tracer.threads == []
    assert type(tracer.stats) is frametrace.Stats
    with tracer:
        busy(100)
        # Events lost are known by replaying the records after the stop.
        assert tracer.stats.dropped is None and tracer.threads[0].dropped is None
        assert tracer.stats.dropped_records > 0
    records = tracer.stats.dropped_records
    assert 0 < tracer.stats.dropped <= records and tracer.stats.dropped_records == records
    assert [(t.thread_id, t.dropped) for t in tracer.threads] == [
        (threading.get_ident(), tracer.stats.dropped)]
    events = tracer.getEvents()
    shown = [e for e in events if e.name in ("busy", "leaf", "branch")]
    assert tracer.stats.dropped == 1 + 103 + 1 - len(shown)
    tracer.clear()
    assert tracer.stats == (0, 0) and tracer.threads == []


def test_every_size_keeps_invariants():
    for size in (1, 2, 3, 5, 8, 13, 100, 1000):
        with frametrace.trace(buffer_size=size) as tracer:
            calls.program()
            busy(20)
            calls.catcher()
        events = tracer.getEvents()
        assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
        assert (tracer.stats.dropped > 0) == (size <= 13)
