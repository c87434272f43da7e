"""The op table (torch's ops as torch.profiler's key_averages() counts
them), on a hand-made Chrome trace as frametrace.torch writes one (no torch
needed): calls, total and self time per op, self time net of the ops nested
in it on the same thread (those of the thread's track of crossing ops
too), input shapes grouped as torch groups them, GPU activity left out;
the same from the file read back, from a trace made in memory, and in
summary()."""
import json

import pytest

from frametrace import ThreadInfo
from frametrace.export import SLICE_TRACKS_TID_BASE, Slice
from frametrace.loader import load
from frametrace.op_table import op_table
from frametrace.reports import summary
from frametrace._trace import Trace

PID, TID, ORIGIN = 4242, 11, 5_000_000_000
TRACKS = ["torch: T1 (not nested in its frames)", "torch: thread 99", "torch: device 0 stream 7"]

LINEAR1 = [[16, 32], [64, 32], [64]]
ADDMM1 = [[64], [16, 32], [32, 64], [], []]
ADDMM2 = [[4], [16, 64], [64, 4], [], []]
# (tid, category, name, start ns, end ns, input dims or None), times from the origin.
OPS = [
    (TID, "cpu_op", "aten::linear", 1000, 4000, LINEAR1),
    (TID, "cpu_op", "aten::t", 1000, 1500, [[64, 32]]),
    (TID, "cpu_op", "aten::addmm", 1500, 3500, ADDMM1),
    (TID, "cpu_op", "aten::linear", 5000, 6000, [[16, 64], [4, 64], [4]]),
    (TID, "cpu_op", "aten::addmm", 5200, 5900, ADDMM2),
    (TID, "cpu_op", "aten::relu", 6500, 7000, [[16, 64]]),
    (TID, "cpu_op", "aten::empty", 8000, 8000, None),
    (TID, "cpu_op", "aten::stack", 9000, 9500, [[[32], [32]], []]),  # a list of tensors
    # Crossing the frames: on the thread's own track of such ops, around the first linear.
    (SLICE_TRACKS_TID_BASE, "user_annotation", "enumerate(DataLoader)#next", 500, 4500, None),
    # A thread frametrace did not trace.
    (SLICE_TRACKS_TID_BASE + 1, "cpu_op", "aten::relu", 100, 300, [[16, 64]]),
    (SLICE_TRACKS_TID_BASE + 1, "cpu_op", "aten::addmm", 400, 900, ADDMM1),
    (SLICE_TRACKS_TID_BASE + 1, "cpu_op", "aten::mm", 500, 600, [[16, 32], [32, 64]]),
    # A GPU stream: no row of its own, as in key_averages().
    (SLICE_TRACKS_TID_BASE + 2, "kernel", "gemm_kernel", 1000, 2000, None),
]
# name: (calls, total, self), worked out by hand.
EXPECTED = {
    "aten::linear": (2, 4000, (3000 - 500 - 2000) + (1000 - 700)),
    "aten::t": (1, 500, 500),
    "aten::addmm": (3, 3200, 2000 + 700 + (500 - 100)),
    "aten::mm": (1, 100, 100),
    "aten::relu": (2, 700, 700),
    "aten::empty": (1, 0, 0),
    "aten::stack": (1, 500, 500),
    "enumerate(DataLoader)#next": (1, 4000, 4000 - 3000),
}
BY_SHAPE = {
    ("aten::addmm", str(ADDMM1)): (2, 2500, 2400),
    ("aten::addmm", str(ADDMM2)): (1, 700, 700),
    ("aten::empty", "[]"): (1, 0, 0),
    ("aten::stack", "[[], []]"): (1, 500, 500),  # as key_averages' shapes: tensors' only
    ("enumerate(DataLoader)#next", "[]"): (1, 4000, 1000),
    ("aten::linear", str(LINEAR1)): (1, 3000, 500),
}


