"""The op table of a frametrace.torch trace against torch.profiler's own
key_averages() of a run of the same training loop (an MLP, a DataLoader,
SGD, record_shapes=True): the same ops with the same call counts, the
same rows grouped by input shape, plausible times; in Trace.summary() and
in the CLI's summary of the saved file."""
import os
import re
import subprocess
import sys

from torch_support import torch, training  # skips the module without torch

import frametrace
import frametrace.torch
from frametrace.loader import load
from frametrace.op_table import op_table

STEPS = 3


def loop(prof, model, opt, loader):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        prof.step()


class _NoProfiler:
    def step(self):
        pass


def both_runs():
    """(frametrace's trace, torch.profiler's profile) of the same loop,
    after one untraced run (what runs once per process, before either)."""
    loop(_NoProfiler(), *training(STEPS))
    with frametrace.torch.profile(record_shapes=True) as prof:
        loop(prof, *training(STEPS))
    with torch.profiler.profile(record_shapes=True) as tp:
        loop(tp, *training(STEPS))
    return prof.last_trace, tp


def test_ops_and_calls_are_torchs_and_times_are_consistent(tmp_path):
    trace, tp = both_runs()
    table = op_table(trace, limit=None)
    theirs = {e.key: e.count for e in tp.key_averages()}
    assert {r.name: r.calls for r in table.rows} == theirs
    assert {"aten::addmm", "aten::linear", "aten::relu", "Optimizer.step#SGD.step"} <= set(theirs)
    # Self time is the op's own: at most its total, and the self times add
    # up to the time of the ops nested in no other (on each thread).
    ops = [x for xs in trace.slices.values() for x in xs] + [
        x for _, xs in trace.slice_tracks for x in xs]
    assert table.calls == len(ops)
    for r in table.rows:
        assert 0 <= r.self_ns <= r.total_ns, r
    assert sum(r.total_ns for r in table.rows) == sum(x.end_ns - x.start_ns for x in ops)
    assert table.self_ns == sum(r.self_ns for r in table.rows) <= sum(r.total_ns for r in table.rows)
    by_name = {r.name: r for r in table.rows}
    # A linear's time is mostly its addmm's, as in torch's own table.
    linear = by_name["aten::linear"]
    assert linear.self_ns < linear.total_ns and by_name["aten::addmm"].total_ns < linear.total_ns
    # The DataLoader's annotation crosses the Python frames (a track of its
    # own), and its ops (stack, select) are still its children.
    loader = next(r for r in table.rows if r.name.startswith("enumerate(DataLoader)"))
    assert loader.self_ns < loader.total_ns - by_name["aten::stack"].total_ns // 2


def test_grouped_by_input_shape_as_torch_groups(tmp_path):
    trace, tp = both_runs()
    grouped = op_table(trace, limit=None, group_by_input_shape=True)
    theirs = {(e.key, str(e.input_shapes)): e.count
              for e in tp.key_averages(group_by_input_shape=True)}
    assert {(r.name, r.input_shapes): r.calls for r in grouped.rows} == theirs
    assert ("aten::addmm", "[[64], [16, 32], [32, 64], [], []]") in theirs


def test_summary_and_the_cli_show_the_op_table(tmp_path):
    trace, tp = both_runs()
    printed = str(trace.summary(limit=None, print=False))
    assert re.search(r"^torch ops: \d+ ops, \d+ calls", printed, re.M)
    count = {e.key: e.count for e in tp.key_averages()}["aten::addmm"]
    assert re.search(rf"^\s+{count}(\s+\S+){{4}}\s+aten::addmm$", printed, re.M)
    path = trace.save(tmp_path / "t.json")
    assert str(load(path).summary(limit=None, print=False).ops) == str(trace.summary(
        limit=None, print=False).ops)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(frametrace.__file__)))
    out = subprocess.run([sys.executable, "-m", "frametrace", "summary", path, "--limit", "0",
                          "--group-by-input-shape"], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout
    assert re.search(r"^torch ops: \d+ ops and input shapes", out, re.M)
    assert re.search(r"\s+aten::addmm  \[\[64\], \[16, 32\], \[32, 64\], \[\], \[\]\]$", out, re.M)
    assert out.index("functions,") < out.index("torch ops:")
