"""Always-on cost of a flight recorder (issue 20): what a job pays per step
for tracing every step, per backend, in one process, in interleaved rounds
as benchmarks/overhead.py does; and the pauses it adds to the training
thread (a step's mark and sweep, a dump's snapshot).

    python benchmarks/flight.py [--rounds 20] [--steps 20] [--workloads fib,mixed,torch]

A "step" is one call of a workload sized like a training step (a few ms),
then frametrace.step().  Each round runs every configuration once, in an
order rotated from round to round: untraced (the same loop, step() with no
recorder), then frametrace.flight_recorder() with each backend this Python
has (defaults: 1M records a thread, watchdog and signal on; entered, and
warm-up steps run until its ring wrapped, before the timed steps).  Per
step: added ns per event = (traced - same round's untraced) / events per
step, and added % of the untraced step; medians over rounds, with the
interquartile range of the %.  "torch" (where torch is installed): the
training step of benchmarks/torch_compare.py (an MLP 256-64-64-10, batch 64,
SGD, one intra-op thread); "torch512": the same 256-512-512-10.  A report, nothing asserted; do not run it
beside another benchmark.

The pauses, measured on the recorder's own tracer after the rounds: a
step() (its mark), a sweep of the function table (release_functions(),
with the main thread's ring full: 1M records), and a dump's snapshot of the
last 3 steps (benchmarks/snapshot.py has the snapshot's figures in full).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import frametrace
from overhead import measure as measure_rounds, quartiles
from torch_compare import mlp
from workloads import BY_NAME, count_callbacks, markdown_table as table

clock_ns = time.perf_counter_ns
HAVE_MONITORING = sys.version_info >= (3, 12)
BACKENDS = ["setprofile"] + (["monitoring"] if HAVE_MONITORING else [])
# Each step's call: about 2-5 ms untraced here, like a small training step.
SIZES = {"fib": 20, "methods": 3_000, "builtins": 5_000, "generators": 15_000, "mixed": 30}
# torch: benchmarks/torch_compare.py's MLP (256-64-64-10, a 0.4 ms step
# here); torch512: the same 256-512-512-10 (the same ops and events, a
# step of about 2 ms, as the 2.3 ms training step).
TORCH_WIDTHS = {"torch": 64, "torch512": 512}
DEFAULT_WORKLOADS = ("fib", "methods", "mixed", "torch", "torch512")


def torch_step(width=64):
    """The step function, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = mlp(torch, width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def step(_):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    for _ in range(5):  # the first steps allocate
        step(None)
    return step


def run_untraced(fn, arg, steps):
    for _ in range(steps):  # warm-up, as the recorder's: after gc.collect() the
        fn(arg)             # first steps of a torch loop run some 10% slower
        frametrace.step()
    t0 = clock_ns()
    for _ in range(steps):
        fn(arg)
        frametrace.step()
    return (clock_ns() - t0) / steps


def run_recorder(backend, dump_dir):
    def run(fn, arg, steps):
        with frametrace.flight_recorder(dump_dir, backend=backend, max_dumps=0) as rec:
            ring = rec.tracer
            while ring.ring_bytes < 8 << 20 and ring.stats.dropped_records == 0:
                fn(arg)  # warm-up: the ring grown to its size, wrapping
                frametrace.step()
            t0 = clock_ns()
            for _ in range(steps):
                fn(arg)
                frametrace.step()
            t1 = clock_ns()
        return (t1 - t0) / steps
    return run


def measure(fn, arg, rounds, steps, configs):
    """{config: [ns a step, each round]}: overhead.py's interleaved rounds."""
    return measure_rounds(fn, arg, rounds, [
        (name, lambda f, a, run=run: run(f, a, steps), None) for name, run in configs])


def pauses(fn, arg, dump_dir, backend):
    """Medians in µs: step() (its mark), a sweep with a full ring, a
    snapshot of the last 3 steps; and the ring's bytes."""
    out = {}
    with frametrace.flight_recorder(dump_dir, backend=backend, max_dumps=0) as rec:
        tracer = rec.tracer
        while tracer.stats.dropped_records == 0:
            fn(arg)
            frametrace.step()
        marks, sweeps, snaps, taken = [], [], [], []
        for _ in range(20):
            fn(arg)
            t0 = clock_ns()
            taken.append(tracer.mark())
            marks.append(clock_ns() - t0)
            frametrace.step()
            t0 = clock_ns()
            tracer.release_functions()
            sweeps.append(clock_ns() - t0)
            t0 = clock_ns()
            snap = tracer.snapshot(since=taken[-3] if len(taken) >= 3 else taken[0])
            snaps.append(clock_ns() - t0)
            del snap
        out = {"mark": statistics.median(marks) / 1e3, "sweep": statistics.median(sweeps) / 1e3,
               "snapshot": statistics.median(snaps) / 1e3, "ring": tracer.ring_bytes}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per run (default 20)")
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                        help="comma-separated, of: " + ", ".join(list(SIZES) + list(TORCH_WIDTHS)))
    args = parser.parse_args(argv)
    names = [w for w in args.workloads.split(",") if w]
    bad = [w for w in names if w not in SIZES and w not in TORCH_WIDTHS]
    if bad or not names or args.rounds < 1 or args.steps < 1:
        parser.error(f"bad arguments (unknown workloads: {bad})")
    began = time.perf_counter()
    rows, pause_rows, skipped = [], [], []
    with tempfile.TemporaryDirectory() as dump_dir:
        configs = [("untraced", run_untraced)] + [
            (backend, run_recorder(backend, dump_dir)) for backend in BACKENDS]
        for wname in names:
            if wname in TORCH_WIDTHS:
                fn = torch_step(TORCH_WIDTHS[wname])
                if fn is None:
                    skipped.append(f"{wname} (torch not installed)")
                    continue
                arg = None
            else:
                fn, arg = BY_NAME[wname].fn, SIZES[wname]
            events = count_callbacks(fn, arg)
            times = measure(fn, arg, args.rounds, args.steps, configs)
            base = times["untraced"]
            for backend in BACKENDS:
                added = [(t - b) / events for t, b in zip(times[backend], base)]
                pct = [100 * (t - b) / b for t, b in zip(times[backend], base)]
                lo, hi = quartiles(pct)
                rows.append([wname, backend, f"{events:,}", f"{statistics.median(base) / 1e3:.0f}",
                             f"{statistics.median(added):.1f}",
                             f"{statistics.median(pct):+.1f}%", f"{lo:+.1f}% to {hi:+.1f}%"])
            if wname not in TORCH_WIDTHS:
                for backend in BACKENDS:
                    p = pauses(fn, arg, dump_dir, backend)
                    pause_rows.append([wname, backend, f"{p['ring'] / 2**20:.0f} MiB",
                                       f"{p['mark']:.1f}", f"{p['sweep']:.0f}",
                                       f"{p['snapshot']:.0f}"])
    print(f"## Always-on flight recorder: CPython {platform.python_version()} "
          f"({platform.machine()}, {os.cpu_count()} CPUs)")
    print()
    print(f"`python benchmarks/flight.py --rounds {args.rounds} --steps {args.steps} "
          f"--workloads {args.workloads}`: frametrace {frametrace.__version__}; each run "
          f"{args.steps} steps, one step = one call of the workload then frametrace.step(); "
          "medians over rounds of the per-step time.")
    print()
    print(table(["workload", "backend", "events/step", "untraced µs/step", "added ns/event",
                 "added per step", "IQR"], rows, left=2))
    if skipped:
        print()
        print("Not run: " + ", ".join(skipped))
    if pause_rows:
        print()
        print("### Pauses of the training thread (medians of 20, µs)")
        print()
        print(table(["workload", "backend", "main ring", "step() mark", "sweep (full ring)",
                     "snapshot of 3 steps"], pause_rows, left=2))
    print()
    print(f"Total run time: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
