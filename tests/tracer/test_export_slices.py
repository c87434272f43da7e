"""Other tools' slices written with a tracer's frames (what frametrace.torch
joins): on the thread's track, nested with its frames, in the Chrome JSON
and the .pftrace alike (the .pftrace writer merges them into the thread's
packet sequence); on tracks of their own; bad arguments refused."""
import json

import pytest

import frametrace
from frametrace.export import SLICE_TRACKS_TID_BASE, Slice, write_chrome, write_perfetto
from support import trace_of
from targets import calls

pftrace = pytest.importorskip("pftrace")


def traced():
    with frametrace.Tracer() as tracer:
        calls.branch(2)
        sorted(range(10))
    return tracer, tracer.getEvents()


def placed(events):
    """Slices inside, around and between the frames of the main thread:
    (thread serial, [Slice], {slice name: the name of the slice it must be
    nested in, or None})."""
    top = next(e for e in events if e.name == "sorted")
    branch = next(e for e in events if e.name.endswith("branch") and e.depth == min(
        x.depth for x in events if x.name.endswith("branch")))
    a, b = top.start_ns, top.end_ns
    mid = a + (b - a) // 2
    ops = [Slice("op.in_sorted", "cpu_op", a + 1, mid),
           Slice("op.in_op", "cpu_op", a + 2, a + 3),
           Slice("op.same_as_sorted", "cpu_op", a, b),
           Slice("op.around_branch", "cpu_op", branch.start_ns - 1, branch.end_ns + 1),
           Slice("op.after", "cpu_op", b + 10_000_000, b + 10_000_100)]
    want = {"op.in_sorted": "op.same_as_sorted", "op.in_op": "op.in_sorted",
            "op.same_as_sorted": "sorted", "op.around_branch": branch.parent,
            "op.after": None}
    return top.thread_serial, ops, want, branch, events


def test_slices_nest_with_the_frames_in_the_pftrace(tmp_path):
    tracer, events = traced()
    serial, ops, want, branch, events = placed(events)
    write_perfetto(trace_of(tracer, thread_slices={serial: ops}, slice_tracks=[("gpu", [Slice("kernel", "kernel", 5, 10)])]), tmp_path / "t.pftrace")
    decoded = pftrace.decode(tmp_path / "t.pftrace")
    main = next(t for t in tracer.threads if t.serial == serial)
    uuid, _ = pftrace.thread_tracks(decoded)[main.native_thread_id]
    slices = decoded.slices[uuid]
    # Parents by the decoder's own stack (SLICE_BEGIN/END order).
    parent, stack = {}, []
    for s in slices:
        del stack[s.depth:]
        parent[s.name] = stack[-1].name if stack else None
        stack.append(s)
    around_parent = events[branch.parent].name if branch.parent >= 0 else None
    want = dict(want, **{"op.around_branch": around_parent})
    assert {n: parent[n] for n in want} == want
    assert parent[branch.name] == "op.around_branch"
    got = {s.name: (s.start, s.end, s.category) for s in slices if s.category == "cpu_op"}
    assert got == {x.name: (x.start_ns, x.end_ns, "cpu_op") for x in ops}
    # The frames are all there, unchanged.
    frames = [(s.name, s.start, s.end) for s in slices if s.category != "cpu_op"]
    assert frames == [(e.name, e.start_ns, e.end_ns) for e in events if e.thread_serial == serial]
    gpu = pftrace.named_tracks(decoded)["gpu"]
    assert [(s.name, s.start, s.end, s.category) for s in decoded.slices[gpu]] == [
        ("kernel", 5, 10, "kernel")]


def test_slices_on_the_threads_tid_in_the_chrome_json(tmp_path):
    tracer, events = traced()
    serial, ops, want, branch, events = placed(events)
    write_chrome(trace_of(tracer, thread_slices={serial: ops}, slice_tracks=[("gpu", [Slice("kernel", "kernel", tracer.start_ns + 5,
                                              tracer.start_ns + 10, {"stream": 7})])]), tmp_path / "t.json")
    with open(tmp_path / "t.json") as fh:
        doc = json.load(fh)
    main = next(t for t in tracer.threads if t.serial == serial)
    on_thread = [e for e in doc["traceEvents"] if e.get("tid") == main.native_thread_id
                 and e.get("ph") == "X"]
    assert sorted(e["name"] for e in on_thread if e["cat"] == "cpu_op") == sorted(x.name for x in ops)
    # The slices come after the frames in the file (equal times: nested in the frame).
    cats = [e["cat"] for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("tid") ==
            main.native_thread_id]
    assert cats.index("cpu_op") > max(i for i, c in enumerate(cats) if c != "cpu_op")
    kernel = [e for e in doc["traceEvents"] if e.get("name") == "kernel"]
    assert kernel[0]["tid"] == SLICE_TRACKS_TID_BASE and kernel[0]["args"] == {"stream": 7}
    assert round(kernel[0]["ts"] * 1000) == 5 - (doc["otherData"]["frametrace"]["origin_ns"]
                                                 - tracer.start_ns)
    # load() reads the file's frametrace events back, leaving the others out.
    loaded = frametrace.load(tmp_path / "t.json")
    assert [(e.name, e.start_ns, e.end_ns) for e in loaded.events] == [
        (e.name, e.start_ns, e.end_ns) for e in events]


def test_bad_slices_are_refused(tmp_path):
    tracer, _ = traced()
    with pytest.raises(ValueError, match="no traced thread has serial 99"):
        write_chrome(trace_of(tracer, thread_slices={99: []}), tmp_path / "t.json")
    with pytest.raises(TypeError, match="thread_slices"):
        write_perfetto(trace_of(tracer, thread_slices={tracer.threads[0].serial: [("x", 1, 2)]}), tmp_path / "t.pftrace")
    with pytest.raises(TypeError, match="slice_tracks"):
        write_perfetto(trace_of(tracer, slice_tracks=["gpu"]), tmp_path / "t.pftrace")


def test_other_tools_top_level_members(tmp_path):
    """top_level (frametrace.torch: torch.profiler's members) goes before
    traceEvents, each member on a line of its own as torch writes them,
    from the tracer's records and from a loaded trace alike; the file
    loads back with them (a load and a save keep them); frametrace's own
    members cannot be replaced."""
    tracer, _ = traced()
    top = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "totalGlobalMem": 2**40}],
           "baseTimeNanoseconds": 1234, "trace_id": "AB", "ratio": 0.5}
    write_chrome(trace_of(tracer, top_level=top, distributed={"rank": 1}), tmp_path / "t.json")
    loaded = frametrace.load(str(tmp_path / "t.json"))
    assert loaded.chrome_top_level == top and loaded.distributed == {"rank": 1}
    loaded.to_chrome(tmp_path / "u.json")
    for name in ("t.json", "u.json"):
        text = (tmp_path / name).read_text()
        doc = json.loads(text)
        assert list(doc) == ["otherData", "displayTimeUnit", "distributedInfo", *top, "traceEvents"]
        assert {k: doc[k] for k in top} == top
        lines = text.splitlines()
        assert '"baseTimeNanoseconds":1234,' in lines and '"distributedInfo":{"rank": 1},' in lines
        again = frametrace.load(str(tmp_path / name))
        assert again.events and again.chrome_top_level == top
    for bad, error in (({"traceEvents": []}, ValueError), ({"otherData": 1}, ValueError),
                       ({1: 2}, TypeError), ([("a", 1)], TypeError)):
        with pytest.raises(error, match="top_level"):
            write_chrome(trace_of(tracer, top_level=bad), tmp_path / "bad.json")
