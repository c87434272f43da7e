"""False slow-step dumps of a flight recorder on a busy machine: N steps of
about 0.3 ms, nothing slow in them, while hog processes keep every core
busy (one each, ``while True: pass``); every dump the recorder takes is a
false one.

    python benchmarks/flight_noise.py                      # 100,000 steps, a few minutes
    python benchmarks/flight_noise.py --steps 20000 --margin 0
    python benchmarks/flight_noise.py --torch              # frametrace.torch.flight_recorder

The recorder runs with its defaults (the slow-step bound, the watchdog's
hang bound) but ``min_interval=0`` and no ``max_dumps`` limit, so each step
that crosses a bound is counted, not only one a minute; ``--margin MS``
sets ``slow_margin_ms`` (0: the statistic without its floor).  A step is
Python work (``--torch``: a training step of an MLP 32-16-4, batch 16, on
one intra-op thread, under the torch recorder).  Printed: the dumps by
reason, and the steps' own durations (between two ``step()`` calls, read
beside the recorder): median, the 99th and 99.99th percentiles, the
longest, and how many exceeded the median by 5, 20, 50 and 100 ms (what
the margin is measured against).  A report, nothing asserted; the hogs
make it a noise measurement, not a timing one.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import warnings


def _hog() -> None:
    while True:
        pass


def _python_step(n: int) -> int:
    def leaf(i: int) -> int:
        return i * 2

    total = 0
    for i in range(n):
        total += leaf(i)
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--step-ms", type=float, default=0.3,
                    help="a Python step's work, traced, on an idle core")
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2,
                    help="busy processes beside it (default: one a core)")
    ap.add_argument("--margin", type=float, default=None, help="slow_margin_ms (default: its own)")
    ap.add_argument("--torch", action="store_true", help="the torch recorder on an MLP step")
    ap.add_argument("--durations", metavar="FILE", help="write the steps' durations (ns) there")
    args = ap.parse_args()

    import frametrace

    if args.torch:
        import torch

        import frametrace.torch

        torch.manual_seed(0)
        torch.set_num_threads(1)
        model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))

        def step() -> None:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()

        make = frametrace.torch.flight_recorder
        what = "frametrace.torch.flight_recorder, an MLP step"
        warnings.filterwarnings("ignore", message="Warning: Profiler clears events")
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    else:
        n = 100
        tracer = frametrace.Tracer()
        tracer.start()
        try:
            while True:  # calibrated traced, before the hogs: the fastest of 20
                took = float("inf")
                for _ in range(20):
                    t0 = time.perf_counter()
                    _python_step(n)
                    took = min(took, (time.perf_counter() - t0) * 1e3)
                if took >= args.step_ms * 0.95 or n > 10**7:
                    break
                n = max(n + 1, int(n * args.step_ms / max(took, 1e-6)))
        finally:
            tracer.stop()
            tracer.clear()

        def step() -> None:
            _python_step(n)

        make = frametrace.flight_recorder
        what = f"frametrace.flight_recorder, a Python step ({n} calls)"
    for _ in range(50):  # torch's lazy set-up, outside the recorder
        step()

    options: dict = {"min_interval": 0, "max_dumps": 10**9, "signal": None}
    if args.margin is not None:
        options["slow_margin_ms"] = args.margin
    hogs = [multiprocessing.get_context("spawn").Process(target=_hog, daemon=True)
            for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    durations = []
    try:
        time.sleep(0.5)  # the hogs running
        with tempfile.TemporaryDirectory() as d:
            t0 = time.monotonic()
            with make(d, **options) as rec:
                last = time.perf_counter_ns()
                for _ in range(args.steps):
                    step()
                    now = time.perf_counter_ns()
                    durations.append(now - last)
                    rec.step()
                    last = time.perf_counter_ns()
            wall = time.monotonic() - t0
            dumps = [os.path.basename(p) for p in rec.dumps]
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join()
    if args.durations:
        with open(args.durations, "w") as f:
            f.write("".join(f"{d}\n" for d in durations))
    reasons: dict = {}
    for name in dumps:
        kind = "hung" if "-hung-step-" in name else "slow" if "-slow-step-" in name else "other"
        reasons[kind] = reasons.get(kind, 0) + 1
    ordered = sorted(durations)
    median = statistics.median(ordered)
    print(f"CPython {sys.version.split()[0]}, {what}; {args.steps} steps in {wall:.0f} s, "
          f"{args.hogs} hog process(es), {os.cpu_count()} cores; slow_margin_ms="
          f"{options.get('slow_margin_ms', 'default')}")
    print(f"dumps: {len(dumps)} ({', '.join(f'{k} {v}' for k, v in sorted(reasons.items())) or 'none'})"
          f"; errors: {len(rec.errors)}")
    for name in dumps[:10]:
        print("  ", name)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] / 1e6

    print(f"step ms: median {median / 1e6:.3f}, p99 {q(0.99):.3f}, p99.99 {q(0.9999):.3f}, "
          f"max {ordered[-1] / 1e6:.3f}")
    print("steps over the median by: " + ", ".join(
        f"{ms} ms: {sum(d - median > ms * 1e6 for d in durations)}" for ms in (5, 20, 50, 100, 200, 500)))


if __name__ == "__main__":
    main()
