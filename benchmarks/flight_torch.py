"""The always-on cost of a flight recorder on a torch training loop (issue
20, part 3): Python only (``frametrace.flight_recorder``) against torch's
ops too (``frametrace.torch.flight_recorder``, torch.profiler running in
cycles beside it), and torch.profiler's rolling cycles alone.

    python benchmarks/flight_torch.py                 # 7 rounds, about a minute
    python benchmarks/flight_torch.py --rounds 9 --steps 100 --cycle 10

Configurations, in one process, interleaved: each round runs every
configuration once (the order rotated each round) for STEPS steps of the
loop, from a recorder's (or profiler's) enter to its exit:

- untraced: the loop alone;
- flight: ``frametrace.flight_recorder`` (Python only: the default);
- flight+torch: ``frametrace.torch.flight_recorder(cycle_steps=CYCLE)``;
- torch_cycles: torch.profiler(with_stack=False) alone on the same rolling
  schedule (what flight+torch adds torch's ops with).

No step is slow and no dump is taken.  "step" is the mean time of a step
including its ``frametrace.step()`` (so a cycle's turnover is spread over
its steps), on the training thread's CPU clock (steady on a shared
machine) and the wall clock; "turnover" the mean ``step()`` that ends a
torch cycle (kineto's stop and the next cycle's start, on the training
thread; CPU and wall); "1st/other step" a cycle's first step's own work
(its step() call left out) against the others' (kineto's new session makes
the first slower).  The loop: an MLP (256-W-W-10, batch 64; --width W, default 64)
on batches made ahead, SGD, on the CPU, one intra-op thread.  A report,
nothing asserted.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings

CONFIGS = ["untraced", "flight", "flight+torch", "torch_cycles"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=60, help="steps per configuration a round")
    ap.add_argument("--cycle", type=int, default=10, help="torch.profiler's steps per cycle")
    ap.add_argument("--width", type=int, default=64)
    args = ap.parse_args()

    import torch
    import torch.profiler as tp

    import frametrace
    import frametrace.torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    w = args.width
    model = torch.nn.Sequential(torch.nn.Linear(256, w), torch.nn.ReLU(), torch.nn.Linear(w, w),
                                torch.nn.ReLU(), torch.nn.Linear(w, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(64, 256), torch.randint(0, 10, (64,))) for _ in range(16)]
    k = args.cycle

    def schedule(step: int) -> tp.ProfilerAction:
        return tp.ProfilerAction.RECORD_AND_SAVE if step % k == k - 1 \
            else tp.ProfilerAction.RECORD

    def loop(stepper) -> dict:
        out: dict = {"cpu": [], "wall": [], "turn_cpu": [], "turn_wall": [], "first_cpu": [],
                     "rest_cpu": []}
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        for i in range(args.steps):
            x, y = batches[i % len(batches)]
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            before, wbefore = time.thread_time_ns(), time.perf_counter_ns()
            stepper()
            c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
            out["cpu"].append(c1 - c0)
            out["wall"].append(w1 - w0)
            if i % k == k - 1:
                out["turn_cpu"].append(c1 - before)
                out["turn_wall"].append(w1 - wbefore)
            elif i:  # the step's own work, without its step() call
                out["first_cpu" if i % k == 0 else "rest_cpu"].append(before - c0)
            c0, w0 = c1, w1
        return out

    def run(config: str, dump_dir: str) -> dict:
        options = dict(watchdog=False, signal=None, slow_factor=None, slow_ms=1e9)
        if config == "untraced":
            return loop(lambda: None)
        if config == "flight":
            with frametrace.flight_recorder(dump_dir, **options):
                return loop(frametrace.step)
        if config == "flight+torch":
            with frametrace.torch.flight_recorder(dump_dir, cycle_steps=k, **options):
                return loop(frametrace.step)
        prof = tp.profile(activities=[tp.ProfilerActivity.CPU], schedule=schedule,
                          with_stack=False, on_trace_ready=lambda p: None)
        with prof:
            return loop(prof.step)

    keys = ("cpu", "wall", "turn_cpu", "turn_wall", "first_cpu", "rest_cpu")
    per: dict = {c: {key: [] for key in keys} for c in CONFIGS}
    warnings.filterwarnings("ignore", message="Warning: Profiler clears events")
    with tempfile.TemporaryDirectory() as d:
        for config in CONFIGS:  # warm-up round, not counted
            run(config, d)
        for r in range(args.rounds):
            for config in CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]:
                out = run(config, d)
                for key in keys:
                    per[config][key].append(statistics.mean(out[key]))
    print(f"CPython {sys.version.split()[0]}, torch {torch.__version__}, {args.rounds} rounds of "
          f"{args.steps} steps, cycles of {k} steps, width {w}; medians of the rounds' means")
    base = {c: statistics.median(per["untraced"][c]) for c in ("cpu", "wall")}
    print(f"{'configuration':14} {'step ms cpu':>11} {'x':>6} {'+ms':>6} {'step ms wall':>12} "
          f"{'x':>6} {'turnover ms cpu':>15} {'wall':>6} {'1st/other step ms cpu':>21}")
    for config in CONFIGS:
        m = {key: statistics.median(per[config][key]) / 1e6 for key in keys}
        print(f"{config:14} {m['cpu']:11.3f} {m['cpu'] * 1e6 / base['cpu']:6.2f} "
              f"{m['cpu'] - base['cpu'] / 1e6:6.3f} {m['wall']:12.3f} "
              f"{m['wall'] * 1e6 / base['wall']:6.2f} {m['turn_cpu']:15.2f} {m['turn_wall']:6.2f} "
              f"{m['first_cpu']:10.3f}/{m['rest_cpu']:.3f}")


if __name__ == "__main__":
    main()
