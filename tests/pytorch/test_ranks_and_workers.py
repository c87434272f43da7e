"""With real torch: a 2-rank DDP job on gloo under torchrun, traced by
frametrace run -o and by profile() with frametrace.trace_handler(), each rank its
own file named "rank N", merged with frametrace merge; a DataLoader with
two workers whose traces (profile(trace_children=True)) hold the
dataset's __getitem__ calls."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0)")

import frametrace  # noqa: E402

PACKAGE_ROOT = os.path.dirname(os.path.dirname(frametrace.__file__))

DDP = '''\
import sys
import torch, torch.distributed as dist, torch.nn as nn
import frametrace

def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()

def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    if len(sys.argv) > 1:
        with frametrace.profile(on_trace_ready=frametrace.trace_handler(sys.argv[1])) as prof:
            for _ in range(3):
                train_step(model, opt, x, y)
                prof.step()
    else:
        for _ in range(3):
            train_step(model, opt, x, y)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
'''


def env():
    e = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, PYTHONFAULTHANDLER="1")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        e.pop(name, None)
    return e


def torchrun(tmp_path, *args):
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", *args], cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def check_merged(tmp_path, files):
    proc = subprocess.run([sys.executable, "-m", "frametrace", "merge", *files, "-o", "all.json"],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    trace = frametrace.load(str(tmp_path / "all.json"))
    assert sorted(p["process_name"] for p in trace.processes) == ["rank 0", "rank 1"]
    infos = sorted((p["metadata"]["distributed"] for p in trace.processes), key=lambda d: d["rank"])
    assert [(d["rank"], d["world_size"], d["local_rank"]) for d in infos] == [(0, 2, 0), (1, 2, 1)]
    names = [e.name for e in trace.events]
    assert names.count("train_step") == 6  # 3 steps on each rank
    return trace, infos


def test_ddp_under_torchrun_with_frametrace_run(tmp_path):
    (tmp_path / "ddp.py").write_text(DDP)
    torchrun(tmp_path, "-m", "frametrace", "run", "-o", "trace.json", "ddp.py")
    # Before: both ranks wrote trace.json, one over the other.
    files = ["trace.rank0.json", "trace.rank1.json"]
    assert sorted(f for f in os.listdir(tmp_path) if f.startswith("trace")) == files
    for rank, name in enumerate(files):
        with open(tmp_path / name) as fh:
            doc = json.load(fh)
        # Written after destroy_process_group(), with nothing of frametrace's
        # run while torch.distributed was initialised: torchrun's
        # environment gives the rank, the backend is not known.
        assert doc["distributedInfo"] == {"backend": None, "rank": rank, "world_size": 2,
                                          "local_rank": rank, "local_world_size": 2}
    check_merged(tmp_path, files)


def test_ddp_under_torchrun_with_profile_and_save(tmp_path):
    (tmp_path / "ddp.py").write_text(DDP)
    torchrun(tmp_path, "ddp.py", "out")
    files = sorted(os.listdir(tmp_path / "out"))
    assert [f.split(".")[1] for f in files] == ["rank0", "rank1"]
    _, infos = check_merged(tmp_path, [os.path.join("out", f) for f in files])
    assert [d["backend"] for d in infos] == ["gloo", "gloo"]


LOADER = '''\
import os, sys, json
import torch
from torch.utils.data import DataLoader, Dataset
import frametrace

class Squares(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.tensor([float(i * i)])

if __name__ == "__main__":
    if len(sys.argv) > 2:
        torch.multiprocessing.set_start_method(sys.argv[2])
    total = 0.0
    with frametrace.profile(on_trace_ready=frametrace.trace_handler(sys.argv[1]), trace_children=True) as prof:
        loader = DataLoader(Squares(), batch_size=4, num_workers=2)
        for batch in loader:
            total += float(batch.sum())
            prof.step()
        pids = sorted(w.pid for w in loader._iterator._workers) if loader._iterator else []
    print(json.dumps({"parent": os.getpid(), "total": total}))
'''


@pytest.mark.parametrize("method", [None, "spawn", "forkserver"], ids=["default", "spawn", "forkserver"])
def test_dataloader_workers_traced(tmp_path, method):
    (tmp_path / "loader.py").write_text(LOADER)
    proc = subprocess.run([sys.executable, "loader.py", "out", *([method] if method else [])],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["total"] == sum(i * i for i in range(16))
    files = sorted(os.listdir(tmp_path / "out"))
    parent = f"frametrace.{report['parent']}.0.json"
    assert parent in files and len(files) == 3, files
    calls = 0
    for name in files:
        trace = frametrace.load(str(tmp_path / "out" / name))
        got = [e for e in trace.events if e.name == "Squares.__getitem__"]
        if name == parent:
            assert got == []
            continue
        with open(tmp_path / "out" / name) as fh:
            assert json.load(fh)["otherData"]["frametrace"]["metadata"]["parent_pid"] == report["parent"]
        assert got, f"{name}: no __getitem__"
        calls += len(got)
    assert calls == 16  # each index fetched once, by one worker or the other
    proc = subprocess.run([sys.executable, "-m", "frametrace", "merge",
                           *[os.path.join("out", f) for f in files], "-o", "all.json"],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    merged = frametrace.load(str(tmp_path / "all.json"))
    by_pid = {p["pid"]: p for p in merged.processes}
    main = by_pid[report["parent"]]
    for pid, p in by_pid.items():
        if pid != report["parent"]:
            assert main["tracer_start_ns"] < p["tracer_start_ns"] < main["tracer_stop_ns"]


DDP_LOADER = '''\
import torch, torch.distributed as dist, torch.nn as nn
from torch.utils.data import DataLoader, Dataset

class Pairs(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((4,), float(i)), torch.tensor([float(i)])

def main():
    dist.init_process_group("gloo")
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(Pairs(), batch_size=4, num_workers=1):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
'''


def test_ddp_with_dataloader_workers_under_run_follow_children(tmp_path):
    """torchrun, frametrace run --follow-children: each rank's trace and its
    DataLoader worker's, four files, merged: "rank 0", "rank 1" and their
    workers, "rank N DataLoader worker 0 of PARENT"."""
    (tmp_path / "ddp.py").write_text(DDP_LOADER)
    torchrun(tmp_path, "-m", "frametrace", "run", "--follow-children", "-o", "trace.json", "ddp.py")
    files = sorted(f for f in os.listdir(tmp_path) if f.startswith("trace"))
    ranks = [f for f in files if f.count(".") == 2]
    workers = [f.split(".") for f in files if f.count(".") == 3]
    assert ranks == ["trace.rank0.json", "trace.rank1.json"], files
    assert [(w[0], w[1], w[2].isdigit(), w[3]) for w in workers] == [
        ("trace", "rank0", True, "json"), ("trace", "rank1", True, "json")], files
    proc = subprocess.run([sys.executable, "-m", "frametrace", "merge", *files, "-o", "all.json"],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    trace = frametrace.load(str(tmp_path / "all.json"))
    names = {p["process_name"] for p in trace.processes}
    assert {"rank 0", "rank 1"} < names
    children = sorted(names - {"rank 0", "rank 1"})
    # Named as torch calls its workers, after their rank.
    assert [n.split(" DataLoader worker 0 of ")[0] for n in children] == ["rank 0", "rank 1"], names
    rank_pid = {p["process_name"]: p["pid"] for p in trace.processes}
    for p in trace.processes:
        if p["process_name"] in children:  # a worker: its rank's child
            rank, parent = p["process_name"].split(" DataLoader worker 0 of ")
            assert p["metadata"]["parent_pid"] == rank_pid[rank] == int(parent)
    getitems = [e for e in trace.events if e.name == "Pairs.__getitem__"]
    assert len(getitems) == 16  # 8 items on each rank, all in the workers


NO_ENV = '''\
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp
import frametrace

def work(rank, store, out):
    assert "RANK" not in os.environ
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    t = torch.ones(2) * (rank + 1)
    with frametrace.profile(on_trace_ready=frametrace.trace_handler(out)):
        dist.all_reduce(t)
    assert t.tolist() == [3.0, 3.0]
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(work, args=(sys.argv[1], sys.argv[2]), nprocs=2)
'''


def test_rank_from_torch_distributed_without_environment(tmp_path):
    """No RANK in the environment: the rank and backend come from the
    initialised torch.distributed, read as the window closes."""
    (tmp_path / "prog.py").write_text(NO_ENV)
    proc = subprocess.run([sys.executable, "prog.py", str(tmp_path / "store"), "out"],
                          cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    files = sorted(os.listdir(tmp_path / "out"))
    assert [f.split(".")[1] for f in files] == ["rank0", "rank1"]
    for rank, name in enumerate(files):
        with open(tmp_path / "out" / name) as fh:
            doc = json.load(fh)
        assert doc["distributedInfo"] == {"backend": "gloo", "rank": rank, "world_size": 2,
                                          "local_rank": None, "local_world_size": None,
                                          "pg_count": 1}
        assert frametrace.load(str(tmp_path / "out" / name)).distributed == doc["distributedInfo"]
