"""The two backends: PyEval_SetProfile everywhere, sys.monitoring on 3.12+.
The rest of the suite runs on each (see conftest.py); here, what differs:
choosing one, and both giving the same trace of the same program."""
import sys
import threading

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import subtree
from targets import calls

MONITORING = sys.version_info >= (3, 12)
needs_monitoring = pytest.mark.skipif(not MONITORING, reason="sys.monitoring is 3.12+")


def program_with_threads():
    calls.program()
    t = threading.Thread(target=calls.program, name="other")
    t.start()
    t.join()
    try:
        calls.level1()
    except Exception:
        pass
    calls.recurse(5)


def without_thread_handshake(tree):
    """tree with what Thread.start() and join() call left out: whether they
    wait on their condition depends on how the threads were scheduled."""
    name, kind, children = tree
    if name in ("Thread.start", "Thread.join"):
        return (name, kind, [])
    return (name, kind, [without_thread_handshake(child) for child in children])


def trees(backend, c_calls=True):
    with frametrace.trace(backend=backend, c_calls=c_calls) as tracer:
        program_with_threads()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    # The main thread's root is program_with_threads; the other thread's, its
    # first (outermost) `program`, however deep threading calls it (3.14's
    # Thread.run goes through Context.run).
    roots = {}
    main = threading.get_ident()
    names = {t.serial: t.name for t in tracer.threads}
    for i, ev in enumerate(events):
        if ev.name == "program_with_threads" or (ev.name == "program" and ev.thread_id != main):
            roots.setdefault(names.get(ev.thread_serial) or ev.thread_id,
                             without_thread_handshake(subtree(events, i)))
    return roots, tracer


@needs_monitoring
@pytest.mark.parametrize("c_calls", [True, False])
def test_both_backends_give_the_same_trace(c_calls):
    by_setprofile, _ = trees("setprofile", c_calls)
    by_monitoring, tracer = trees("monitoring", c_calls)
    assert by_setprofile == by_monitoring
    assert set(by_monitoring) == {threading.current_thread().name, "other"}
    assert tracer.backend == "monitoring"


@needs_monitoring
def test_monitoring_tool_id_taken_and_given_back():
    mon = sys.monitoring
    tracer = frametrace.Tracer(backend="monitoring")
    tracer.start()
    # Named so that a profiler it refuses shows what holds the id, and what to do.
    assert mon.get_tool(mon.PROFILER_ID) == (
        "frametrace (a Tracer with backend='monitoring' is recording: stop it first, "
        "or trace with backend='setprofile', which leaves this id free)")
    with pytest.raises(RuntimeError, match="another frametrace Tracer is already active"):
        frametrace.Tracer(backend="setprofile").start()
    tracer.stop()
    assert mon.get_tool(mon.PROFILER_ID) is None
    # A tracer dropped while active gives it back too.
    frametrace.Tracer(backend="monitoring").start()
    assert mon.get_tool(mon.PROFILER_ID) is None
