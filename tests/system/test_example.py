"""The README's main command: the bundled training loop, run as a user would."""
import json
import os
import subprocess
import sys

import frametrace

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
    # Chrome trace JSON, what the Perfetto UI opens.
    with open(tmp_path / "traces" / files[1]) as fh:
        doc = json.load(fh)
    assert doc["traceEvents"] and "frametrace" in doc["otherData"]
    trace = frametrace.load(tmp_path / "traces" / files[1])
    assert trace.tracer_stop_ns < trace.session_end_ns
    assert trace.events and all(ev.end_ns <= trace.tracer_stop_ns for ev in trace.events)


def test_example_says_the_time_summary_says(tmp_path):
    # "Python traced for" is the tracer's start to its stop, the span that
    # frametrace summary prints as "traced for" for the same file.
    out = subprocess.run([sys.executable, EXAMPLE, "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    said = [float(line.split("Python traced for ")[1].split(" ms")[0])
            for line in out.splitlines() if "Python traced for" in line]
    traces = [frametrace.load(tmp_path / name) for name in sorted(os.listdir(tmp_path))]
    assert said == [round((t.tracer_stop_ns - t.tracer_start_ns) / 1e6, 2)
                    for t in sorted(traces, key=lambda t: t.cycle)]
