"""Another tool takes the hook.

On the setprofile backend, code inside the traced region that replaces or
removes frametrace's profile function (sys.setprofile(), cProfile on
3.10/3.11) ends the recording of that thread: stop() must find it, end the
thread's open frames at its last record (open_at_loss), list it in
Tracer.displaced and warn.  On the monitoring backend sys.setprofile() does
not touch frametrace, cProfile is refused by CPython (and sys.monitoring
names frametrace as the holder), and another tool may free or change the
tool id: that too is found at stop."""
import cProfile
import sys
import threading
import time
import warnings

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import find, only, qual

HOLDER = ("frametrace (a Tracer with backend='monitoring' is recording: stop it first, "
          "or trace with backend='setprofile', which leaves this id free)")
MONITORING_ONLY = pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")


def other_profiler(frame, event, arg):
    pass


def work(n=200):
    return sum(range(n))


def later_work():
    return work(300)


def traced_with_warnings(body, *args):
    """Runs body(*args) traced; the tracer, its events (checked), and the
    RuntimeWarnings stop() gave."""
    tracer = frametrace.Tracer()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tracer:
            body(*args)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    return tracer, events, [w for w in caught if w.category is RuntimeWarning]


def set_and_remove():
    work()
    sys.setprofile(other_profiler)
    sys.setprofile(None)
    work()
    later_work()


def test_sys_setprofile_on_the_main_thread():
    tracer, events, warned = traced_with_warnings(set_and_remove)
    assert all(type(d) is frametrace.ThreadInfo for d in tracer.displaced)
    me = threading.current_thread()
    sp = events[only(events, qual("set_and_remove"))]
    if tracer.backend == "monitoring":
        # sys.setprofile() uses another slot than tool id 2: both run.
        assert tracer.displaced == [] and warned == []
        assert find(events, "later_work") and not sp.open_at_loss
        return
    assert tracer.displaced == [(1, me.ident, me.native_id, "MainThread", None)]
    assert [str(w.message) for w in warned] == [
        f"frametrace: thread 'MainThread' (thread_serial 1, id {me.ident}, native id "
        f"{me.native_id}) stopped being recorded before stop(): sys.setprofile() or another "
        f"profiler replaced frametrace's hook on it; its frames still open then end at its "
        f"last record, flagged open_at_loss (see Tracer.displaced)"]
    assert warned[0].filename == __file__  # from stop(), at its caller
    # Nothing after the hook went: later_work() ran untraced.
    assert not find(events, "later_work")
    # The frames open then end at the thread's last record: the call of
    # sys.setprofile() that replaced the hook, not at the stop.
    call = events[only(events, "sys.setprofile")]
    assert call.start_ns == call.end_ns == sp.end_ns < tracer.stop_ns
    for ev in (sp, call):
        assert ev.open_at_loss and not ev.open_at_stop
    assert all(ev.open_at_loss for ev in events if ev.end_ns == sp.end_ns and ev.depth <= sp.depth)
    assert not any(ev.open_at_stop for ev in events)


def test_warned_once_and_stop_latched():
    tracer = frametrace.Tracer()
    with pytest.warns(RuntimeWarning) if tracer.backend == "setprofile" else warnings.catch_warnings():
        tracer.start()
        set_and_remove()
        tracer.stop()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tracer.stop()  # latched: no second warning
    assert len(tracer.displaced) == (1 if tracer.backend == "setprofile" else 0)


def test_warning_as_error_raised_from_stop_after_stopping():
    tracer = frametrace.Tracer()
    if tracer.backend != "setprofile":
        pytest.skip("sys.setprofile() does not displace the monitoring backend")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(RuntimeWarning, match="replaced frametrace's hook"):
            with tracer:
                set_and_remove()
    assert not tracer.active and tracer.displaced
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)


def in_worker(body, name):
    thread = threading.Thread(target=body, name=name)
    thread.start()
    thread.join()
    return thread


def worker_body():
    work()
    sys.setprofile(other_profiler)
    sys.setprofile(None)
    later_work()


