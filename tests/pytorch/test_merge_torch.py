"""frametrace merge takes torch.profiler's Chrome traces
(export_chrome_trace), placing them by their baseTimeNanoseconds."""
import json
import subprocess
import sys

import pytest

from support import child_env
from torch_support import torch  # skips the module without torch

import frametrace
from frametrace.merge import merge


def test_torch_trace_lands_on_the_frametrace_timeline(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Linear(16, 16)
    with frametrace.profile(on_trace_ready=lambda t: t.save(tmp_path / "ft.json")):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(5):
                model(torch.randn(4, 16)).sum().backward()
    prof.export_chrome_trace(str(tmp_path / "torch.json"))
    other = merge([tmp_path / "ft.json", tmp_path / "torch.json"], tmp_path / "all.json")
    assert [d["source"] for d in other["inputs"]] == [str(tmp_path / "ft.json"),
                                                     str(tmp_path / "torch.json")]
    assert other["metadata"]["merged_from"] == [str(tmp_path / "ft.json"),
                                                str(tmp_path / "torch.json")]
    torch_input = other["inputs"][1]
    assert torch_input["metadata"]["baseTimeNanoseconds"] > 0
    with open(tmp_path / "all.json") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    torch_pid = torch_input["pid"]
    linear_ops = [e for e in events if e.get("name") == "aten::addmm" and e.get("pid") == torch_pid]
    c_calls = [e for e in events if e.get("cat") == "c" and e.get("pid") == other["inputs"][0]["pid"]]
    assert len(linear_ops) == 5
    # Each op inside a C call of the Python trace, to a us (the JSON's
    # float ts from torch's base).
    for op in linear_ops:
        assert any(c["ts"] - 1 <= op["ts"] and op["ts"] + op["dur"] <= c["ts"] + c["dur"] + 1
                   for c in c_calls), op
    # load() reads the merged file: the torch process's events are not
    # frametrace's, the Python trace's are all there.
    merged = frametrace.load(tmp_path / "all.json")
    assert [p["source"] for p in merged.processes] == other["metadata"]["merged_from"]


def test_merge_refuses_a_chrome_trace_that_is_neither(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(ValueError, match="x.json"):
        merge([tmp_path / "x.json"], tmp_path / "out.json")


def test_merge_command_takes_torch_traces(tmp_path):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(8).sum()
    prof.export_chrome_trace(str(tmp_path / "torch.json"))
    proc = subprocess.run([sys.executable, "-m", "frametrace", "merge", str(tmp_path / "torch.json"),
                           "-o", str(tmp_path / "out.json")], env=child_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "out.json") as fh:
        names = {e.get("name") for e in json.load(fh)["traceEvents"]}
    assert "aten::sum" in names
