"""Schedules, and sessions that record steps and ranges only (python_steps=0:
no tracer starts)."""
import threading

import pytest

import frametrace
from frametrace import ProfilerAction as A
from support import run_training



def test_schedule_step_semantics():
    sched = frametrace.schedule(wait=1, warmup=1, active=2, repeat=2, skip_first=1)
    assert [sched(i) for i in range(11)] == [
        A.NONE,                                   # skip_first
        A.NONE, A.WARMUP, A.RECORD, A.RECORD_AND_SAVE,   # cycle 0
        A.NONE, A.WARMUP, A.RECORD, A.RECORD_AND_SAVE,   # cycle 1
        A.NONE, A.NONE,                           # repeat=2: done
    ]
    forever = frametrace.schedule(wait=0, warmup=0, active=1)
    assert all(forever(i) is A.RECORD_AND_SAVE for i in range(50))


@pytest.mark.parametrize("kwargs, exc, words", [
    ({"wait": -1, "warmup": 0, "active": 1}, ValueError, "wait"),
    ({"wait": 0, "warmup": -2, "active": 1}, ValueError, "warmup"),
    ({"wait": 0, "warmup": 0, "active": 0}, ValueError, "active"),
    ({"wait": 0, "warmup": 0, "active": 1, "repeat": -1}, ValueError, "repeat"),
    ({"wait": 0, "warmup": 0, "active": 1, "skip_first": -1}, ValueError, "skip_first"),
    ({"wait": 1.5, "warmup": 0, "active": 1}, TypeError, "wait"),
    ({"wait": 0, "warmup": "1", "active": 1}, TypeError, "warmup"),
    ({"wait": 0, "warmup": 0, "active": True}, TypeError, "active"),
])
def test_schedule_misuse(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        frametrace.schedule(**kwargs)


def test_python_steps_zero_records_steps_and_ranges_only():
    with frametrace.profile(python_steps=0) as prof:
        run_training(prof, 2)
    trace = prof.last_trace
    assert trace.events == [] and trace.tracer_stop_ns is None
    assert len(trace.steps) == 3 and len(trace.ranges) == 2


def test_ranges_nesting_threads_and_window_edges():
    sched = frametrace.schedule(wait=1, warmup=0, active=1, repeat=1)
    outer = frametrace.range("outer")
    with frametrace.profile(schedule=sched, python_steps=0) as prof:
        outer.__enter__()          # step 0: not recording yet
        prof.step()                # step 1 records
        with frametrace.range("a"):
            with frametrace.range("b"):
                pass
        t = threading.Thread(target=lambda: frametrace.range("in-thread").__enter__())
        t.start()
        t.join()
        outer.__exit__(None, None, None)
        open_range = frametrace.range("left-open").__enter__()
        prof.step()                # window ends
        open_range.__exit__(None, None, None)
    trace = prof.last_trace
    by_name = {r.name: r for r in trace.ranges}
    assert set(by_name) == {"outer", "a", "b", "in-thread", "left-open"}
    assert by_name["outer"].open_at_start and by_name["outer"].start_ns == trace.session_start_ns
    assert by_name["a"].start_ns <= by_name["b"].start_ns <= by_name["b"].end_ns <= by_name["a"].end_ns
    assert by_name["in-thread"].thread_id == t.ident and by_name["in-thread"].open_at_end
    assert by_name["left-open"].open_at_end and by_name["left-open"].end_ns == trace.session_end_ns
