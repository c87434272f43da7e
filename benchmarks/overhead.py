"""Added cost per profile event of frametrace, against the references that
bound it from below, in one process: many short rounds, each running every
configuration once, back to back.

    python benchmarks/overhead.py [--rounds 40] [--workloads fib,builtins]

The references (csrc/testing/floors.c, in the private frametrace._testing):

- floor: a C profile function that does nothing (PyEval_SetProfile), what
  any tracer on that hook pays;
- floor+clock: the same, reading the tracer's tick counter and storing one
  8-byte word per event into a ring of the default size (1M words), the
  least a ring-buffer tracer does per event;
- mon-floor, mon-floor+clock (3.12+): the same two as sys.monitoring
  callbacks on the events of frametrace's monitoring backend.

and cProfile, and frametrace with each backend this Python has (default
ring: 1M events a thread, wrapping).

Why rounds: this shared VM's speed drifts by tens of percent within
seconds, which swamps a 10% difference between runs minutes apart.  A round
runs each configuration once on a workload of 10-60 ms, in an order rotated
from round to round; a configuration's added cost is taken against the
same round's untraced run and its ratio against the same round's floor.
Medians over the rounds, with the interquartile range of the ratios.
Hooks are installed and the rings allocated before the timed call and
removed after it: what is timed is the cost per event.  A report, never a
test: nothing is asserted.  Do not run it beside another benchmark.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import os
import platform
import statistics
import time
from functools import partial

import frametrace
from frametrace import _testing
from workloads import BY_NAME, count_callbacks, markdown_table as table

clock_ns = time.perf_counter_ns
HAVE_MONITORING = hasattr(_testing, "set_noop_monitoring")
# Each round's call: 10-60 ms untraced, 0.2-0.8M profile events.
SIZES = {"fib": 24, "methods": 30_000, "builtins": 50_000, "generators": 150_000,
         "mixed": 1_600}
DEFAULT_WORKLOADS = tuple(SIZES)


# ---- configurations: each runs fn(arg) once and returns the ns it took ------


def run_untraced(fn, arg):
    t0 = clock_ns()
    fn(arg)
    return clock_ns() - t0


def run_reference(install):
    """A reference hook: install(True) before the timed call, install(False)
    after."""
    def run(fn, arg):
        install(True)
        t0 = clock_ns()
        fn(arg)
        t1 = clock_ns()
        install(False)
        return t1 - t0
    return run


def run_cprofile(fn, arg):
    prof = cProfile.Profile()
    prof.enable()
    t0 = clock_ns()
    fn(arg)
    t1 = clock_ns()
    prof.disable()
    return t1 - t0


def run_frametrace(backend, **options):
    def run(fn, arg):
        tracer = frametrace.Tracer(backend=backend, **options)
        tracer.start()
        len(())  # this thread's first event: its ring is allocated here
        t0 = clock_ns()
        fn(arg)
        t1 = clock_ns()
        tracer.stop()
        tracer.clear()
        return t1 - t0
    return run


def configurations():
    """(name, run, its clock reference or None), untraced and floor first."""
    configs = [
        ("untraced", run_untraced, None),
        ("floor", run_reference(_testing.set_noop_profile), None),
        ("floor+clock", run_reference(partial(_testing.set_noop_profile, clock=True)), None),
    ]
    if HAVE_MONITORING:
        configs += [
            ("mon-floor", run_reference(_testing.set_noop_monitoring), None),
            ("mon-floor+clock", run_reference(partial(_testing.set_noop_monitoring, clock=True)),
             None),
        ]
    configs.append(("cProfile", run_cprofile, None))
    configs.append(("frametrace setprofile", run_frametrace("setprofile"),
                    "floor+clock"))
    if HAVE_MONITORING:
        configs.append(("frametrace monitoring", run_frametrace("monitoring"),
                        "mon-floor+clock"))
    return configs


# ---- measuring ---------------------------------------------------------------


def measure(fn, arg, rounds, configs):
    """{config: [ns of each round]}."""
    times = {name: [] for name, _, _ in configs}
    for _, run, _ in configs:  # warm-up: specialization, caches, allocator
        run(fn, arg)
    for r in range(rounds):
        k = r % len(configs)
        for name, run, _ in configs[k:] + configs[:k]:
            gc.collect()  # the previous run's garbage is not this one's cost
            times[name].append(run(fn, arg))
    return times


def quartiles(values):
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def summarize(times, events, configs):
    """Per config: median added ns/event, the median and IQR of its per-round
    ratio to the floor, and for frametrace the median per-round ns above its
    clock reference."""
    base = times["untraced"]
    added = {name: [(t - b) / events for t, b in zip(times[name], base)]
             for name in times}
    out = {}
    for name, _, reference in configs:
        if name == "untraced":
            continue
        ratios = [a / f for a, f in zip(added[name], added["floor"]) if f > 0]
        # Noise only ever adds time: the fastest runs are a check on the medians.
        fastest = (min(times[name]) - min(base)) / events
        fastest_floor = (min(times["floor"]) - min(base)) / events
        row = {
            "added": statistics.median(added[name]),
            "ratio": statistics.median(ratios) if ratios else float("nan"),
            "iqr": quartiles(ratios) if ratios else (float("nan"),) * 2,
            "fastest_ratio": fastest / fastest_floor if fastest_floor > 0 else float("nan"),
        }
        if reference:
            row["above_ref"] = statistics.median(
                a - r for a, r in zip(added[name], added[reference]))
            row["reference"] = reference
        out[name] = row
    return out


# ---- report ------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30,
                        help="rounds per workload (default 30)")
    parser.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                        help="comma-separated, of: " + ", ".join(DEFAULT_WORKLOADS))
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    names = [w for w in args.workloads.split(",") if w]
    bad = [w for w in names if w not in DEFAULT_WORKLOADS]
    if bad or not names:
        parser.error(f"unknown workload(s) {bad}; choose from {', '.join(DEFAULT_WORKLOADS)}")

    began = time.perf_counter()
    configs = configurations()
    rows, summary_rows = [], []
    for wname in names:
        work = BY_NAME[wname]
        arg = SIZES[wname]
        events = count_callbacks(work.fn, arg)
        stats = summarize(measure(work.fn, arg, args.rounds, configs), events, configs)
        for cname, row in stats.items():
            lo, hi = row["iqr"]
            rows.append([wname, cname, f"{events:,}", f"{row['added']:.1f}",
                         f"{row['ratio']:.2f}x", f"{lo:.2f}-{hi:.2f}", f"{row['fastest_ratio']:.2f}x",
                         f"{row['above_ref']:+.1f} ({row['reference']})" if "above_ref" in row else ""])
        for backend in ("setprofile", "monitoring"):
            ft = stats.get(f"frametrace {backend}")
            if ft is None:
                continue
            ref = stats[ft["reference"]]
            summary_rows.append([
                wname, backend, f"{stats['floor']['added']:.1f}",
                f"{ft['added']:.1f}", f"{ft['ratio']:.2f}x",
                f"{ref['ratio']:.2f}x ({ft['reference']})",
                f"{ft['above_ref']:+.1f}", f"{ft['added'] / stats['cProfile']['added']:.2f}x"
                if stats["cProfile"]["added"] > 0 else "n/a",
            ])

    print(f"## Added cost per profile event: CPython {platform.python_version()} "
          f"({platform.machine()}, {os.cpu_count()} CPUs)")
    print()
    print(f"`python benchmarks/overhead.py --rounds {args.rounds}"
          + (f" --workloads {args.workloads}" if args.workloads != ",".join(DEFAULT_WORKLOADS) else "")
          + f"`: frametrace {frametrace.__version__} ({os.path.dirname(frametrace.__file__)}); "
          f"{args.rounds} rounds per workload, each configuration once per round, "
          "order rotated; wall time of one call of the workload (sizes: SIZES). "
          "'events' are profile callbacks counted with sys.setprofile; added = "
          "(run - same round's untraced) / events; x floor = median of the "
          "per-round ratios to the same round's floor, with their interquartile range; "
          "the fastest runs' ratio is (fastest - fastest untraced) over the same of the floor.")
    print()
    print(table(["workload", "config", "events", "added ns/event", "x floor",
                 "IQR", "x floor, fastest runs", "ns above its clock reference"], rows, left=2))
    print()
    print("### frametrace against the floor and its clock reference")
    print()
    print(table(["workload", "backend", "floor ns/event", "frametrace ns/event",
                 "x floor", "clock reference x floor", "ns above the reference",
                 "x cProfile's"], summary_rows, left=2))
    print()
    print(f"Total run time: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
