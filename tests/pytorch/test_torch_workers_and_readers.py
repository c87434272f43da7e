"""With real torch: frametrace.torch.profile(trace_children=True) puts
torch's ops and the DataLoader workers' Python in one run, the workers
named as torch calls them; and its files are read by Holistic Trace
Analysis and TensorBoard's profiler plugin as torch.profiler's own files
are, side by side with files torch.profiler writes in the same job (2 gloo
ranks under torchrun)."""
import importlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import pytest
from torch_support import torch  # noqa: F401 - skips the module without torch

import frametrace
import frametrace.torch

PACKAGE_ROOT = os.path.dirname(os.path.dirname(frametrace.__file__))


def env():
    e = dict(os.environ, PYTHONPATH=PACKAGE_ROOT, PYTHONFAULTHANDLER="1")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        e.pop(name, None)
    return e


def reader(module, package):
    """An analysis tool the torch stage installs: skipped without it, failed
    under FRAMETRACE_TORCH_REQUIRED=1."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        why = f"{module} does not import ({exc}): pip install {package}"
        if os.environ.get("FRAMETRACE_TORCH_REQUIRED"):
            pytest.fail(f"required by the torch stage: {why}", pytrace=False)
        pytest.skip(why)


LOADER = '''\
import json, os, sys
import torch
from torch.utils.data import DataLoader, Dataset
import frametrace, frametrace.torch

class Squares(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.tensor([float(i * i)])

if __name__ == "__main__":
    torch.multiprocessing.set_start_method(sys.argv[2])
    model = torch.nn.Linear(1, 1)
    with frametrace.torch.profile(on_trace_ready=frametrace.trace_handler(sys.argv[1]),
                                  trace_children=True) as prof:
        for batch in DataLoader(Squares(), batch_size=4, num_workers=2):
            model(batch).sum().backward()
            prof.step()
    print(json.dumps({"parent": os.getpid()}))
'''


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_torch_profile_traces_dataloader_workers(tmp_path, method):
    (tmp_path / "loader.py").write_text(LOADER)
    proc = subprocess.run([sys.executable, "loader.py", "out", method], cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    parent = json.loads(proc.stdout)["parent"]
    names, getitems, ops = {}, 0, {}
    for name in os.listdir(tmp_path / "out"):
        with open(tmp_path / "out" / name) as fh:
            doc = json.load(fh)
        events = doc["traceEvents"]
        pid = doc["otherData"]["frametrace"]["pid"]
        names[pid] = next(e["args"]["name"] for e in events if e["name"] == "process_name")
        ops[pid] = {e["name"] for e in events if e.get("cat") == "cpu_op"}
        n = sum(e["name"] == "Squares.__getitem__" for e in events)
        assert (n == 0) == (pid == parent), (name, n)
        getitems += n
    assert getitems == 16  # each index fetched once, by one worker or the other
    assert names.pop(parent) == f"python {parent}"
    assert sorted(names.values()) == [f"DataLoader worker {k} of {parent}" for k in (0, 1)]
    assert {"aten::linear", "aten::sum"} <= ops[parent]  # torch's ops, in the parent's file


def test_torch_profile_trace_children_needs_a_handler():
    with pytest.raises(ValueError, match="trace_children=True needs on_trace_ready"):
        frametrace.torch.profile(trace_children=True)
    with pytest.raises(TypeError, match="trace_children must be True or False"):
        frametrace.torch.profile(trace_children=1, on_trace_ready=print)


def test_tensorboard_trace_handler_names_files_as_torch(tmp_path):
    import socket

    model = torch.nn.Linear(4, 1)
    handlers = [frametrace.torch.tensorboard_trace_handler(tmp_path / "a"),
                frametrace.torch.tensorboard_trace_handler(str(tmp_path / "b"), worker_name="w0",
                                                            use_gzip=True)]
    for handler in handlers:
        with frametrace.torch.profile(on_trace_ready=handler):
            model(torch.ones(2, 4)).sum().backward()
    [a], [b] = os.listdir(tmp_path / "a"), os.listdir(tmp_path / "b")
    assert re.fullmatch(re.escape(f"{socket.gethostname()}_{os.getpid()}") + r"\.\d+\.pt\.trace\.json",
                        a), a
    assert re.fullmatch(r"w0\.\d+\.pt\.trace\.json\.gz", b), b
    assert frametrace.load(str(tmp_path / "b" / b)).events
    with pytest.raises(TypeError, match="worker_name must be a str"):
        frametrace.torch.tensorboard_trace_handler(tmp_path, worker_name=3)


DDP = '''\
import sys
import torch, torch.distributed as dist, torch.nn as nn, torch.profiler as tp
import frametrace, frametrace.torch

def train(model, opt, x, y, prof):
    for _ in range(6):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        prof.step()

def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 64), torch.randn(64, 1)
    with tp.profile(schedule=tp.schedule(wait=1, warmup=1, active=3),
                    on_trace_ready=tp.tensorboard_trace_handler("torch")) as prof:
        train(model, opt, x, y, prof)
    with frametrace.torch.profile(schedule=frametrace.schedule(wait=1, warmup=1, active=3),
                                  on_trace_ready=frametrace.torch.tensorboard_trace_handler(
                                      "frametrace")) as prof:
        train(model, opt, x, y, prof)
    dist.destroy_process_group()

if __name__ == "__main__":
    main()
'''


@pytest.fixture(scope="module")
def two_ranks():
    """One torchrun job of 2 gloo ranks: torch.profiler's files in torch/,
    then frametrace.torch's of the same loop in frametrace/."""
    with tempfile.TemporaryDirectory(prefix="frametrace-readers.") as d:
        with open(os.path.join(d, "ddp.py"), "w") as fh:
            fh.write(DDP)
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               "--nproc_per_node=2", "ddp.py"], cwd=d, env=env(),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        dirs = {k: os.path.join(d, k) for k in ("torch", "frametrace")}
        for k, path in dirs.items():
            assert len(os.listdir(path)) == 2, (k, os.listdir(path))
        yield dirs


