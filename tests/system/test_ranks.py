"""Ranks of a distributed job without torch: processes with RANK,
LOCAL_RANK, WORLD_SIZE in their environment (as torchrun sets them) name
their traces "rank N", carry the rank in their metadata and in Chrome
JSON's top-level distributedInfo, write one file per rank (never the
same one), and frametrace merge names the ranks."""
import json
import os
import re
import subprocess
import sys

import pytest

import frametrace
from support import child_env

PACKAGE_ROOT = os.path.dirname(os.path.dirname(frametrace.__file__))
pytestmark = pytest.mark.usefixtures("clock")

PROGRAM = '''\
import frametrace

def step_work():
    return sum(range(10))

for _ in range(3):
    step_work()
    frametrace.step()
'''


def env_for(rank=None, world=None, local=None):
    env = child_env(PYTHONPATH=PACKAGE_ROOT)
    for name, value in (("RANK", rank), ("WORLD_SIZE", world), ("LOCAL_RANK", local),
                        ("LOCAL_WORLD_SIZE", world)):
        env.pop(name, None)
        if value is not None:
            env[name] = str(value)
    return env


def start(tmp_path, env, *args):
    return subprocess.Popen([sys.executable, *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs):
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        assert p.returncode == 0, stderr
        out.append((stdout, stderr))
    return out


def document(path):
    with open(path) as fh:
        return json.load(fh)


@pytest.mark.parametrize("steps", [False, True], ids=["run", "steps"])
def test_run_two_ranks_write_two_files(tmp_path, steps):
    (tmp_path / "prog.py").write_text(PROGRAM)
    extra = ["--steps", "2"] if steps else []
    # Both at once, with the one -o: each writes its own file.
    finish([start(tmp_path, env_for(rank, 2, rank), "-m", "frametrace", "run", *extra,
                  "-o", "trace.json", "prog.py") for rank in (0, 1)])
    names = [f"trace.rank{r}{'.0' if steps else ''}.json" for r in (0, 1)]
    assert sorted(os.listdir(tmp_path)) == sorted(["prog.py", *names])
    for rank, name in enumerate(names):
        doc = document(tmp_path / name)
        info = {"backend": None, "rank": rank, "world_size": 2, "local_rank": rank,
                "local_world_size": 2}
        assert doc["distributedInfo"] == info
        assert doc["otherData"]["frametrace"]["metadata"]["distributed"] == info
        assert [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"] == [
            f"rank {rank}"]
        assert frametrace.load(str(tmp_path / name)).distributed == info
    merged = tmp_path / "merged.json"
    proc = subprocess.run([sys.executable, "-m", "frametrace", "merge", *names, "-o", "merged.json"],
                          cwd=tmp_path, env=env_for(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    trace = frametrace.load(str(merged))
    assert [p["process_name"] for p in trace.processes] == ["rank 0", "rank 1"]
    assert [p["metadata"]["distributed"]["rank"] for p in trace.processes] == [0, 1]
    assert [e.name for e in trace.events].count("step_work") == (2 if steps else 3) * 2


@pytest.mark.parametrize("output, expected", [
    ("t.{rank}.json", "t.1.json"),
    ("r{rank}/t.json", "r1/t.json"),
    ("t.{pid}.pftrace", "t.{pid}.rank1.pftrace"),  # .rankN unless {rank}
])
def test_run_output_placeholders(tmp_path, output, expected):
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "r1").mkdir()
    proc = start(tmp_path, env_for(1, 2), "-c", "import os, sys; print(os.getpid(), flush=True); "
                 "from frametrace.cli import main; sys.argv[0] = 'frametrace'; "
                 f"sys.exit(main(['run', '-o', {output!r}, 'prog.py']))")
    (stdout, stderr), = finish([proc])
    path = tmp_path / expected.replace("{pid}", stdout.split()[0])
    assert f"written to {path}" in stderr
    if expected.endswith(".pftrace"):
        data = path.read_bytes()
        assert b"rank 1" in data and b"python " not in data
    else:
        assert document(path)["distributedInfo"]["rank"] == 1


SESSION = '''\
import os, sys, frametrace

def work():
    return 1

with frametrace.profile(on_trace_ready=frametrace.trace_handler("out")) as prof:
    work()
trace = prof.last_trace
print(os.getpid(), trace.save("t.json"), trace.save("t.pftrace"), trace.save("u.{rank}.{pid}.json"))
'''


@pytest.mark.parametrize("rank, local", [(3, 1), (None, 2)], ids=["RANK", "LOCAL_RANK"])
def test_session_outputs_per_rank(tmp_path, rank, local):
    (tmp_path / "prog.py").write_text(SESSION)
    (stdout, _), = finish([start(tmp_path, env_for(rank, 4, local), "prog.py")])
    pid, *written = stdout.split()
    r = rank if rank is not None else local
    assert written == [f"t.rank{r}.json", f"t.rank{r}.pftrace", f"u.{r}.{pid}.json"]
    assert os.listdir(tmp_path / "out") == [f"frametrace.rank{r}.{pid}.0.json"]
    doc = document(tmp_path / "out" / f"frametrace.rank{r}.{pid}.0.json")
    assert doc["distributedInfo"]["rank"] == r
    # Laid out as torch.profiler lays it out: Holistic Trace Analysis finds
    # a file's rank by this text, on the first line that has it.
    for name in (f"out/frametrace.rank{r}.{pid}.0.json", f"t.rank{r}.json"):
        with open(tmp_path / name) as fh:
            found = [re.search(r'"rank":\s+(\d+)', line) for line in fh]
        assert [int(m.group(1)) for m in found if m][:1] == [r], name
    assert b"rank %d" % r in (tmp_path / f"t.rank{r}.pftrace").read_bytes()


def test_no_rank_no_change(tmp_path):
    (tmp_path / "prog.py").write_text(SESSION)
    (stdout, _), = finish([start(tmp_path, env_for(), "prog.py")])
    pid, *written = stdout.split()
    assert written == ["t.json", "t.pftrace", f"u.0.{pid}.json"]
    doc = document(tmp_path / "t.json")
    assert "distributedInfo" not in doc and "distributed" not in doc["otherData"]["frametrace"]["metadata"]
    assert [e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"] == [
        f"python {pid}"]
