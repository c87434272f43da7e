"""A trace read from a file (a list of Events, no tracer records) written by
the same C writers as a tracer's: as .pftrace and as Chrome JSON, read back
to the same events, threads, ranges, steps and slices; the .pftrace checked
with Perfetto's own schema; bad events refused with a clear exception and
no file."""
import threading

import pytest

import frametrace
from frametrace import _tracer
from frametrace.export import Slice
from frametrace.loader import load
from pftrace import decode, thread_tracks
from targets import calls
from test_export_perfetto import as_tuples, expected_slices
from test_load import assert_same_events


def session_trace():
    """A session's trace: two threads, ranges, steps, a unicode name, and
    other tools' slices on a thread and on a track of their own."""
    def ünïcode_名前():
        return sorted(str(i) for i in range(20))

    def other_thread():
        with frametrace.range("loader"):
            calls.branch(2)

    with frametrace.profile(python_steps=2) as prof:
        with frametrace.range("outer"):
            for i in range(4):
                with frametrace.range("forward"):
                    ünïcode_名前()
                if i == 1:
                    t = threading.Thread(target=other_thread, name="wörker")
                    t.start()
                    t.join()
                prof.step()
    trace = prof.last_trace
    top = next(e for e in trace.events if e.name.endswith("ünïcode_名前"))
    a, b = top.start_ns, top.end_ns
    trace.slices = {top.thread_serial: [Slice("op", "cpu_op", a, b, {"k": [1, "ü"]})]}
    trace.slice_tracks = [("gpu 0", [Slice("kernel", "kernel", a + 1, b - 1)])]
    return trace


def without_args(slices):
    return {k: [x._replace(args=None) for x in v] for k, v in slices.items()}


def same_content(got, want, args=True):
    """What a written and reread trace keeps: events, threads, ranges, steps
    and slices (a .pftrace: without the slices' args)."""
    assert_same_events(got.events, want.events)
    assert [(t.thread_id, t.native_thread_id, t.serial, t.name) for t in got.threads] == \
        [(t.thread_id, t.native_thread_id, t.serial, t.name) for t in want.threads]
    assert got.ranges == want.ranges and got.steps == want.steps
    assert got.slices == (want.slices if args else without_args(want.slices))
    assert [(n, list(s)) for n, s in got.slice_tracks] == \
        [(n, list(s)) for n, s in want.slice_tracks]
    assert (got.tracer_start_ns, got.tracer_stop_ns) == (want.tracer_start_ns, want.tracer_stop_ns)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The session trace, as frametrace wrote it from the tracer: .json and
    .pftrace."""
    d = tmp_path_factory.mktemp("written")
    trace = session_trace()
    trace.save(d / "t.json")
    trace.save(d / "t.pftrace")
    return d


@pytest.mark.parametrize("source", ["t.json", "t.pftrace"])
@pytest.mark.parametrize("target", [".json", ".json.gz", ".pftrace", ".pftrace.gz"])
def test_a_loaded_trace_is_written_in_either_format(written, tmp_path, source, target):
    loaded = load(written / source)
    assert loaded.tracer is None
    out = tmp_path / f"again{target}"
    loaded.save(out)
    same_content(load(out), loaded, args=".json" in target)
    if ".pftrace" in target:
        # Perfetto's own schema: each thread's slices, names, times, depths
        # and source locations.
        decoded = decode(out)
        assert decoded.unknown == []
        threads = thread_tracks(decoded)
        tids = {e.native_thread_id for e in loaded.events}
        assert tids <= set(threads)
        in_order = sorted(loaded.events, key=lambda e: (e.start_ns, e.depth))
        for tid in tids:
            got = as_tuples(decoded.slices[threads[tid][0]])
            want = expected_slices(in_order, tid)
            if any(s[1] == "cpu_op" for s in got):
                # The thread's op slice holds frames: one level deeper.
                got = [s[:4] + s[5:] for s in got if s[1] != "cpu_op"]
                want = [s[:4] + s[5:] for s in want]
            assert got == want


def test_events_in_any_order(written, tmp_path):
    loaded = load(written / "t.json")
    want = list(loaded.events)
    loaded.events = want[::-1]
    loaded.save(tmp_path / "r.pftrace")
    assert_same_events(load(tmp_path / "r.pftrace").events, want)


def event_with(e, **changes):
    return e.__replace__(**changes)


@pytest.mark.parametrize("case, error, match", [
    ("not an event", TypeError, r"events\[1\] is not a frametrace.Event"),
    ("a tuple", TypeError, r"events\[1\] is not a frametrace.Event"),
    ("negative", ValueError, r"events\[1\]: start_ns -5 and end_ns"),
    ("ends before it starts", ValueError, r"events\[1\]: start_ns .* are not 0 <= start_ns"),
    ("after stop", ValueError, r"events\[1\] ends at .*after the trace's stop"),
    ("a name not str", TypeError, r"events\[1\]: name, filename and kind must be str"),
    ("overlap", ValueError, r"overlap, neither holding the other"),
])
@pytest.mark.parametrize("suffix", [".json", ".pftrace"])
def test_bad_events_raise_and_write_nothing(written, tmp_path, case, error, match, suffix):
    loaded = load(written / "t.json")
    events = list(loaded.events)
    e = next(x for x in events[1:] if x.depth == 0 and x.end_ns > x.start_ns + 2)
    bad = {
        "not an event": "x",
        "a tuple": tuple(e),
        "negative": event_with(e, start_ns=-5),
        "ends before it starts": event_with(e, end_ns=e.start_ns - 1),
        "after stop": event_with(e, end_ns=loaded.tracer_stop_ns + 1),
        "a name not str": event_with(e, name=7),
        "overlap": event_with(e, start_ns=e.start_ns + 1, end_ns=e.end_ns + 1),
    }[case]
    loaded.events = [e, bad] + [x for x in events if x is not e]
    out = tmp_path / f"bad{suffix}"
    with pytest.raises(error, match=match):
        loaded.save(out)
    assert list(tmp_path.iterdir()) == []


def test_the_module_function_checks_its_arguments(tmp_path):
    with pytest.raises(TypeError, match="needs events, threads and format"):
        _tracer._write_events(str(tmp_path / "x.json"))
    with pytest.raises(ValueError, match="no format"):
        _tracer._write_events(str(tmp_path / "x.json"), events=[], threads=[], format="xml")
    with pytest.raises(TypeError, match="events must be a list"):
        _tracer._write_events(str(tmp_path / "x.json"), events=(), threads=[], format="chrome",
                              pid=1, head="", prelude="")
    event = frametrace.Event(("f", "f.py", 1, "py", 1, 1, 5, 9, 0, -1, False, False, 7, False))
    with pytest.raises(ValueError, match=r"events\[0\]: its thread_serial 7 is none"):
        _tracer._write_events(str(tmp_path / "x.json"), events=[event], threads=[(1, 1)],
                              format="chrome", pid=1, head="", prelude="")
    with pytest.raises(TypeError, match="threads must be a list"):
        _tracer._write_events(str(tmp_path / "x.json"), events=[], threads=[1],
                              format="chrome", pid=1, head="", prelude="")