def heads(directory):
    """{rank: (the file's text, its top-level members but traceEvents)}."""
    out = {}
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as fh:
            text = fh.read()
        doc = json.loads(text)
        del doc["traceEvents"]
        out[doc["distributedInfo"]["rank"]] = (text, doc)
    return out


def test_top_level_members_as_torch_writes_them(two_ranks):
    torch_heads, ours = heads(two_ranks["torch"]), heads(two_ranks["frametrace"])
    assert sorted(torch_heads) == sorted(ours) == [0, 1]
    for rank in (0, 1):
        (t_text, theirs), (o_text, mine) = torch_heads[rank], ours[rank]
        # traceName (the path torch wrote to) is torch's own; displayTimeUnit
        # is frametrace's "ns".
        assert set(theirs) - {"traceName"} <= set(mine), sorted(set(theirs) - set(mine))
        for key in ("schemaVersion", "deviceProperties", "host_name"):
            assert mine[key] == theirs[key], key
        for key in ("backend", "rank", "world_size", "pg_count"):
            assert mine["distributedInfo"][key] == theirs["distributedInfo"][key], key
        # As torch lays it out: Holistic Trace Analysis finds the rank by this text.
        assert f'"rank": {rank},' in t_text and f'"rank": {rank},' in o_text
        assert isinstance(mine["baseTimeNanoseconds"], int)


def analysis_outcome(call):
    """What an analysis gave: the exception's type, or the ranks of its
    result and whether all its numbers are finite."""
    try:
        result = call()
    except Exception as exc:  # noqa: BLE001 - compared with torch.profiler's files' outcome
        return ("raised", type(exc).__name__)
    df = result[0] if isinstance(result, tuple) else result
    ranks = sorted(int(r) for r in df["rank"].unique()) if "rank" in df.columns else None
    numbers = df.select_dtypes("number").to_numpy().ravel().tolist()
    return ("result", ranks, all(math.isfinite(v) for v in numbers))


