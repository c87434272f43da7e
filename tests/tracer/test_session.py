"""Profiling sessions: schedules, Python tracing limited to the first
active steps, ranges, steps and what each trace holds."""
import os
import re
import threading
import warnings

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import model, qual, run_training
from targets import calls


def test_python_traced_only_in_first_active_step():
    traces = []
    sched = frametrace.schedule(wait=1, warmup=1, active=3, repeat=2)
    with frametrace.profile(schedule=sched, python_steps=1, on_trace_ready=traces.append) as prof:
        run_training(prof, 12)
    assert [t.cycle for t in traces] == [0, 1]
    for trace, first in zip(traces, (2, 7)):
        events = trace.events
        stop = trace.tracer_stop_ns
        assert trace.session_start_ns <= trace.tracer_start_ns <= stop < trace.session_end_ns
        assert all(ev.end_ns <= stop for ev in events)
        # Python ran only in the first active step: one model() call.
        assert [ev.name for ev in events if ev.name == "model"] == ["model"]
        # The loop and its caller were running at the stop: they end
        # exactly there, not at the session's end.
        for name in ("training_loop", "run_training"):
            ev = next(e for e in events if e.name == name)
            assert ev.open_at_stop and ev.end_ns == stop
        # Steps, and the ranges of the later active steps, are still there.
        assert [s.name for s in trace.steps] == [f"step#{n}" for n in range(first, first + 3)]
        assert all(a.end_ns <= b.start_ns for a, b in zip(trace.steps, trace.steps[1:]))
        assert trace.steps[-1].end_ns == trace.session_end_ns
        forward = [r for r in trace.ranges if r.name == "forward"]
        assert len(forward) == 3
        assert forward[-1].start_ns > stop
        for r, s in zip(forward, trace.steps):
            assert s.start_ns <= r.start_ns <= r.end_ns <= s.end_ns
            assert not r.open_at_start and not r.open_at_end
        # Nothing of the session's own work is in the trace.
        assert not [e for e in events if e.filename == frametrace.session.__file__]
        assert trace.pid == os.getpid()
        assert trace.threads[0].thread_id == threading.get_ident()
        assert trace.threads[0].name == threading.current_thread().name


def test_events_of_a_session_trace_are_sound():
    traces = []
    with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=2),
                            on_trace_ready=traces.append) as prof:
        run_training(prof, 4)
    # Two full windows, then the window step 4 opened, closed by the exit.
    assert len(traces) == 3
    assert [len(t.steps) for t in traces] == [2, 2, 1]
    for trace, models in zip(traces, (2, 2, 0)):
        assert_valid_trace(trace.events, trace.tracer_start_ns, trace.tracer_stop_ns)
        assert trace.tracer_stop_ns <= trace.session_end_ns
        assert len([e for e in trace.events if e.name == "model"]) == models  # all active steps
        # Exactly the loop's calls: none of the session's own between steps
        # (neither its Python code nor C calls made from it).
        (root,) = [e for e in trace.events if e.name == "run_training"]
        inside = [e for e in trace.events if e.depth >= root.depth]
        assert {e.name for e in inside} <= {"run_training", "training_loop", "model", "sum"}
        assert len([e for e in inside if e.name == "sum"]) == models
        # The rest: the test's callers (pytest), open since before the start.
        assert all(e.open_at_start and e.depth < root.depth for e in trace.events
                   if e not in inside)


def test_frametrace_step_steps_the_running_session():
    frametrace.step()  # no session: nothing happens
    traces = []

    def loop(steps):
        for i in range(steps):
            model([i])
            frametrace.step()

    with frametrace.profile(schedule=frametrace.schedule(wait=1, warmup=0, active=2),
                            on_trace_ready=traces.append) as prof:
        loop(6)
        assert prof.step_num == 6
    assert [[s.step for s in t.steps] for t in traces] == [[1, 2], [4, 5], []][:len(traces)]
    for t in traces[:2]:
        assert [e.name for e in t.events if e.name == "model"] == ["model", "model"]
        # frametrace.step() itself is the session's: not in the trace.
        assert not [e for e in t.events if e.name == "step" or
                    e.filename == frametrace.session.__file__]
    frametrace.step()  # after the session: nothing happens
    assert prof.step_num == 6


