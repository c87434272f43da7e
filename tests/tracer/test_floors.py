"""The benchmarks' reference hooks (csrc/testing/floors.c, frametrace._testing): the do-nothing profile
function, the same reading the clock into a ring, and their sys.monitoring
twins.  They must install and go as asked, never touch another tool's hook,
and free what they hold."""
import sys

import pytest

import frametrace
from frametrace import _testing


def work(n=12):
    # Python calls, C calls and a generator: every kind of event the hooks get.
    def fib(k):
        return k if k < 2 else fib(k - 1) + fib(k - 2)

    def gen(k):
        yield from range(k)

    return fib(n) + sum(gen(50)) + len(str(n))


@pytest.fixture(autouse=True)
def no_floor_left():
    yield
    _testing.set_noop_profile(False)
    if sys.version_info >= (3, 12):
        _testing.set_noop_monitoring(False)
    sys.setprofile(None)


@pytest.mark.parametrize("clock", [False, True])
def test_noop_profile_is_installed_and_removed(clock):
    _testing.set_noop_profile(True, clock=clock)
    # Installed: a setprofile tracer sees another profile function.
    with pytest.raises(frametrace.ConflictError, match="another profiler is installed"):
        frametrace.Tracer(backend="setprofile").start()
    assert work() == 144 + 1225 + 2
    _testing.set_noop_profile(False)
    tracer = frametrace.Tracer(backend="setprofile")
    with tracer:
        work()
    assert any(e.name.endswith("fib") for e in tracer.getEvents())


def test_clock_profile_holds_its_ring_until_removed():
    _testing.set_noop_profile(True, clock=True)
    ring = sys.getprofile()
    assert type(ring).__name__ == "_FloorRing"
    held = sys.getrefcount(ring)
    work()
    # Replaced by the plain floor: the thread state lets the ring go.
    _testing.set_noop_profile(True)
    assert sys.getrefcount(ring) == held - 1
    assert sys.getprofile() is None


def test_floor_refuses_over_another_profile_function():
    def other(frame, event, arg):
        pass

    sys.setprofile(other)
    with pytest.raises(RuntimeError, match="already installed"):
        _testing.set_noop_profile(True)
    assert sys.getprofile() is other


def test_removing_the_floor_leaves_other_profile_functions():
    def other(frame, event, arg):
        pass

    sys.setprofile(other)
    _testing.set_noop_profile(False)
    assert sys.getprofile() is other
    sys.setprofile(None)
    # Nor a tracer's hook: it goes on recording after.
    tracer = frametrace.Tracer(backend="setprofile")
    with tracer:
        _testing.set_noop_profile(False)
        work()
    assert any(e.name.endswith("fib") for e in tracer.getEvents())


@pytest.mark.parametrize("args, kwargs", [
    ((), {}), ((True, True), {}), ((True,), {"clok": True}),
])
def test_noop_profile_bad_arguments(args, kwargs):
    with pytest.raises(TypeError):
        _testing.set_noop_profile(*args, **kwargs)
    assert sys.getprofile() is None


def test_noop_profile_enable_whose_truth_raises():
    class Bad:
        def __bool__(self):
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        _testing.set_noop_profile(Bad())
    tracer = frametrace.Tracer(backend="setprofile")
    tracer.start()  # nothing was installed: it starts
    tracer.stop()


needs_monitoring = pytest.mark.skipif(sys.version_info < (3, 12),
                                      reason="sys.monitoring is 3.12+")


@needs_monitoring
@pytest.mark.parametrize("clock", [False, True])
@pytest.mark.parametrize("c_calls", [False, True])
def test_noop_monitoring_takes_the_backends_events(clock, c_calls):
    tracer = frametrace.Tracer(backend="monitoring", c_calls=c_calls)
    with tracer:
        tracer_events = sys.monitoring.get_events(2)
    _testing.set_noop_monitoring(True, clock=clock, c_calls=c_calls)
    assert sys.monitoring.get_tool(2) == "frametrace-floor"
    assert sys.monitoring.get_events(2) == tracer_events
    work()
    # Held: the monitoring backend is refused meanwhile.
    with pytest.raises(RuntimeError, match="tool id 2"):
        frametrace.Tracer(backend="monitoring").start()
    _testing.set_noop_monitoring(False)
    assert sys.monitoring.get_tool(2) is None
    assert sys.monitoring.get_events(2) == 0


@needs_monitoring
def test_noop_monitoring_enabled_twice_replaces_itself():
    _testing.set_noop_monitoring(True)
    _testing.set_noop_monitoring(True, clock=True, c_calls=False)
    assert sys.monitoring.get_tool(2) == "frametrace-floor"
    assert not sys.monitoring.get_events(2) & sys.monitoring.events.CALL
    work()
    _testing.set_noop_monitoring(False)
    assert sys.monitoring.get_tool(2) is None


@needs_monitoring
def test_noop_monitoring_leaves_another_tool_alone():
    sys.monitoring.use_tool_id(2, "someone")
    try:
        with pytest.raises(RuntimeError, match="'someone'"):
            _testing.set_noop_monitoring(True)
        _testing.set_noop_monitoring(False)
        assert sys.monitoring.get_tool(2) == "someone"
    finally:
        sys.monitoring.free_tool_id(2)


@needs_monitoring
def test_noop_monitoring_bad_arguments():
    with pytest.raises(TypeError):
        _testing.set_noop_monitoring()
    with pytest.raises(TypeError):
        _testing.set_noop_monitoring(True, False)
    assert sys.monitoring.get_tool(2) is None