def test_sys_setprofile_on_a_worker_that_ends_before_stop():
    seen = {}

    def run():
        thread = in_worker(worker_body, "replacer")
        seen["thread"] = (thread.ident, thread.native_id)
        time.sleep(0.01)  # the main thread goes on after the worker ended

    tracer, events, warned = traced_with_warnings(run)
    ident, native = seen["thread"]
    wb = events[only(events, qual("worker_body"))]
    assert wb.thread_id == ident
    if tracer.backend == "monitoring":
        assert tracer.displaced == [] and warned == [] and find(events, "later_work")
        return
    assert tracer.displaced == [(2, ident, native, "replacer", None)]
    assert len(warned) == 1
    assert str(warned[0].message).startswith(
        f"frametrace: thread 'replacer' (thread_serial 2, id {ident}, native id {native}) "
        f"ended after its recording had stopped: sys.setprofile() or another profiler "
        f"replaced frametrace's hook on it;")
    # Not stretched to the stop: the thread's frames end at its last record.
    worker = [ev for ev in events if ev.thread_id == ident]
    last = max(ev.end_ns for ev in worker)
    assert wb.open_at_loss and wb.end_ns == last < tracer.stop_ns
    assert all(ev.open_at_loss for ev in worker if ev.end_ns == last and ev.depth <= wb.depth)
    assert not find(events, "later_work")
    # The main thread went on being recorded.
    assert not any(ev.open_at_loss for ev in events if ev.thread_id == threading.get_ident())


def test_sys_setprofile_on_a_worker_alive_at_stop():
    replaced = threading.Event()
    release = threading.Event()

    def body():
        work()
        sys.setprofile(None)
        replaced.set()
        release.wait()
        later_work()

    thread = threading.Thread(target=body, name="still-running")
    try:
        def run():
            thread.start()
            replaced.wait()

        tracer, events, warned = traced_with_warnings(run)
    finally:
        release.set()
        thread.join()
    if tracer.backend == "monitoring":
        assert tracer.displaced == [] and warned == []
        return
    assert tracer.displaced == [(2, thread.ident, thread.native_id, "still-running", None)]
    assert "'still-running'" in str(warned[0].message) and len(warned) == 1
    b = events[only(events, qual("test_sys_setprofile_on_a_worker_alive_at_stop.<locals>.body"))]
    assert b.open_at_loss and not b.open_at_stop and b.end_ns < tracer.stop_ns


def enable_cprofile():
    work()
    prof = cProfile.Profile()
    prof.enable()
    work()
    prof.disable()
    later_work()


def test_cprofile_inside_the_traced_region():
    tracer = frametrace.Tracer()
    if tracer.backend == "monitoring":
        # CPython refuses cProfile: frametrace holds the profiler tool id,
        # under a name that says what to do.
        with tracer:
            with pytest.raises(ValueError):
                enable_cprofile()
            assert sys.monitoring.get_tool(sys.monitoring.PROFILER_ID) == HOLDER
        assert sys.monitoring.get_tool(sys.monitoring.PROFILER_ID) is None
        assert tracer.displaced == []
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with tracer:
            enable_cprofile()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    if sys.version_info >= (3, 12):
        # cProfile is on sys.monitoring there: frametrace's hook stays.
        assert tracer.displaced == [] and not caught and find(events, "later_work")
        return
    me = threading.current_thread()
    assert tracer.displaced == [(1, me.ident, me.native_id, "MainThread", None)]
    assert len(caught) == 1 and "replaced frametrace's hook" in str(caught[0].message)
    enable = events[only(events, "Profiler.enable") if find(events, "Profiler.enable")
                    else only(events, "enable")]
    assert enable.open_at_loss and enable.start_ns == enable.end_ns
    assert events[only(events, qual("enable_cprofile"))].open_at_loss
    assert not find(events, "later_work")


def save_replace_restore():
    work()
    saved = sys.getprofile()
    sys.setprofile(other_profiler)
    work(100)
    sys.setprofile(saved)
    later_work()


def test_hook_put_back_through_sys_setprofile():
    tracer, events, warned = traced_with_warnings(save_replace_restore)
    # Recording went on after the hook came back...
    assert find(events, "later_work")
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    if tracer.backend == "monitoring":
        assert tracer.displaced == [] and warned == []
        return
    # ... but the thread missed what ran meanwhile: reported all the same.
    me = threading.current_thread()
    assert tracer.displaced == [(1, me.ident, me.native_id, "MainThread", None)]
    assert len(warned) == 1
    assert "put it back later; the events in between are missing" in str(warned[0].message)
    # The hook put back was taken for frametrace's: stop() removed it.
    assert sys.getprofile() is None


