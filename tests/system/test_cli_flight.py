"""frametrace run --flight-recorder DIR: the program runs
under a flight recorder; the dumps of its slow steps and its exception
are written to DIR, named on stderr, and read back whole."""
import glob
import json
import os
import textwrap

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from test_cli import frametrace_cmd

pytestmark = pytest.mark.usefixtures("clock")

LOOP = textwrap.dedent("""\
    import sys, time
    import frametrace

    def work(i):
        # 20 ms steps: a loaded machine's jitter stays under 3x the median.
        time.sleep(0.5 if i == int(sys.argv[1]) else 0.02)

    for i in range(15):
        work(i)
        frametrace.step()
    if sys.argv[2:] == ["fail"]:
        1 / 0
""")


def dumps(directory):
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "frametrace-dump-*.json"))):
        trace = frametrace.load(path)
        assert_valid_trace(trace.events, trace.tracer_start_ns, trace.tracer_stop_ns)
        with open(path) as f:
            out.append((json.load(f)["otherData"]["frametrace"]["metadata"]["dump"], trace))
    return out


def test_a_slow_step_of_the_program_is_dumped(tmp_path):
    (tmp_path / "loop.py").write_text(LOOP)
    proc = frametrace_cmd("run", "--flight-recorder", "dumps", "loop.py", "10", cwd=tmp_path,
                          check=0)
    ((info, trace),) = dumps(tmp_path / "dumps")
    assert info["reason"] in ("slow step 10", "hung step 10")
    assert info["steps"] == [8, 10]
    assert "flight recorder dump:" in proc.stderr
    assert not (tmp_path / "frametrace.json").exists()  # no whole-run trace
    works = [ev for ev in trace.events if ev.name == "work"]
    assert len(works) == 3


def test_the_program_s_exception_is_dumped_and_its_status_kept(tmp_path):
    (tmp_path / "loop.py").write_text(LOOP)
    proc = frametrace_cmd("run", "--flight-recorder", "dumps", "loop.py", "99", "fail",
                          cwd=tmp_path, check=1)
    assert "ZeroDivisionError" in proc.stderr
    # (A step slowed by a loaded machine may have its own dump.)
    (info,) = [info for info, _ in dumps(tmp_path / "dumps")
               if info["reason"].startswith("exception")]
    assert info["reason"] == "exception ZeroDivisionError"


@pytest.mark.parametrize("other", [["--steps", "3"], ["--fork-traces"], ["--follow-children"],
                                   ["-o", "t.json"]])
def test_options_that_do_not_go_with_it(tmp_path, other):
    (tmp_path / "loop.py").write_text(LOOP)
    proc = frametrace_cmd("run", "--flight-recorder", "dumps", *other, "loop.py", "1",
                          cwd=tmp_path, check=2)
    assert f"--flight-recorder does not go with {other[0]}" in proc.stderr
    assert not (tmp_path / "dumps").exists()
