"""Bad input and conflicting profilers: clear errors, nothing broken."""
import cProfile
import sys
import threading

import pytest

import frametrace
from targets import calls


def test_lifecycle_misuse():
    tracer = frametrace.Tracer()
    assert tracer.start_ns is None and tracer.stop_ns is None and not tracer.active
    with pytest.raises(RuntimeError, match="before start"):
        tracer.getEvents()
    tracer.stop()  # stopping a tracer that never ran is harmless
    assert tracer.stop_ns is None
    tracer.start()
    try:
        with pytest.raises(RuntimeError, match="twice"):
            tracer.start()
        with pytest.raises(RuntimeError, match="active"):
            tracer.getEvents()
        with pytest.raises(RuntimeError, match="active"):
            tracer.clear()
    finally:
        tracer.stop()
    with pytest.raises(RuntimeError, match="create a new one"):
        tracer.start()
    assert isinstance(tracer.getEvents(), list)


def test_second_tracer_refused():
    first = frametrace.Tracer()
    with first:
        second = frametrace.Tracer()
        with pytest.raises(RuntimeError, match="already active"):
            second.start()
        assert first.active and not second.active
        calls.leaf(1)
    assert [e.name for e in first.getEvents()].count("leaf") == 1
    with second:  # free once the first stopped
        pass


def test_start_from_code_that_start_runs_is_refused():
    """start() runs Python code before its tracer is active (here a thread's
    name property, read for the trace's thread names): a start() from there,
    or from another thread meanwhile, of this tracer or another, is refused,
    and the first start() goes on."""
    outcomes = []
    release = threading.Event()

    class Named(threading.Thread):
        @property
        def name(self):
            if not outcomes:
                for tracer in (other, first):
                    try:
                        tracer.start()
                        outcomes.append("started")
                    except RuntimeError as exc:
                        outcomes.append(str(exc))
            return "named"

        @name.setter
        def name(self, value):
            pass

    thread = Named(target=release.wait)
    thread.start()
    first, other = frametrace.Tracer(), frametrace.Tracer()
    try:
        with first:
            calls.leaf(1)
    finally:
        release.set()
        thread.join()
    assert outcomes == [
        "another frametrace Tracer is starting in this interpreter; stop it first",
        "start() called twice: this Tracer is already starting"]
    assert not other.active and other.start_ns is None
    assert any(e.name.endswith("leaf") for e in first.getEvents())
    assert [t.name for t in first.threads if t.thread_id == thread.ident] == ["named"]
    with other:  # refused, not spent
        pass


def test_running_cprofile_refused_and_left_running():
    prof = cProfile.Profile()
    prof.enable()
    try:
        before = sys.getprofile()
        with pytest.raises(frametrace.ConflictError, match="another profiler"):
            frametrace.Tracer().start()
        assert sys.getprofile() is before
        calls.leaf(5)
    finally:
        prof.disable()
    prof.create_stats()
    assert any(func[2] == "leaf" for func in prof.stats)


def test_sys_setprofile_refused_and_left_installed():
    seen = []

    def profiler(frame, event, arg):
        seen.append(event)

    sys.setprofile(profiler)
    try:
        tracer = frametrace.Tracer()
        if tracer.backend == "setprofile":
            with pytest.raises(frametrace.ConflictError, match="another profiler"):
                tracer.start()
        else:
            # sys.monitoring has no slot for sys.setprofile to take: both run.
            with tracer:
                calls.leaf(2)
            assert [e.name for e in tracer.getEvents()].count("leaf") == 1
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)
    assert seen
    with frametrace.trace():  # usable again once the other profiler left
        pass


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_monitoring_tool_id_held_by_another_tool_refused():
    monitoring = sys.monitoring
    monitoring.use_tool_id(monitoring.PROFILER_ID, "someone else")
    try:
        with pytest.raises(RuntimeError, match="holds sys.monitoring tool id 2.*'someone else'"):
            frametrace.Tracer(backend="monitoring").start()
        assert monitoring.get_tool(monitoring.PROFILER_ID) == "someone else"
    finally:
        monitoring.free_tool_id(monitoring.PROFILER_ID)


def occupy_the_hook(backend):
    """Takes what the given backend needs; returns how to give it back."""
    if backend == "setprofile":
        sys.setprofile(lambda *a: None)
        return lambda: sys.setprofile(None)
    sys.monitoring.use_tool_id(sys.monitoring.PROFILER_ID, "other")
    return lambda: sys.monitoring.free_tool_id(sys.monitoring.PROFILER_ID)


def test_failed_start_can_be_retried():
    tracer = frametrace.Tracer()
    release = occupy_the_hook(tracer.backend)
    try:
        with pytest.raises(RuntimeError):
            tracer.start()
    finally:
        release()
    assert not tracer.active and tracer.start_ns is None
    with tracer:
        calls.leaf(0)
    assert any(e.name == "leaf" for e in tracer.getEvents())
