"""frametrace.torch against torch.profiler(with_stack=True) on the same
training loop (issue 19): per-step overhead (ratio to the untraced loop),
window close (the prof.step() that ends the window, on the training
thread), the file each writes and its size.

    python benchmarks/torch_compare.py            # 5 repetitions, about 2 minutes
    python benchmarks/torch_compare.py --reps 9 --steps 8

Configurations, each run in a child process of its own (--child), in
turn, the order rotated each repetition:

- untraced: the loop alone;
- torch_ops: torch.profiler(with_stack=False) alone (what frametrace.torch
  adds torch's ops with);
- frametrace.torch, and frametrace.torch with module_names=model;
- torch_stack: torch.profiler(with_stack=True) (Python frames from torch's
  own tracer), its trace exported in on_trace_ready as torch users do.

The loop: an MLP (256-W-W-10, batch 64; --width W, default 64) fed by a
DataLoader, SGD, on the CPU, one intra-op thread; one window: schedule(wait=1, warmup=1, active=STEPS, repeat=1).
"step" is the mean time of the window's active steps but its last
(whose step() closes it), on the training thread's CPU clock (steady on a
shared machine) and on the wall clock; "close" that last step() call's;
"write" the handler's time writing the file (frametrace: on its writer
thread, beside the loop; torch: inside step(), on the training thread);
"size" the file.  A report, nothing asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CONFIGS = ["untraced", "torch_ops", "frametrace.torch", "frametrace.torch+modules", "torch_stack"]


def mlp(torch, width: int):
    """The loop's model: 256-width-width-10 (benchmarks/flight.py's too)."""
    return torch.nn.Sequential(torch.nn.Linear(256, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 10))


def child(config: str, steps: int, out_dir: str, width: int) -> dict:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import frametrace
    import frametrace.torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = mlp(torch, width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total = steps + 6
    data = TensorDataset(torch.randn(total * 64, 256), torch.randint(0, 10, (total * 64,)))
    loader = DataLoader(data, batch_size=64)
    # Warm-up, untraced: the first steps allocate.
    for x, y in list(loader)[:3]:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    result: dict = {"config": config}
    written: dict = {}

    def ft_handler(trace):
        t0 = time.perf_counter_ns()
        path = os.path.join(out_dir, f"{config}.json")
        trace.save(path)
        written["json"] = os.path.getsize(path)
        trace.save(path[:-5] + ".pftrace")
        written["pftrace"] = os.path.getsize(path[:-5] + ".pftrace")
        written["write_ms"] = (time.perf_counter_ns() - t0) / 1e6
        written["events"] = len(trace.events)
        written["ops"] = sum(len(v) for v in trace.slices.values()) + sum(
            len(v) for _n, v in trace.slice_tracks)
        written["ranges"] = len(trace.ranges)

    def torch_handler(prof):
        t0 = time.perf_counter_ns()
        path = os.path.join(out_dir, f"{config}.json")
        prof.export_chrome_trace(path)
        written["json"] = os.path.getsize(path)
        written["write_ms"] = (time.perf_counter_ns() - t0) / 1e6

    sched_args = dict(wait=1, warmup=1, active=steps, repeat=1)
    if config == "untraced":
        class _Nothing:
            def step(self):
                pass
        prof_cm = None
        prof = _Nothing()
    elif config.startswith("frametrace.torch"):
        prof_cm = frametrace.torch.profile(
            schedule=frametrace.schedule(**sched_args), on_trace_ready=ft_handler,
            module_names=model if config.endswith("+modules") else None)
    else:
        from torch.profiler import ProfilerActivity, profile, schedule
        prof_cm = profile(activities=[ProfilerActivity.CPU], schedule=schedule(**sched_args),
                          with_stack=config == "torch_stack",
                          on_trace_ready=torch_handler if config == "torch_stack" else None)
    times: dict = {"wall": [], "cpu": []}
    step_calls: dict = {"wall": [], "cpu": []}
    clocks = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}
    t_start = time.perf_counter_ns()
    if prof_cm is not None:
        prof = prof_cm.__enter__()
    last = {k: c() for k, c in clocks.items()}
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        before = {k: c() for k, c in clocks.items()}
        prof.step()
        now = {k: c() for k, c in clocks.items()}
        for k in clocks:
            times[k].append(now[k] - last[k])
            step_calls[k].append(now[k] - before[k])
        last = now
    if prof_cm is not None:
        prof_cm.__exit__(None, None, None)
    result["total_ms"] = (time.perf_counter_ns() - t_start) / 1e6
    # Steps 0 (wait) and 1 (warmup), then the active ones: 2 .. steps+1;
    # the last active step's step() closes the window.
    for k in clocks:
        result[f"step_{k}_ms"] = statistics.mean(times[k][2:2 + steps - 1]) / 1e6
        result[f"close_{k}_ms"] = step_calls[k][2 + steps - 1] / 1e6
    result.update(written)
    return result


def hooks_cost(width: int, calls: int = 3000) -> dict:
    """module_names' own cost: forward calls of the model (5 modules and
    the Sequential) with and without frametrace.torch's module hooks, in a
    session recording ranges only (python_steps=0: no tracer), the two
    interleaved in rounds; thread CPU time per forward."""
    import torch

    import frametrace
    from frametrace.torch import _ModuleNames

    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, width), torch.nn.ReLU(),
                                torch.nn.Linear(width, 10))
    x = torch.randn(64, 256)
    per: dict = {"plain": [], "hooks": []}
    with torch.no_grad(), frametrace.profile(python_steps=0):
        for _ in range(7):
            for kind in ("plain", "hooks"):
                names = _ModuleNames(model) if kind == "hooks" else None
                if names is not None:
                    names.install()
                t0 = time.thread_time_ns()
                for _ in range(calls):
                    model(x)
                per[kind].append((time.thread_time_ns() - t0) / calls)
                if names is not None:
                    names.remove()
                frametrace.step()  # the session folds the ranges of the round
    plain, hooked = statistics.median(per["plain"]), statistics.median(per["hooks"])
    return {"plain_us": plain / 1e3, "hooks_us": hooked / 1e3,
            "per_module_call_us": (hooked - plain) / 6 / 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10, help="active steps in the window")
    ap.add_argument("--width", type=int, default=64,
                    help="hidden width of the MLP: 64, the steps are mostly torch's dispatch "
                         "and Python (where tracing costs show); 512, mostly matmuls")
    ap.add_argument("--child")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.child == "hooks":
        print(json.dumps(hooks_cost(args.width)))
        return
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.out, args.width)))
        return
    runs: dict = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory() as out:
        for rep in range(args.reps):
            order = CONFIGS[rep % len(CONFIGS):] + CONFIGS[:rep % len(CONFIGS)]
            for config in order:
                proc = subprocess.run([sys.executable, __file__, "--child", config, "--steps",
                                       str(args.steps), "--out", out, "--width", str(args.width)],
                                      capture_output=True, text=True, timeout=900)
                if proc.returncode != 0:
                    sys.exit(f"{config} failed:\n{proc.stderr}")
                runs[config].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"CPython {sys.version.split()[0]}, torch {__import__('torch').__version__}, "
          f"{args.reps} repetitions, {args.steps} active steps, width {args.width}; medians")
    fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
    for clock, what in (("cpu", "the training thread's CPU time (steady on a shared machine)"),
                        ("wall", "wall time")):
        base = statistics.median(r[f"step_{clock}_ms"] for r in runs["untraced"])
        print(f"\n{what}:")
        print(f"{'configuration':26} {'step ms':>8} {'x untraced':>10} {'close ms':>9} "
              f"{'write ms':>9} {'json KB':>8} {'pftrace KB':>10}")
        for config in CONFIGS:
            rs = runs[config]

            def med(key):
                vals = [r[key] for r in rs if key in r]
                return statistics.median(vals) if vals else None

            step = med(f"step_{clock}_ms")
            json_kb = med("json") / 1024 if med("json") else None
            pf_kb = med("pftrace") / 1024 if med("pftrace") else None
            print(f"{config:26} {step:8.2f} {step / base:10.2f} "
                  f"{fmt(med(f'close_{clock}_ms'), '9.1f')} {fmt(med('write_ms'), '9.1f')} "
                  f"{fmt(json_kb, '8.0f')} {fmt(pf_kb, '10.0f')}")
    for config in ("frametrace.torch", "frametrace.torch+modules"):
        r = runs[config][-1]
        print(f"{config}: {r.get('events')} Python/C events, {r.get('ops')} torch ops and "
              f"annotations, {r.get('ranges')} ranges in the window")
    proc = subprocess.run([sys.executable, __file__, "--child", "hooks", "--width",
                           str(args.width)], capture_output=True, text=True, timeout=900,
                          check=True)
    h = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"module_names' hooks (no tracer, ranges recorded; thread CPU, median of 7 rounds): "
          f"forward {h['plain_us']:.1f} us -> {h['hooks_us']:.1f} us, "
          f"{h['per_module_call_us']:.2f} us per module call")


if __name__ == "__main__":
    main()