def test_profile_without_schedule_records_everything():
    with frametrace.profile() as prof:
        run_training(prof, 3)
        model([5])
    trace = prof.last_trace
    assert len([e for e in trace.events if e.name == "model"]) == 4
    assert [s.name for s in trace.steps] == ["step#0", "step#1", "step#2", "step#3"]
    assert len(trace.ranges) == 3
    assert trace.tracer_stop_ns <= trace.session_end_ns


def test_prof_stop_ends_python_tracing_but_not_the_session():
    with frametrace.profile() as prof:
        run_training(prof, 2)
        prof.stop()
        stop_seen = prof.last_trace
        run_training(prof, 2)
    trace = prof.last_trace
    assert stop_seen is None  # the window is still open until exit
    assert len([e for e in trace.events if e.name == "model"]) == 2
    assert len(trace.ranges) == 4 and len(trace.steps) == 5
    assert trace.ranges[-1].start_ns > trace.tracer_stop_ns
    assert all(e.end_ns <= trace.tracer_stop_ns for e in trace.events)
    me = next(e for e in trace.events if e.name == qual("test_prof_stop_ends_python_tracing_but_not_the_session"))
    assert me.open_at_stop and me.end_ns == trace.tracer_stop_ns


def test_session_misuse():
    sched = frametrace.schedule(wait=0, warmup=0, active=2)
    with pytest.raises(ValueError, match=r"python_steps=3.*active=2"):
        frametrace.profile(schedule=sched, python_steps=3)
    with pytest.raises(ValueError, match="python_steps"):
        frametrace.profile(python_steps=-1)
    with pytest.raises(TypeError, match="python_steps"):
        frametrace.profile(python_steps=1.0)
    with pytest.raises(TypeError, match="on_trace_ready"):
        frametrace.profile(on_trace_ready="traces/")
    with pytest.raises(TypeError, match="schedule"):
        frametrace.profile(schedule=3)
    with pytest.raises(ValueError, match="buffer_size"):
        frametrace.profile(buffer_size=0)
    prof = frametrace.profile()
    with pytest.raises(RuntimeError, match="outside a session"):
        prof.step()
    with prof:
        with pytest.raises(RuntimeError, match="nest"):
            with frametrace.profile():
                pass
    with pytest.raises(RuntimeError, match="outside a session"):
        prof.step()
    with pytest.raises(RuntimeError, match="already run"):
        with prof:
            pass
    with frametrace.profile():  # the failed attempts left nothing behind
        pass


def test_exit_of_a_session_never_entered():
    prof = frametrace.profile()
    with pytest.raises(RuntimeError, match="never entered"):
        prof.__exit__(None, None, None)
    # Refused without a trace of it: the session still runs as a whole.
    with prof:
        prof.step()
    assert prof.step_num == 1 and prof.last_trace is not None
    # Nor does it end another session that is running.
    with frametrace.profile() as running:
        with pytest.raises(RuntimeError, match="never entered"):
            frametrace.profile().__exit__(None, None, None)
        running.step()
    assert running.last_trace is not None and running.step_num == 1


def test_body_raising_still_delivers_the_trace():
    traces = []
    with pytest.raises(KeyError):
        with frametrace.profile(on_trace_ready=traces.append):
            model([1])
            raise KeyError("boom")
    assert len(traces) == 1 and any(e.name == "model" for e in traces[0].events)
    with frametrace.profile():  # released
        pass


def test_range_decorator_and_misuse():
    @frametrace.range("load")
    def load(x):
        return model([x])

    with frametrace.profile() as prof:
        assert load(2) == 2
    trace = prof.last_trace
    assert [r.name for r in trace.ranges] == ["load"]
    # The decorator's wrapper is the session's code: not in the trace.
    names = [e.name for e in trace.events]
    assert "model" in names and not [n for n in names if "ranged" in n]
    with pytest.raises(TypeError, match="str"):
        frametrace.range(3)
    with pytest.raises(TypeError, match="callable"):
        frametrace.range("x")(3)
    with frametrace.range("no session"):  # harmless outside a session
        pass


