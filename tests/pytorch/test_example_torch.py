"""examples/torch_train.py, run as the README says."""
import json
import os
import subprocess
import sys

from support import ROOT, child_env
from torch_support import torch  # noqa: F401 - skips the module without torch

import frametrace

EXAMPLE = os.path.join(ROOT, "examples", "torch_train.py")


def test_torch_train_example(tmp_path):
    out = subprocess.run([sys.executable, "-X", "faulthandler", EXAMPLE, "--out", str(tmp_path),
                          "--python-steps", "2"], capture_output=True, text=True, timeout=300,
                         check=True, env=child_env()).stdout
    assert "trained 8 steps" in out and out.count("window 0: ") == 1
    assert "module ranges" in out
    with open(tmp_path / "torch_train.json") as fh:
        doc = json.load(fh)
    cats = {e.get("cat") for e in doc["traceEvents"]}
    assert {"python", "c", "cpu_op", "range", "step"} <= cats
    trace = frametrace.load(tmp_path / "torch_train.json")
    assert trace.events and all(e.end_ns <= trace.tracer_stop_ns for e in trace.events)
    assert {"encoder.0", "head", "MLP"} <= {r.name for r in trace.ranges}
    assert os.path.getsize(tmp_path / "torch_train.pftrace") > 0