def test_hook_put_back_after_its_tracer_stopped_turns_profiling_off():
    tracer = frametrace.Tracer()
    if tracer.backend != "setprofile":
        pytest.skip("the monitoring backend has no profile function to save")
    tracer.start()
    saved = sys.getprofile()
    tracer.stop()
    sys.setprofile(saved)  # a tool puts back what it saved, too late
    try:
        work()
        assert sys.getprofile() is None
    finally:
        sys.setprofile(None)
    # Called other than as this thread's profile function: does nothing.
    assert saved(sys._getframe(), "call", None) is None
    with pytest.raises(TypeError):
        saved(1, 2)


@MONITORING_ONLY
def test_old_hook_put_back_under_a_monitoring_tracer():
    earlier = frametrace.Tracer(backend="setprofile")
    earlier.start()
    saved = sys.getprofile()
    earlier.stop()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with frametrace.Tracer(backend="monitoring") as tracer:
            sys.setprofile(saved)
            work()
            assert sys.getprofile() is None  # turned itself off
    assert tracer.displaced == []
    assert find(tracer.getEvents(), "work")


# ---- the monitoring backend: another tool frees or changes tool id 2 ----

def unraisable_errors():
    errors = []
    return errors, lambda hook_args: errors.append(hook_args.exc_value)


@MONITORING_ONLY
@pytest.mark.parametrize("change", ["free_tool_id", "set_events", "register_callback", "taken_over"])
def test_tool_id_changed_by_another_tool(change, monkeypatch):
    tracer = frametrace.Tracer()
    if tracer.backend != "monitoring":
        pytest.skip("the setprofile backend does not hold tool id 2")
    mon = sys.monitoring
    errors, hook = unraisable_errors()
    monkeypatch.setattr(sys, "unraisablehook", hook)

    def body():
        work()
        if change == "free_tool_id":
            mon.free_tool_id(mon.PROFILER_ID)
        elif change == "set_events":
            mon.set_events(mon.PROFILER_ID, 0)
        elif change == "register_callback":
            mon.register_callback(mon.PROFILER_ID, mon.events.PY_START, None)
        else:
            mon.free_tool_id(mon.PROFILER_ID)
            mon.use_tool_id(mon.PROFILER_ID, "another tool")
        later_work()

    try:
        tracer, events, warned = traced_with_warnings(body)
        if change == "taken_over":
            # Another tool's now: left as it is.
            assert mon.get_tool(mon.PROFILER_ID) == "another tool"
    finally:
        if mon.get_tool(mon.PROFILER_ID) == "another tool":
            mon.free_tool_id(mon.PROFILER_ID)
    assert errors == []
    assert mon.get_tool(mon.PROFILER_ID) is None
    # Nothing of frametrace's is left on: no event reaches a callback.
    for event in ("PY_START", "PY_RETURN", "CALL"):
        assert mon.register_callback(mon.PROFILER_ID, getattr(mon.events, event), None) is None
    me = threading.current_thread()
    assert tracer.displaced == [(1, me.ident, me.native_id, "MainThread", None)]
    assert len(warned) == 1 and "freed or changed sys.monitoring tool id 2" in str(warned[0].message)
    b = events[only(events, qual("test_tool_id_changed_by_another_tool.<locals>.body"))]
    assert not any(ev.open_at_stop for ev in events)
    if change == "set_events" or (change == "free_tool_id" and sys.version_info >= (3, 14)):
        # Recording stopped there (3.12 and 3.13 keep a freed id's events
        # on): the frames open then end at the last record.
        assert b.open_at_loss and not find(events, "later_work")
    with frametrace.Tracer() as again:  # the tool id can be taken again
        work()
    assert find(again.getEvents(), "work") and again.displaced == []


# ---- frametrace refused: the session says so ----

def occupy_the_hook(backend):
    if backend == "setprofile":
        sys.setprofile(other_profiler)
        return lambda: sys.setprofile(None)
    sys.monitoring.use_tool_id(sys.monitoring.PROFILER_ID, "another tool")
    return lambda: sys.monitoring.free_tool_id(sys.monitoring.PROFILER_ID)


@pytest.mark.parametrize("where", ["enter", "step"])
def test_session_refused_says_so(where):
    release = occupy_the_hook(frametrace.Tracer().backend)
    try:
        schedule = None if where == "enter" else frametrace.schedule(wait=1, warmup=0, active=1)
        with pytest.raises(frametrace.ConflictError, match="another profiler") as info:
            with frametrace.profile(schedule=schedule) as prof:
                for _ in range(3):
                    work()
                    prof.step()
        assert info.value.__context__ is None
        assert "before start()" not in str(info.value)
    finally:
        release()
    with frametrace.profile() as prof:  # usable once the other profiler left
        work()
    assert find(prof.last_trace.events, "work")
