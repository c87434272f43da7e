"""Other tools' slices joined into frametrace's files (frametrace.torch's
ops; here hand-made, so that no torch is needed), opened in the real
Perfetto UI: each op nested in the C call it was placed in, on the
thread's own track, in the Chrome JSON and the .pftrace alike; the ones on
tracks of their own there too; no importer error or data loss."""
import pytest

import frametrace
from frametrace.export import Slice, write_chrome, write_perfetto
from support import trace_of
from ui_compare import bad_stats, snapshot

pytestmark = pytest.mark.browser


def work():
    return sorted(range(50)), len("abc")


@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    out = tmp_path_factory.mktemp("slices")
    with frametrace.trace(backend="setprofile") as tracer:
        work()
    events = tracer.getEvents()
    sorted_call = next(e for e in events if e.name == "sorted")
    len_call = next(e for e in events if e.name == "len")
    serial = sorted_call.thread_serial
    a, b = sorted_call.start_ns, sorted_call.end_ns
    ops = [Slice("aten::outer", "cpu_op", a + (b - a) // 4, b - (b - a) // 4),
           Slice("aten::inner", "cpu_op", a + (b - a) // 3, a + (b - a) // 2),
           Slice("aten::len", "cpu_op", len_call.start_ns, len_call.end_ns)]
    tracks = [("torch: device 0 stream 7", [Slice("kernel", "kernel", a, b)])]
    for ext, writer in ((".json", write_chrome), (".pftrace", write_perfetto)):
        writer(trace_of(tracer, slices={serial: ops}, slice_tracks=tracks), out / f"joined{ext}")
    return out, {"sorted": sorted_call, "len": len_call}


@pytest.mark.parametrize("ext", [".json", ".pftrace"])
def test_joined_slices_nest_in_their_calls_in_the_ui(perfetto_ui, report, joined, ext):
    out, calls = joined
    with perfetto_ui.open(out / f"joined{ext}") as loaded:
        seen = snapshot(loaded)
    slices = {s["id"]: s for s in seen["slices"]}
    by_name = {s["name"]: s for s in slices.values()}
    parent = {n: slices[by_name[n]["parent_id"]]["name"] if by_name[n]["parent_id"] is not None
              else None for n in ("aten::outer", "aten::inner", "aten::len", "kernel")}
    report.append(f"== joined slices ({ext}): parents {parent}")
    assert parent == {"aten::outer": "sorted", "aten::inner": "aten::outer",
                      "aten::len": "len", "kernel": None}
    assert by_name["aten::outer"]["track_id"] == by_name["sorted"]["track_id"]
    assert by_name["aten::outer"]["category"] == "cpu_op"
    # Its own track, named: a thread of that name in the JSON (a tid of
    # its own), a named track in the .pftrace.
    names = {t["id"]: t["name"] for t in seen["tracks"]}
    thread_names = {t["utid"]: t["name"] for t in seen["threads"]}
    names.update((t["id"], thread_names.get(t["utid"])) for t in seen["thread_tracks"])
    assert names[by_name["kernel"]["track_id"]] == "torch: device 0 stream 7"
    assert by_name["aten::len"]["dur"] == calls["len"].end_ns - calls["len"].start_ns
    assert bad_stats(seen) == []
