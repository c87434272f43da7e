"""Tracer lifetime: dropped while active, stopped from another thread,
subclassed, and what it leaves behind."""
import gc
import sys
import threading

import frametrace
from frametrace.testing import assert_valid_trace
from support import only, qual, tracing_installed
from targets import calls


def test_tracer_dropped_while_active_stops_tracing():
    tracer = frametrace.Tracer()
    tracer.start()
    assert tracing_installed()
    del tracer
    gc.collect()
    assert not tracing_installed()
    assert threading.getprofile() is None
    with frametrace.trace() as fresh:  # nothing left active
        calls.leaf(1)
    assert only(fresh.getEvents(), "leaf") >= 0


def test_tracer_in_a_cycle_dropped_while_active():
    holder = []
    tracer = frametrace.Tracer()
    holder.append(holder)
    holder.append(tracer)
    tracer.start()
    assert tracing_installed()
    del tracer, holder
    gc.collect()
    assert not tracing_installed()


def test_stop_from_another_thread():
    stopped = threading.Event()

    def stopper(tracer):
        tracer.stop()
        stopped.set()

    def main_work(tracer):
        calls.leaf(1)
        t = threading.Thread(target=stopper, args=(tracer,))
        t.start()
        stopped.wait()
        calls.leaf(2)  # after the stop: not recorded
        t.join()

    tracer = frametrace.Tracer()
    with tracer:
        main_work(tracer)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    mw = events[only(events, qual("test_stop_from_another_thread.<locals>.main_work"))]
    assert mw.open_at_stop and mw.end_ns == tracer.stop_ns
    assert mw.thread_id == threading.get_ident()
    assert len([e for e in events if e.name == "leaf"]) == 1


class LabelledTracer(frametrace.Tracer):
    label = "unnamed"


def test_python_subclass():
    tracer = LabelledTracer(buffer_size=128)
    tracer.label = "run"
    with tracer:
        calls.leaf(3)
    assert tracer.label == "run" and tracer.buffer_size == 128
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert only(events, "leaf") >= 0
    # The tracer's own methods are never in the trace.
    assert not [e for e in events if e.name.endswith(("__enter__", "__exit__", ".stop"))]


def test_profile_functions_restored_after_stop():
    before_thread_hook = threading.getprofile()
    with frametrace.trace():
        assert threading.getprofile() is not None
    assert sys.getprofile() is None
    assert threading.getprofile() is before_thread_hook


def test_user_threading_profile_hook_restored():
    def hook(frame, event, arg):
        pass

    threading.setprofile(hook)
    try:
        with frametrace.trace():
            pass
        assert threading.getprofile() is hook
    finally:
        threading.setprofile(None)
