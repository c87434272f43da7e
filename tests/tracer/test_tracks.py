"""Where a session's steps and ranges go in the files, so that Perfetto
drops none of them: steps on a track of their own that no OS
thread can have, each thread's ranges on a track of its own (not the
Python frames' track, which they may partly overlap), ranges open across
the whole window recorded, the metadata first in the file, and every
trace (also one without tracer records) written as Chrome JSON that
load() reads back."""
import json
import threading
import warnings

import pytest

import frametrace
from frametrace.export import RANGES_TID_BASE, STEPS_TID, write_chrome, write_perfetto
from frametrace.merge import merge
from frametrace.testing import assert_valid_trace
from targets import calls


def session_trace(python_steps=None):
    """A window of two steps: a range around the whole loop (open across the
    window), one per step, one that starts inside a C call's caller and ends
    in the next step (partly overlapping the Python frames), and one on a
    second thread."""
    done = threading.Event()

    def worker():
        with frametrace.range("worker"):
            calls.branch(3)
        done.set()

    with frametrace.profile(schedule=frametrace.schedule(wait=1, warmup=0, active=2, repeat=1),
                            python_steps=python_steps) as prof:
        with frametrace.range("epoch"):
            for step in range(3):
                with frametrace.range(f"step body {step}"):
                    calls.branch(2)
                    if step == 1:
                        t = threading.Thread(target=worker)
                        t.start()
                        t.join()
                        done.wait()
                prof.step()
    return prof.last_trace


def chrome_doc(path):
    with open(path) as fh:
        return json.load(fh)


def test_a_range_open_across_the_whole_window_is_recorded():
    trace = session_trace()
    main = threading.get_ident()
    epoch = [r for r in trace.ranges if r.name == "epoch"]
    assert len(epoch) == 1
    # Entered before the window and still open at its end.
    assert epoch[0].thread_id == main
    assert epoch[0].open_at_start and epoch[0].open_at_end
    assert (epoch[0].start_ns, epoch[0].end_ns) == (trace.session_start_ns, trace.session_end_ns)
    bodies = sorted(r.name for r in trace.ranges if r.name.startswith("step body"))
    assert bodies == ["step body 1", "step body 2"]
    assert [r.name for r in trace.ranges if r.name == "worker"] == ["worker"]


def test_steps_and_ranges_have_tracks_of_their_own(tmp_path):
    trace = session_trace()
    path = trace.save(tmp_path / "t.json")
    doc = chrome_doc(path)
    # The metadata first: a reader has it before the events.
    assert list(doc) == ["otherData", "displayTimeUnit", "traceEvents"]
    events = doc["traceEvents"]
    frame_tids = {e["tid"] for e in events if e.get("cat") in ("python", "c")}
    steps = [e for e in events if e.get("cat") == "step"]
    ranges = [e for e in events if e.get("cat") == "range"]
    assert steps and {e["tid"] for e in steps} == {STEPS_TID}
    assert STEPS_TID not in frame_tids and 0 not in frame_tids | {e["tid"] for e in steps}
    # Each thread's ranges on one track, none a frames' track; args say whose.
    by_owner = {}
    for e in ranges:
        assert e["tid"] >= RANGES_TID_BASE and e["tid"] not in frame_tids
        by_owner.setdefault(e["args"]["thread_tid"], set()).add(e["tid"])
    assert len(by_owner) == 2 and all(len(t) == 1 for t in by_owner.values())
    assert set(by_owner) <= frame_tids
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e["name"] == "thread_name"}
    assert names[STEPS_TID] == "steps"
    assert all(names[t].startswith("ranges: ") for ts in by_owner.values() for t in ts)
    # No two slices of a track partly overlap (what Perfetto would drop).
    by_track = {}
    for e in events:
        if e.get("ph") == "X":
            by_track.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        open_ends = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + 1e-3, (start, end, open_ends[-1])
            open_ends.append(end)
    # load() gives back the same ranges, on their threads, and steps.
    loaded = frametrace.load(path)
    assert sorted(loaded.ranges) == sorted(trace.ranges)
    assert loaded.steps == trace.steps
    assert loaded.events == trace.events
    assert loaded.threads == trace.threads


def test_every_kind_of_trace_is_written_as_chrome_json_and_read_back(tmp_path):
    traced = session_trace()
    no_python = session_trace(python_steps=0)
    assert no_python.tracer is None and no_python.events == []
    for name, trace in [("traced", traced), ("no_python", no_python)]:
        path = trace.save(tmp_path / f"{name}.json.gz")
        loaded = frametrace.load(path)
        assert loaded.events == trace.events
        assert sorted(loaded.ranges) == sorted(trace.ranges)
        assert loaded.steps == trace.steps
        assert (loaded.tracer_start_ns, loaded.tracer_stop_ns) == (trace.tracer_start_ns,
                                                                   trace.tracer_stop_ns)
        assert loaded.session_end_ns == trace.session_end_ns
        # A loaded trace writes the same again, from its Events, with its
        # own clock anchor (merge places it by that).
        again = loaded.save(tmp_path / f"{name}-again.json")
        reloaded = frametrace.load(again)
        assert reloaded.events == loaded.events and reloaded.ranges == loaded.ranges
        assert reloaded.steps == loaded.steps and reloaded.threads == loaded.threads
        assert reloaded.clock_anchor == loaded.clock_anchor == trace.clock_anchor
        assert_valid_trace(reloaded.events, reloaded.tracer_start_ns or 0,
                           reloaded.tracer_stop_ns or 0)
        merged = merge([path, again], tmp_path / f"{name}-merged.json")
        assert len(merged["inputs"]) == 2
    traced.save(tmp_path / "t.pftrace")
    assert (tmp_path / "t.pftrace").stat().st_size > 0
    # Traces without tracer records as .pftrace too, read back the same.
    for name, trace in (("no_python", no_python),
                        ("loaded", frametrace.load(tmp_path / "traced.json.gz"))):
        back = frametrace.load(trace.save(tmp_path / f"{name}.pftrace"))
        assert back.events == trace.events and back.threads == trace.threads
        assert back.ranges == trace.ranges and back.steps == trace.steps
    with pytest.raises(ValueError, match="unknown trace extension"):
        traced.save(tmp_path / "t.txt")


def deep(n):
    return deep(n - 1) if n else 0


def test_a_trace_deeper_than_perfetto_shows_is_written_with_a_warning(tmp_path):
    with frametrace.Tracer(c_calls=False) as tracer:
        deep(600)
    with pytest.warns(RuntimeWarning, match=r"nest \d+ deep; Perfetto's UI shows 512 levels"):
        write_chrome(tracer, tmp_path / "deep.json")
    trace = frametrace.load(tmp_path / "deep.json")
    assert max(e.depth for e in trace.events) >= 600
    with pytest.warns(RuntimeWarning, match="512 levels"):
        trace.to_chrome(tmp_path / "again.json")
    with pytest.warns(RuntimeWarning, match="512 levels"):
        write_perfetto(tracer, tmp_path / "deep.pftrace")
    with frametrace.Tracer(c_calls=False) as shallow:
        deep(100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_chrome(shallow, tmp_path / "shallow.json")
        write_perfetto(shallow, tmp_path / "shallow.pftrace")
