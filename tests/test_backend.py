"""The two backends: PyEval_SetProfile everywhere, sys.monitoring on 3.12+.
The rest of the suite runs on each (see conftest.py); here, what differs:
choosing one, and both giving the same trace of the same program."""
import subprocess
import sys
import threading

import pytest

import frametrace
from invariants import check_invariants, subtree
from targets import calls

MONITORING = sys.version_info >= (3, 12)
needs_monitoring = pytest.mark.skipif(not MONITORING, reason="sys.monitoring is 3.12+")


def test_backend_argument(monkeypatch):
    assert frametrace.Tracer(backend="setprofile").backend == "setprofile"
    monkeypatch.delenv("FRAMETRACE_BACKEND")
    default = "monitoring" if MONITORING else "setprofile"
    assert frametrace.Tracer().backend == default
    assert frametrace.Tracer(backend="auto").backend == default
    assert frametrace.Tracer(backend=None).backend == default
    monkeypatch.setenv("FRAMETRACE_BACKEND", "setprofile")
    assert frametrace.Tracer().backend == "setprofile"
    assert frametrace.Tracer(backend="auto").backend == "setprofile"
    with pytest.raises(TypeError, match="backend must be a str"):
        frametrace.Tracer(backend=1)
    with pytest.raises(ValueError, match="backend must be .* got 'sys.monitoring'"):
        frametrace.Tracer(backend="sys.monitoring")
    if MONITORING:
        assert frametrace.Tracer(backend="monitoring").backend == "monitoring"
    else:
        with pytest.raises(ValueError, match="needs sys.monitoring"):
            frametrace.Tracer(backend="monitoring")
    with pytest.raises(ValueError, match="backend"):
        frametrace.profile(backend="nope")


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


def trees(backend, c_calls=True):
    with frametrace.trace(backend=backend, c_calls=c_calls) as tracer:
        program_with_threads()
    events = tracer.getEvents()
    check_invariants(tracer, events)
    # The main thread's root is program_with_threads; the other thread's, its
    # first (outermost) `program`, however deep threading calls it (3.14's
    # Thread.run goes through Context.run).
    roots = {}
    main = threading.get_ident()
    for i, ev in enumerate(events):
        if ev.name == "program_with_threads" or (ev.name == "program" and ev.thread_id != main):
            roots.setdefault(tracer.thread_names.get(ev.thread_id, ev.thread_id), subtree(events, i))
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
    assert mon.get_tool(mon.PROFILER_ID) == "frametrace"
    with pytest.raises(RuntimeError, match="another frametrace Tracer is already active"):
        frametrace.Tracer(backend="setprofile").start()
    tracer.stop()
    assert mon.get_tool(mon.PROFILER_ID) is None
    # A tracer dropped while active gives it back too.
    frametrace.Tracer(backend="monitoring").start()
    assert mon.get_tool(mon.PROFILER_ID) is None


@needs_monitoring
def test_cli_backend_option(tmp_path):
    script = tmp_path / "p.py"
    script.write_text("def f():\n    return len('ab')\nf()\n")
    for backend in ("setprofile", "monitoring"):
        out = tmp_path / f"{backend}.json"
        proc = subprocess.run([sys.executable, "-m", "frametrace", "run", "--backend", backend,
                               "-o", str(out), str(script)], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        trace = frametrace.load(out)
        assert [(e.name, e.depth) for e in trace.events] == [("<module>", 0), ("f", 1), ("len", 2)]