def test_holistic_trace_analysis_reads_both_ranks(two_ranks):
    """HTA reads frametrace.torch's files as torch.profiler's: both ranks,
    the ProfilerStep iterations, the same torch ops per iteration, and its
    analyses give what they give on torch's files (on a CPU-only job its
    temporal and idle-time breakdowns and comm/comp overlap, which measure
    GPU kernels, have no kernels to measure)."""
    reader("hta", "HolisticTraceAnalysis")
    from hta.trace_analysis import TraceAnalysis

    got = {}
    for kind, directory in two_ranks.items():
        a = TraceAnalysis(trace_dir=directory)
        names = a.t.symbol_table.sym_table
        ops = {}
        for rank, df in a.t.traces.items():
            cpu = df[df["cat"].map(lambda i: names[i]) == "cpu_op"]
            ops[rank] = sorted(names[i] for i in cpu[cpu["iteration"] == 2]["name"])
        got[kind] = {
            "ranks": sorted(a.t.traces),
            "steps": [int(s) for s in a.get_profiler_steps()],
            "ops": ops,
            "temporal": analysis_outcome(lambda: a.get_temporal_breakdown(visualize=False)),
            "idle": analysis_outcome(lambda: a.get_idle_time_breakdown(visualize=False)),
            "overlap": analysis_outcome(lambda: a.get_comm_comp_overlap(visualize=False)),
        }
    ours = got["frametrace"]
    assert ours["ranks"] == [0, 1]
    assert ours["steps"] and ours["steps"] == got["torch"]["steps"]
    assert ours["ops"][0] and ours["ops"] == got["torch"]["ops"]
    for key in ("temporal", "idle", "overlap"):
        assert ours[key] == got["torch"][key], key
        if ours[key][0] == "result":
            assert ours[key][1] == [0, 1], key
    if torch.cuda.is_available():  # with GPU kernels: numbers for both ranks
        assert all(ours[k] == ("result", [0, 1], True) for k in ("temporal", "overlap")), ours


def test_tensorboard_profiler_reads_each_rank(two_ranks):
    """torch-tb-profiler parses each rank's file (as TensorBoard's plugin
    does, in its loader's worker) as it parses torch.profiler's: the same
    steps, views and operators, and the communication of each step."""
    reader("torch_tb_profiler", "torch-tb-profiler")
    from torch_tb_profiler import consts
    from torch_tb_profiler.profiler.data import RunProfileData
    from torch_tb_profiler.profiler.run_generator import RunGenerator

    got = {}
    for kind, directory in two_ranks.items():
        for name in sorted(os.listdir(directory)):
            match = consts.WORKER_PATTERN.match(name)
            assert match, name
            with tempfile.TemporaryDirectory() as cache:
                data = RunProfileData.parse(match.group(1), None, os.path.join(directory, name),
                                            cache)
                profile = RunGenerator(match.group(1), None, data).generate_run_profile()
            ops = sorted(row["name"] for row in profile.operation_table_by_name["data"])
            got.setdefault(kind, []).append((data.steps_names, data.has_communication,
                                             [v.display_name for v in profile.views], ops))
    assert got["frametrace"] == got["torch"]
    steps, comm, views, ops = got["frametrace"][0]
    assert steps and comm and "Overview" in views and "aten::addmm" in ops


def test_a_loaded_and_saved_file_keeps_torchs_members(two_ranks, tmp_path):
    """frametrace.load() of a rank's file and save() again: the same
    top-level members (schemaVersion, deviceProperties, distributedInfo,
    baseTimeNanoseconds, ...) but frametrace's own otherData, the rank laid
    out as torch lays it out."""
    directory = two_ranks["frametrace"]
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as fh:
            mine = json.load(fh)
        rank = mine["distributedInfo"]["rank"]
        path = frametrace.load(os.path.join(directory, name)).save(str(tmp_path / "again.json"))
        with open(path) as fh:
            text = fh.read()
        again = json.loads(text)
        for doc in (mine, again):
            del doc["traceEvents"], doc["otherData"]
        assert again == mine and "schemaVersion" in again and "baseTimeNanoseconds" in again
        assert f'"rank": {rank},' in text
