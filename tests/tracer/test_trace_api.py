"""One Trace for every writer and report: as_trace() turns what a user
holds into a Trace, and refuses anything else naming it."""
import json
import pstats

import pytest

import frametrace
from frametrace import reports
from frametrace.export import write_chrome, write_perfetto


def work():
    return sum(range(10))


@pytest.fixture
def stopped(clock):
    with frametrace.trace() as tracer:
        work()
    return tracer


def test_as_trace_of_a_trace_is_the_trace(stopped):
    trace = frametrace.as_trace(stopped)
    assert frametrace.as_trace(trace) is trace


def test_as_trace_of_a_stopped_tracer(stopped):
    trace = frametrace.as_trace(stopped)
    assert trace.tracer is stopped
    assert (trace.tracer_start_ns, trace.tracer_stop_ns) == (stopped.start_ns, stopped.stop_ns)
    assert trace.session_start_ns == stopped.start_ns
    assert trace.threads == stopped.threads
    assert [e.name for e in trace.events] == [e.name for e in stopped.getEvents()]


def test_as_trace_of_a_snapshot(clock):
    with frametrace.trace() as tracer:
        work()
        snap = tracer.snapshot()
    trace = frametrace.as_trace(snap)
    assert trace.tracer is snap
    assert any(e.name.endswith("work") for e in trace.events)


def test_as_trace_of_a_loaded_trace(stopped, tmp_path):
    write_chrome(stopped, tmp_path / "t.json")
    loaded = frametrace.load(tmp_path / "t.json")
    assert frametrace.as_trace(loaded) is loaded


def test_as_trace_of_events(stopped):
    events = stopped.getEvents()
    trace = frametrace.as_trace(events)
    assert trace.tracer is None
    assert trace.events == events


@pytest.mark.parametrize("what", [42, "trace.json", None, {"events": []}, iter([])])
def test_as_trace_refuses_anything_else_naming_it(what):
    with pytest.raises(TypeError, match=f"a stopped frametrace.Tracer.*not {type(what).__name__}$"):
        frametrace.as_trace(what)


def test_as_trace_refuses_a_running_tracer(clock):
    never = frametrace.Tracer()
    with pytest.raises(ValueError, match="never started"):
        frametrace.as_trace(never)
    with frametrace.trace() as tracer:
        with pytest.raises(ValueError, match="running.*stop it first"):
            frametrace.as_trace(tracer)
        with pytest.raises(ValueError, match="running"):
            tracer.save("unused.json")
        with pytest.raises(ValueError, match="running"):
            write_chrome(tracer, "unused.json")
        with pytest.raises(ValueError, match="running"):
            reports.summary(tracer)


@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".pftrace", ".pftrace.gz"])
def test_tracer_save(stopped, tmp_path, suffix):
    path = str(tmp_path / f"t{suffix}")
    assert stopped.save(path) == path
    loaded = frametrace.load(path)
    assert [e.name for e in loaded.events] == [e.name for e in stopped.getEvents()]


@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_snapshot_save(clock, tmp_path, suffix):
    with frametrace.trace() as tracer:
        work()
        snap = tracer.snapshot()
        path = snap.save(str(tmp_path / f"snap{suffix}"))
    names = [e.name for e in frametrace.load(path).events]
    assert any(n.endswith("work") for n in names)


def test_loaded_trace_saves_and_reports(stopped, tmp_path):
    stopped.save(str(tmp_path / "t.pftrace"))
    loaded = frametrace.load(tmp_path / "t.pftrace")
    again = loaded.save(str(tmp_path / "again.json"))
    assert [e.name for e in frametrace.load(again).events] == [e.name for e in loaded.events]
    reports.write_pstats(loaded, tmp_path / "t.pstats")
    assert pstats.Stats(str(tmp_path / "t.pstats")).total_calls == len(loaded.events)


def test_every_writer_and_report_takes_the_trace_first(stopped, tmp_path):
    trace = frametrace.as_trace(stopped)
    trace.process_name = "trainer"
    trace.extra_metadata = {"k": 1}
    write_chrome(trace, tmp_path / "t.json")
    write_perfetto(trace, tmp_path / "t.pftrace")
    with open(tmp_path / "t.json") as fh:
        doc = json.load(fh)
    assert doc["otherData"]["frametrace"]["metadata"]["k"] == 1
    assert [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"] == ["trainer"]
    assert len(frametrace.load(tmp_path / "t.pftrace").events) == len(stopped.getEvents())
    n = len(stopped.getEvents())
    for what in (stopped, trace, stopped.getEvents()):
        assert sum(r.calls for r in reports.summary(what, limit=None)) == n
        assert reports.collapsed_stacks(what, weight="calls")
        reports.write_pstats(what, tmp_path / "t.pstats")
        reports.write_collapsed(what, tmp_path / "t.folded")
        reports.write_flamegraph_svg(what, tmp_path / "t.svg", title="t")
