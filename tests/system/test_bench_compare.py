"""benchmarks/compare.py runs end to end (a smoke run: tiny workload, one
rep, no peers, no chart) and writes its tables.  No timing is checked."""
import os
import subprocess
import sys

import pytest

from support import ROOT

# A tracer runs here (in this process or a child): in every setup.
pytestmark = pytest.mark.usefixtures("clock")

COMPARE = os.path.join(ROOT, "benchmarks", "compare.py")


@pytest.mark.parametrize("clock", ["cycles"], indirect=True)
def test_compare_quick_smoke(tmp_path):
    proc = subprocess.run(
        [sys.executable, COMPARE, "--quick", "--reps", "1", "--workloads", "fib",
         "--tracers", "untraced,floor,frametrace", "--no-chart", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    written = sorted(os.listdir(tmp_path))
    assert [n for n in written if n.endswith(".md")], written
    md = next(n for n in written if n.endswith(".md"))
    text = (tmp_path / md).read_text()
    assert text == proc.stdout
    rows = [line for line in text.splitlines() if line.startswith("| fib | ")]
    tracers = {line.split("|")[2].strip() for line in rows}
    assert {"untraced", "floor", "frametrace"} <= tracers, text
    # The recording table has frametrace's row, with the calls it kept.
    recording = [line for line in rows if line.split("|")[2].strip() == "frametrace"
                 and "," in line.split("|")[3]]
    assert recording, text