def us(ns):
    return f"{ns // 1000}.{ns % 1000:03d}"


def write_trace(path):
    """A Chrome trace as frametrace.torch writes one: a traced thread's
    Python frame with torch's ops on its tid, tracks of their own (named
    by thread_name events) for the rest."""
    lines = ['{"ph":"M","name":"process_name","cat":"__metadata","pid":%d,"tid":0,'
             '"args":{"name":"python x.py"}}' % PID,
             '{"ph":"M","name":"thread_name","cat":"__metadata","pid":%d,"tid":%d,'
             '"args":{"name":"T1","thread_id":%d,"native_thread_id":%d,"thread_serial":1}}'
             % (PID, TID, TID + 7, TID),
             '{"ph":"X","cat":"python","name":"step","pid":%d,"tid":%d,"ts":0,"dur":10,'
             '"args":{"file":"x.py:3"}}' % (PID, TID)]
    for k, name in enumerate(TRACKS):
        lines.append(json.dumps({"ph": "M", "name": "thread_name", "cat": "__metadata", "pid": PID,
                                 "tid": SLICE_TRACKS_TID_BASE + k, "args": {"name": name}}))
    for tid, cat, name, start, end, dims in OPS:
        args = ',"args":' + json.dumps({"Input Dims": dims, "Ev Idx": 3}) if dims else ""
        lines.append('{"ph":"X","cat":"%s","name":"%s","pid":%d,"tid":%d,"ts":%s,"dur":%s%s}'
                     % (cat, name, PID, tid, us(start), us(end - start), args))
    ft = {"format": "frametrace", "version": 1, "origin_ns": ORIGIN, "start_ns": ORIGIN,
          "stop_ns": ORIGIN + 10_000, "pid": PID, "dropped": 0, "thread_ids": {str(TID): TID + 7},
          "clock_anchor": {"monotonic_ns": ORIGIN, "wall_ns": 1_700_000_000_000_000_000}}
    path.write_text('{"otherData":' + json.dumps({"frametrace": ft}) + ',"traceEvents":[\n'
                    + ",\n".join(lines) + "]}\n")
    return path


def memory_trace(suffix=""):
    """The same ops in a Trace made in memory, as frametrace.torch's join
    leaves them (suffix: after every thread's and track's name, as a merge
    writes " [pid N]")."""
    def sl(op):
        tid, cat, name, start, end, dims = op
        return Slice(name, cat, ORIGIN + start, ORIGIN + end,
                     {"Input Dims": dims, "Ev Idx": 3} if dims else None)

    tracks = [(name + suffix, [sl(op) for op in OPS if op[0] == SLICE_TRACKS_TID_BASE + k])
              for k, name in enumerate(TRACKS)]
    return Trace(events=[], threads=[ThreadInfo((1, TID + 7, TID, "T1" + suffix, None))],
                 slices={1: [sl(op) for op in OPS if op[0] == TID]}, slice_tracks=tracks)


def rows(table):
    return {(r.name if r.input_shapes is None else (r.name, r.input_shapes)):
            (r.calls, r.total_ns, r.self_ns) for r in table.rows}


@pytest.fixture(params=["file", "memory"])
def trace(request, tmp_path):
    return load(write_trace(tmp_path / "t.json")) if request.param == "file" else memory_trace()


def test_calls_total_and_self_time_per_op(trace):
    table = op_table(trace, limit=None)
    assert rows(table) == EXPECTED
    assert table.calls == 12 and table.ops == 8
    # Self times add up to the time of the ops not nested in another (per thread).
    assert table.self_ns == sum(s for _, _, s in EXPECTED.values()) == 6000 + 700
    for r in table.rows:
        assert 0 <= r.self_ns <= r.total_ns
        assert r.mean_ns == r.total_ns / r.calls
        assert r.share == pytest.approx(r.self_ns / 6700)
    assert [r.name for r in table.rows][:2] == ["aten::addmm", "enumerate(DataLoader)#next"]