def test_save_writes_each_trace(tmp_path):
    sched = frametrace.schedule(wait=0, warmup=0, active=1, repeat=2)
    with frametrace.profile(schedule=sched, on_trace_ready=frametrace.trace_handler(tmp_path / "t")) as prof:
        run_training(prof, 4)
    files = sorted(os.listdir(tmp_path / "t"))
    assert files == [f"frametrace.{os.getpid()}.0.json", f"frametrace.{os.getpid()}.1.json"]
    # Chrome trace JSON (what Perfetto opens), its metadata first.
    first = tmp_path / "t" / files[0]
    assert first.read_text().startswith('{"otherData":{"frametrace":')
    trace = frametrace.load(first)
    assert trace.tracer_stop_ns <= trace.session_end_ns
    assert [s.name for s in trace.steps] == ["step#0"]
    assert "model" in {e.name for e in trace.events}
    path = prof.last_trace.save(tmp_path / "last.json.gz")
    last = frametrace.load(path)
    assert last.cycle == 1 and len(last.steps) == 1
    assert last.events == prof.last_trace.events
    with pytest.raises(ValueError, match="unknown trace extension"):
        prof.last_trace.save(tmp_path / "last.txt")


def test_trace_reports(tmp_path, capsys):
    import pstats
    import xml.etree.ElementTree as ET

    with frametrace.profile() as prof:
        run_training(prof, 3)
    trace = prof.last_trace
    table = trace.summary(sort="calls", limit=5)
    assert "model" in capsys.readouterr().out
    assert any(row.name == "model" and row.calls == 3 for row in table.rows)
    stats = pstats.Stats(trace.to_pstats(tmp_path / "t.pstats"))
    assert any(func[2] == "model" and v[1] == 3 for func, v in stats.stats.items())
    lines = open(trace.to_collapsed(tmp_path / "t.folded")).read().splitlines()
    assert any("model" in line for line in lines)
    root = ET.parse(trace.to_flamegraph_svg(tmp_path / "t.svg")).getroot()
    assert root.tag.endswith("svg")


def test_a_window_that_lost_events_says_so_naming_buffer_size():
    """A window whose rings overflowed (a first call that records far more
    than a step, such as a lazy torch.compile) warns at the step() that
    closes it, with the count the trace holds; a window that kept all says
    nothing."""
    traces = []

    def burst(n):
        for _ in range(n):
            abs(-1)

    with pytest.warns(RuntimeWarning) as told:
        with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=1, repeat=2),
                                buffer_size=256, on_trace_ready=traces.append) as prof:
            burst(10)       # cycle 0: within the ring
            prof.step()
            burst(1000)     # cycle 1: overflows it
            prof.step()
    assert [t.cycle for t in traces] == [0, 1]
    assert traces[0].stats.dropped == 0 and traces[1].stats.dropped > 0
    messages = [str(w.message) for w in told if "lost" in str(w.message)]
    assert len(messages) == 1, messages
    assert messages[0].startswith(
        f"frametrace: {traces[1].stats.dropped:,} events of cycle 1, steps 1-1 were lost "
        f"entirely (the oldest, per thread: buffer_size is 256 records, a call and a return "
        f"are two); buffer_size=")
    assert told[0].filename == __file__  # the step() that closed the window


def _one_window_losing(n, **options):
    """A window of n calls under options: the trace and its loss warnings."""
    traces = []
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=1),
                                c_calls=False, on_trace_ready=traces.append, **options) as prof:
            for i in range(n):
                calls.leaf(i)
            prof.step()
    return traces[0], [str(w.message) for w in told if "lost entirely" in str(w.message)]


@pytest.mark.parametrize("options, setting", [
    (dict(buffer_size=256), "buffer_size"),  # one thread's ring wrapped
    (dict(max_memory=16 << 10), "max_memory"),  # the rings together reached the bound
])
def test_the_loss_warning_names_a_value_that_keeps_the_window(options, setting):
    """The warning names the setting the window ran into and a value of it;
    the same window run again with that value loses nothing."""
    lossy, told = _one_window_losing(20000, **options)
    assert lossy.stats.dropped > 0 and len(told) == 1, told
    named = re.search(r"; (\w+)=(\d+) would have kept them$", told[0])
    assert named and named[1] == setting, told[0]
    kept, told_again = _one_window_losing(20000, **{**options, setting: int(named[2])})
    assert kept.stats.dropped == 0 and kept.stats.dropped_records == 0 and not told_again
    assert len(kept.events) > len(lossy.events)
