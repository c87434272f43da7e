"""The README's main command: the bundled training loop, run as a user would."""
import json
import os
import subprocess
import sys

from support import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "train_loop.py")


def test_train_loop_example(tmp_path):
    out = subprocess.run(
        [sys.executable, "-X", "faulthandler", EXAMPLE, "--out", str(tmp_path / "traces")],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    assert "trained 40 steps" in out
    assert out.count("train_step traced 2x, 3 ranges recorded") == 2
    files = sorted(os.listdir(tmp_path / "traces"))
    assert len(files) == 2
    with open(tmp_path / "traces" / files[1]) as fh:
        doc = json.load(fh)
    meta = doc["metadata"]
    assert meta["tracer_stop_ns"] < meta["session_end_ns"]
    end = doc["event_fields"].index("end_ns")
    assert all(ev[end] <= meta["tracer_stop_ns"] for ev in doc["events"])