def test_grouped_by_input_shape_as_torch_groups(trace):
    table = op_table(trace, limit=None, group_by_input_shape=True)
    got = rows(table)
    assert {k: got[k] for k in BY_SHAPE} == BY_SHAPE
    assert len(got) == 10 and table.calls == 12
    for name, (calls, total, self_ns) in EXPECTED.items():
        mine = [v for k, v in got.items() if k[0] == name]
        assert tuple(map(sum, zip(*mine))) == (calls, total, self_ns)
    assert "aten::addmm  [[64], [16, 32], [32, 64], [], []]" in str(table)


def test_sort_and_limit(trace):
    table = op_table(trace, sort="calls", limit=2)
    assert [(r.name, r.calls) for r in table.rows] == [("aten::addmm", 3), ("aten::linear", 2)]
    assert table.ops == 8 and "top 2 shown" in str(table)
    assert [r.name for r in op_table(trace, sort="name", limit=None)] == sorted(EXPECTED)
    with pytest.raises(ValueError, match="sort must be one of"):
        op_table(trace, sort="cpu")
    with pytest.raises(TypeError, match="group_by_input_shape must be a bool"):
        op_table(trace, group_by_input_shape="yes")


def test_summary_prints_the_op_table_after_the_functions(trace):
    table = summary(trace, limit=None)
    assert rows(table.ops) == EXPECTED
    text = str(table)
    assert text.index("functions,") < text.index("torch ops: 8 ops, 12 calls, 0.007 ms self time")
    assert "input shapes recorded: group_by_input_shape=True" in text
    line = next(x for x in text.splitlines() if x.endswith("  aten::addmm"))
    assert line.split()[:3] == ["3", "0.003", "0.003"]  # calls, total ms, self ms
    grouped = summary(trace, group_by_input_shape=True, per_thread=True)
    assert rows(grouped.ops)[("aten::addmm", str(ADDMM1))] == (2, 2500, 2400)
    assert "torch ops: 10 ops and input shapes" in str(grouped)


def test_a_trace_without_ops_has_no_op_table(tmp_path):
    assert summary(Trace(events=[])).ops is None
    assert "torch ops" not in str(summary([]))


def test_the_loaded_ops_are_the_written_ones_and_saved_again(tmp_path):
    trace = load(write_trace(tmp_path / "t.json"))
    mem = memory_trace()
    assert trace.slices[1] == sorted(mem.slices[1], key=lambda x: x.start_ns)
    assert [(n, sorted(xs)) for n, xs in trace.slice_tracks] == [(n, sorted(xs)) for n, xs
                                                               in mem.slice_tracks]
    assert trace.slices[1][0].args == {"Input Dims": LINEAR1, "Ev Idx": 3}
    again = load(trace.save(tmp_path / "again.json"))
    assert rows(op_table(again, limit=None)) == EXPECTED


def test_the_crossing_ops_of_a_merged_process_nest_with_its_thread():
    assert rows(op_table(memory_trace(" [pid 7]"), limit=None)) == EXPECTED
    # Another thread's crossing track is not this thread's.
    other = memory_trace()
    other.slice_tracks[0] = ("torch: T2 (not nested in its frames)", other.slice_tracks[0][1])
    got = rows(op_table(other, limit=None))
    assert got["enumerate(DataLoader)#next"] == (1, 4000, 4000)
    assert got["aten::linear"] == EXPECTED["aten::linear"]


def test_the_step_annotations_are_one_row_as_in_torch():
    steps = [Slice(f"ProfilerStep#{n}", "user_annotation", ORIGIN + 1000 * n, ORIGIN + 1000 * n + 900)
             for n in (2, 3)]
    trace = Trace(events=[], slice_tracks=[("torch: T1 (not nested in its frames)", steps)])
    assert rows(op_table(trace, limit=None)) == {"ProfilerStep*": (2, 1800, 1800)}
