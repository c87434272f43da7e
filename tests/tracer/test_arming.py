"""Tracer.arm(): everything costly of a start done ahead, recording off;
start() then turns recording on.  What an armed tracer records (nothing),
when its stacks are taken (at start, not at arm), and its refusals."""
import sys
import threading

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import tracing_installed

_testing = pytest.importorskip("frametrace._testing")


def leaf(n):
    return n + 1


def work():
    return [leaf(i) for i in range(3)]


def armed_then_started(tracer):
    """Runs work() while armed, then once recording."""
    work()
    tracer.start()
    work()
    tracer.stop()


def outer_at_start(tracer):
    tracer.start()
    work()


def test_an_armed_tracer_records_nothing_and_start_records_from_there():
    tracer = frametrace.Tracer()
    tracer.arm()
    assert tracer.armed and not tracer.active
    assert tracer.start_ns is None and tracer.stop_ns is None
    assert tracing_installed()  # the hook (or tool id) is on while armed
    armed_then_started(tracer)
    assert not tracer.armed and not tracer.active
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert [e.name for e in events].count("leaf") == 3  # the second work() only
    assert sum(e.name == "work" for e in events) == 1
    assert not tracing_installed()


def test_the_stacks_are_taken_at_start_not_at_arm():
    tracer = frametrace.Tracer()
    tracer.arm()
    outer_at_start(tracer)  # a frame that was not running at arm()
    tracer.stop()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    # Running at start(), not at arm(): open at the start, and its return
    # is matched with it.
    outer = [e for e in events if e.name == "outer_at_start"]
    assert len(outer) == 1 and outer[0].open_at_start and not outer[0].open_at_stop
    assert outer[0].start_ns == tracer.start_ns
    assert [e.name for e in events if e.parent == events.index(outer[0])] == ["work"]
    assert all(e.start_ns >= tracer.start_ns for e in events)


def test_start_of_an_armed_tracer_sets_no_hook_and_allocates_no_ring():
    tracer = frametrace.Tracer()
    before = _testing.lifecycle_counts(tracer)
    tracer.arm()
    armed = _testing.lifecycle_counts(tracer)
    tracer.start()
    started = _testing.lifecycle_counts(tracer)
    work()
    tracer.stop()
    assert started == armed != before
    assert armed["rings"] == before["rings"] + 1  # the caller's, at arm()
    if tracer.backend == "monitoring":
        assert armed["tool_takes"] == before["tool_takes"] + 1
    else:
        assert armed["hook_installs"] == before["hook_installs"] + 1  # all threads: one act


def test_disarm_and_stop_of_an_armed_tracer_leave_it_new():
    tracer = frametrace.Tracer()
    tracer.arm()
    tracer.disarm()
    assert not tracer.armed and not tracing_installed()
    tracer.disarm()  # not armed: nothing to do
    tracer.arm()
    tracer.stop()  # nothing recorded: disarms, no stop latched
    assert not tracer.armed and tracer.stop_ns is None and not tracing_installed()
    with pytest.raises(RuntimeError, match="before start"):
        tracer.getEvents()
    with tracer:  # it can still record
        work()
    assert [e.name for e in tracer.getEvents()].count("leaf") == 3


def test_refusals():
    tracer = frametrace.Tracer()
    tracer.arm()
    with pytest.raises(RuntimeError, match="arm\\(\\) called twice"):
        tracer.arm()
    other = frametrace.Tracer()
    with pytest.raises(frametrace.ConflictError, match="another frametrace Tracer is armed"):
        other.start()
    with pytest.raises(frametrace.ConflictError, match="another frametrace Tracer is armed"):
        other.arm()
    tracer.start()
    with pytest.raises(RuntimeError, match="arm\\(\\) called twice: this Tracer is already active"):
        tracer.arm()
    with pytest.raises(RuntimeError, match="disarm\\(\\) called while the tracer records"):
        tracer.disarm()
    tracer.stop()
    tracer.disarm()  # stopped: nothing to do
    with pytest.raises(RuntimeError, match="records once"):
        tracer.arm()
    other.start()  # the slot is free again
    other.stop()


def test_a_thread_started_while_armed_is_traced_from_start():
    tracer = frametrace.Tracer()
    tracer.arm()
    go, done = threading.Event(), threading.Event()

    def body():
        work()  # while armed: not recorded
        go.wait()
        work()
        done.set()

    thread = threading.Thread(target=body, name="armed-thread")
    thread.start()
    tracer.start()
    go.set()
    done.wait()
    thread.join()
    tracer.stop()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    mine = [e for e in events if e.thread_id == thread.ident]
    assert [e.name for e in mine].count("leaf") == 3
    assert "armed-thread" in [t.name for t in tracer.threads]


def test_an_armed_tracer_collected_unstarted_leaves_no_hook():
    tracer = frametrace.Tracer()
    tracer.arm()
    del tracer
    import gc
    gc.collect()
    work()
    assert not tracing_installed()
    with frametrace.trace() as again:
        work()
    assert [e.name for e in again.getEvents()].count("leaf") == 3


@pytest.mark.skipif(sys.version_info < (3, 12), reason="no sys.monitoring")
def test_armed_monitoring_holds_the_tool_id_with_its_events():
    tracer = frametrace.Tracer(backend="monitoring")
    tracer.arm()
    try:
        mon = sys.monitoring
        assert mon.get_tool(mon.PROFILER_ID).startswith("frametrace (")
        assert mon.get_events(mon.PROFILER_ID) != 0
    finally:
        tracer.disarm()
    assert sys.monitoring.get_tool(sys.monitoring.PROFILER_ID) is None


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork")
def test_a_forked_child_of_an_armed_tracer_has_no_hook_and_the_parent_stays_armed():
    import os

    tracer = frametrace.Tracer()
    tracer.arm()
    pid = os.fork()
    if pid == 0:  # the child: disarmed at the fork, and can trace itself
        code = 1
        try:
            if not tracer.armed and not tracing_installed():
                with frametrace.trace() as mine:
                    work()
                code = 0 if [e.name for e in mine.getEvents()].count("leaf") == 3 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert tracer.armed and tracing_installed()
    armed_then_started(tracer)
    assert [e.name for e in tracer.getEvents()].count("leaf") == 3


def test_a_session_arms_at_warmup_and_a_session_ending_in_warmup_leaves_no_hook():
    sched = frametrace.schedule(wait=1, warmup=2, active=1)
    with frametrace.profile(schedule=sched) as prof:
        work()
        assert not tracing_installed()  # waiting
        prof.step()
        assert tracing_installed()  # warm-up: armed
        work()
        prof.step()
        assert tracing_installed()
    assert not tracing_installed()
    assert prof.last_trace is None


def test_a_refusal_is_raised_from_the_step_that_begins_warmup():
    sched = frametrace.schedule(wait=1, warmup=1, active=1)
    other = frametrace.Tracer()
    with frametrace.profile(schedule=sched) as prof:
        other.start()
        try:
            with pytest.raises(frametrace.ConflictError, match="another frametrace Tracer is already active"):
                prof.step()
        finally:
            other.stop()
        prof.step()  # the first active step: made, armed and started now
        work()
        prof.step()
    assert [e.name for e in prof.last_trace.events].count("leaf") == 3
