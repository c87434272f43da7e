"""Sessions at window close: on_trace_ready on
the session's writer thread, events built only when read, failures raised
at the next step() or at exit, windows kept apart, nothing kept over
cycles."""
import sys
import threading

import pytest

import frametrace
from frametrace.loader import load
from frametrace.testing import assert_valid_trace
from support import model


def test_handler_runs_on_the_writer_thread_after_the_close():
    seen = []
    main = threading.current_thread()

    def handler(trace):
        seen.append((threading.current_thread().name, threading.current_thread() is main,
                     trace.cycle))
        with pytest.raises(RuntimeError, match="writer thread"):
            prof.step()
        with pytest.raises(RuntimeError, match="writer thread"):
            prof.stop()
        frametrace.step()  # the global one: nothing, from the writer

    sched = frametrace.schedule(wait=1, warmup=0, active=1, repeat=2)
    with frametrace.profile(schedule=sched, on_trace_ready=handler) as prof:
        for i in range(5):
            model([i])
            prof.step()
        steps = prof.step_num
    assert steps == 5  # the handler's step() calls did not count
    assert seen == [("frametrace-writer", False, 0), ("frametrace-writer", False, 1)]
    assert frametrace.session._writers == set()


def test_events_are_built_only_when_read(tmp_path):
    traces = []

    def handler(trace):
        trace.to_chrome(tmp_path / f"t{trace.cycle}.json")
        trace.to_perfetto(tmp_path / f"t{trace.cycle}.pftrace")
        traces.append(trace)

    sched = frametrace.schedule(wait=0, warmup=0, active=1, repeat=2)
    with frametrace.profile(schedule=sched, on_trace_ready=handler) as prof:
        for i in range(3):
            model([i])
            prof.step()
    assert len(traces) == 2
    for trace in traces:
        # Written straight from the tracer: no Event was made.
        assert trace.__dict__["_events"] is None
        assert [s.step for s in load(tmp_path / f"t{trace.cycle}.json").steps] == [trace.cycle]
    # Read, they are there, built once.
    events = traces[1].events
    assert events is traces[1].events
    assert [e.name for e in events].count("model") == 1
    assert_valid_trace(events, traces[1].tracer_start_ns, traces[1].tracer_stop_ns)
    assert frametrace.Trace().events == []
    given = frametrace.Trace(events=events[:2])
    assert given.events == events[:2]
    assert frametrace.Trace(events=[]) == frametrace.Trace()


class Boom(Exception):
    pass


def test_failed_handler_raises_at_the_next_step():
    done = []
    release = threading.Event()

    def handler(trace):
        release.wait(60)
        done.append(trace.cycle)
        if trace.cycle == 0:
            raise Boom("cycle 0")

    sched = frametrace.schedule(wait=0, warmup=0, active=1, repeat=3)
    with frametrace.profile(schedule=sched, python_steps=0, on_trace_ready=handler) as prof:
        prof.step()  # closes cycle 0: its handler waits
        release.set()
        prof._writer.wait()
        with pytest.raises(Boom, match="cycle 0") as info:
            prof.step()  # closes cycle 1, then raises
        if sys.version_info >= (3, 11):
            assert "cycle 0" in info.value.__notes__[0]
        prof.step()  # raised once: the session goes on
        steps = prof.step_num
    assert steps == 3
    assert done == [0, 1, 2]  # the later windows were handled


def test_failed_handler_raises_at_exit():
    def handler(trace):
        raise Boom(f"cycle {trace.cycle}")

    with pytest.raises(Boom, match="cycle 0"):
        with frametrace.profile(on_trace_ready=handler):
            model([1])
    assert frametrace._running.session is None
    with frametrace.profile():  # the session is over
        pass


def test_failed_handler_does_not_hide_the_body_exception(capfd):
    def handler(trace):
        raise Boom("in the handler")

    with pytest.raises(KeyError):
        with frametrace.profile(on_trace_ready=handler):
            raise KeyError("the body's")
    assert "Boom: in the handler" in capfd.readouterr().err


def test_exit_waits_for_pending_writes():
    release = threading.Event()
    done = []

    def handler(trace):
        release.wait(60)
        done.append(trace.cycle)

    sched = frametrace.schedule(wait=0, warmup=0, active=1, repeat=2)
    timer = threading.Timer(0.2, release.set)
    with frametrace.profile(schedule=sched, python_steps=0, on_trace_ready=handler) as prof:
        prof.step()
        prof.step()
        assert done == []  # both windows closed, neither written yet
        timer.start()
    assert done == [0, 1]
    timer.join()


def test_back_to_back_windows_stay_apart():
    """Each window has its own tracer; the next one starts once the
    previous write ended, so no trace holds the writer's work."""
    traces = []

    def handler(trace):
        names = [e.name for e in trace.events]  # built on the writer thread
        traces.append((trace, names))

    sched = frametrace.schedule(wait=0, warmup=0, active=1, repeat=4)
    with frametrace.profile(schedule=sched, on_trace_ready=handler) as prof:
        for i in range(4):
            model(list(range(i + 1)))
            prof.step()
    assert [t.cycle for t, _ in traces] == [0, 1, 2, 3]
    tracers = {id(t.tracer) for t, _ in traces}
    assert len(tracers) == 4
    session_file = frametrace.session.__file__
    for i, (trace, names) in enumerate(traces):
        assert names.count("model") == 1
        (call,) = [e for e in trace.events if e.name == "model"]
        assert trace.session_start_ns <= call.start_ns <= call.end_ns <= trace.session_end_ns
        assert [s.step for s in trace.steps] == [i]
        assert "frametrace-writer" not in [t.name for t in trace.threads]
        assert not [e for e in trace.events if e.filename == session_file
                    or e.filename == threading.__file__]


@pytest.mark.parametrize("handled", [False, True])
def test_tracers_are_freed_once_handled(handled):
    """The session keeps its last trace only: the earlier windows' tracers
    (their rings) are freed, off the training thread, once handled."""
    import weakref

    tracers = []
    sched = frametrace.schedule(wait=0, warmup=0, active=1, repeat=5)
    with frametrace.profile(schedule=sched,
                            on_trace_ready=(lambda trace: None) if handled else None) as prof:
        for i in range(5):
            model([i])
            prof.step()
            tracers.append(weakref.ref(prof.last_trace.tracer))
    alive = [ref() is not None for ref in tracers]
    assert alive == [False] * 4 + [True]
    assert prof.last_trace.tracer is tracers[-1]()
