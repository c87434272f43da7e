"""Overhead of frametrace against no tracing, a do-nothing C profile function
(the floor for any PyEval_SetProfile tracer) and cProfile.

Run from the repository root, with frametrace installed in the interpreter:

    python benchmarks/overhead.py            # full run, about 1-2 minutes
    python benchmarks/overhead.py --quick    # smaller workloads, 3 reps
    python benchmarks/overhead.py --reps 9

It prints Markdown tables.  It is a report, not a test: nothing is asserted,
and odd results (dropped events, event counts that disagree) are printed as
notes.  Do not run it next to another benchmark: the timings share the CPUs.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import os
import platform
import resource
import statistics
import sys
import time

import frametrace
from frametrace import _tracer
from workloads import builtins_loop, count_callbacks, fib, markdown_table as table, methods, pipeline

perf_ns = time.perf_counter_ns

# ---- workloads (benchmarks/workloads.py) -------------------------------------
# Each takes roughly 0.2-0.5 s untraced on CPython 3.10-3.13 at full size.

# (name, function, full size, --quick size)
WORKLOADS = [
    ("fib", fib, 31, 28),
    ("methods", methods, 400_000, 100_000),
    ("builtins", builtins_loop, 500_000, 125_000),
    ("generators", pipeline, 2_000_000, 500_000),
]

# fib(28) makes 1,028,457 calls: the ~1M events of the getEvents() timing.
GET_EVENTS_FIB = 28

# ---- counting profile events -------------------------------------------------


def frametrace_callbacks(fn, arg):
    """The callbacks frametrace saw for fn(arg), from its events: 2 per
    event, less the entries/exits that happened outside the trace."""
    tracer = frametrace.Tracer(buffer_size=1 << 24, c_calls=True)
    tracer.start()
    fn(arg)
    tracer.stop()
    events = tracer.getEvents()
    dropped = tracer.dropped
    tracer.clear()
    return sum(2 - e.open_at_start - e.open_at_stop for e in events), dropped


# ---- configurations ----------------------------------------------------------
# Each returns (wall ns, minor page faults, events dropped).  Setup and
# teardown (creating a profiler, freeing its records) stay outside the timing;
# installing and removing the hook is inside, as a user would pay it.


def minflt():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run_untraced(fn, arg, _):
    f0 = minflt()
    t0 = perf_ns()
    fn(arg)
    t1 = perf_ns()
    return t1 - t0, minflt() - f0, 0


def run_noop(fn, arg, _):
    f0 = minflt()
    t0 = perf_ns()
    _tracer._set_noop_profile(True)
    fn(arg)
    _tracer._set_noop_profile(False)
    t1 = perf_ns()
    return t1 - t0, minflt() - f0, 0


def run_cprofile(fn, arg, _):
    prof = cProfile.Profile()
    f0 = minflt()
    t0 = perf_ns()
    prof.enable()
    fn(arg)
    prof.disable()
    t1 = perf_ns()
    faults = minflt() - f0
    del prof
    return t1 - t0, faults, 0


def run_frametrace(fn, arg, buffer_size):
    tracer = frametrace.Tracer(buffer_size=buffer_size, c_calls=True)
    f0 = minflt()
    t0 = perf_ns()
    tracer.start()
    fn(arg)
    tracer.stop()
    t1 = perf_ns()
    faults = minflt() - f0
    dropped = tracer.dropped
    tracer.clear()
    return t1 - t0, faults, dropped


CONFIGS = [
    ("untraced", run_untraced),
    ("noop C profile (floor)", run_noop),
    ("cProfile", run_cprofile),
    ("frametrace", run_frametrace),
]


def buffer_size_for(n_callbacks):
    # One record per callback; a power of two with headroom, at least 1<<24.
    size = 1 << 24
    while size < n_callbacks * 5 // 4:
        size <<= 1
    return min(size, frametrace.MAX_BUFFER_SIZE)


def measure_workload(fn, arg, reps, buffer_size):
    """{config: [(ns, faults, dropped), ...]}, configurations interleaved
    and their order rotated each repetition, so that drift (thermal, other
    processes) spreads over all of them."""
    results = {name: [] for name, _ in CONFIGS}
    for name, run in CONFIGS:  # warm-up: caches, specialization, allocator
        run(fn, arg, buffer_size)
    for rep in range(reps):
        k = rep % len(CONFIGS)
        for name, run in CONFIGS[k:] + CONFIGS[:k]:
            # A collection owed by the previous run's garbage must not land
            # in this one's timing.
            gc.collect()
            results[name].append(run(fn, arg, buffer_size))
    return results


def measure_get_events(reps):
    """[(seconds, events, gc_enabled)] for getEvents() on ~1M events."""
    out = []
    for rep in range(reps):
        for gc_on in (True, False):
            tracer = frametrace.Tracer(buffer_size=1 << 22, c_calls=True)
            tracer.start()
            fib(GET_EVENTS_FIB)
            tracer.stop()
            gc.collect()
            if not gc_on:
                gc.disable()
            t0 = perf_ns()
            events = tracer.getEvents()
            t1 = perf_ns()
            gc.enable()
            out.append(((t1 - t0) / 1e9, len(events), gc_on, tracer.dropped))
            del events
            tracer.clear()
    return out


# ---- report ------------------------------------------------------------------


def fmt_ratio(num, den):
    # An overhead at or below zero is noise: a ratio to it means nothing.
    if den <= 0:
        return "n/a"
    return f"{num / den:.2f}x"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=None,
                        help="timed repetitions per configuration "
                             "(default 5, or 3 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="workloads about 4x smaller, fewer repetitions")
    args = parser.parse_args(argv)
    reps = args.reps or (3 if args.quick else 5)
    if reps < 1:
        parser.error("--reps must be at least 1")

    began = time.perf_counter()
    notes = []
    timing_rows, compare_rows = [], []

    for wname, fn, full, quick in WORKLOADS:
        arg = quick if args.quick else full
        n_events = count_callbacks(fn, arg)

        # Cross-check the count against frametrace's own events, on a small
        # run so that building the events stays cheap.
        small = max(1, arg // 8) if wname != "fib" else arg - 5
        expected = count_callbacks(fn, small)
        seen, dropped = frametrace_callbacks(fn, small)
        if seen != expected or dropped:
            notes.append(f"{wname}: at size {small}, sys.setprofile counted "
                         f"{expected} profile events, frametrace {seen} "
                         f"(dropped {dropped})")

        buffer_size = buffer_size_for(n_events)
        results = measure_workload(fn, arg, reps, buffer_size)

        medians = {}
        for cname, _ in CONFIGS:
            runs = results[cname]
            medians[cname] = statistics.median(ns for ns, _, _ in runs)
            dropped = sum(d for _, _, d in runs)
            if dropped:
                notes.append(f"{wname}/{cname}: {dropped} events dropped over "
                             f"{reps} runs (buffer_size={buffer_size})")
        base = medians["untraced"]
        over = {c: medians[c] - base for c in medians}
        # The machine's noise only ever adds time: the ratios of the fastest
        # runs are a check on those of the medians.
        mins = {c: min(ns for ns, _, _ in results[c]) for c in results}
        over_min = {c: mins[c] - mins["untraced"] for c in mins}

        for cname, _ in CONFIGS:
            runs = results[cname]
            secs = [ns / 1e9 for ns, _, _ in runs]
            faults = statistics.median(f for _, f, _ in runs)
            per_event = "" if cname == "untraced" else f"{over[cname] / n_events:.1f}"
            timing_rows.append([
                wname, f"{n_events:,}", cname,
                f"{medians[cname] / 1e9:.3f}",
                f"{min(secs):.3f} - {max(secs):.3f}",
                f"{medians[cname] / base:.2f}",
                per_event, f"{faults:,.0f}",
            ])

        floor_ns = over["noop C profile (floor)"]
        cprof_ns = over["cProfile"]
        ft_ns = over["frametrace"]
        compare_rows.append([
            wname, f"{n_events:,}",
            f"{floor_ns / n_events:.1f}", f"{cprof_ns / n_events:.1f}",
            f"{ft_ns / n_events:.1f}",
            fmt_ratio(ft_ns, floor_ns), fmt_ratio(ft_ns, cprof_ns),
            fmt_ratio(over_min["frametrace"], over_min["noop C profile (floor)"]),
            fmt_ratio(over_min["frametrace"], over_min["cProfile"]),
        ])
        if floor_ns > 0 and ft_ns > 2 * floor_ns:
            notes.append(f"{wname}: frametrace's overhead is "
                         f"{ft_ns / floor_ns:.2f}x the floor's")
        if cprof_ns > 0 and ft_ns > cprof_ns:
            notes.append(f"{wname}: frametrace's overhead is "
                         f"{ft_ns / cprof_ns:.2f}x cProfile's")

    ge = measure_get_events(1 if args.quick else 3)
    ge_rows = []
    for gc_on in (True, False):
        runs = [r for r in ge if r[2] == gc_on]
        secs = [s for s, _, _, _ in runs]
        n = runs[0][1]
        med = statistics.median(secs)
        ge_rows.append([
            "enabled" if gc_on else "disabled", f"{n:,}", f"{med:.3f}",
            f"{min(secs):.3f} - {max(secs):.3f}", f"{n / med:,.0f}",
        ])
        if any(d for _, _, _, d in runs):
            notes.append("getEvents(): events were dropped while recording")

    print(f"## frametrace overhead: Python {platform.python_version()} "
          f"({platform.python_implementation()}, {platform.machine()})")
    print()
    print(f"frametrace {frametrace.__version__}; {os.cpu_count()} CPUs; "
          f"{reps} timed reps per configuration, interleaved; median wall "
          f"time (time.perf_counter_ns), hook install/removal included."
          + (" --quick sizes." if args.quick else ""))
    print("'events' are profile callbacks (call, return, c_call, c_return, "
          "...), counted with sys.setprofile; overhead ns/event = "
          "(median - untraced median) / events.")
    if sys.version_info >= (3, 12):
        print("On 3.12+ cProfile uses sys.monitoring; the floor and "
              "frametrace go through PyEval_SetProfile (itself built on "
              "sys.monitoring).")
    print()
    print(table(["workload", "events", "config", "median s", "min - max s",
                 "x untraced", "overhead ns/event", "minor faults"],
                timing_rows))
    print()
    print("### frametrace against the floor and cProfile (overhead ns/event)")
    print()
    print(table(["workload", "events", "floor", "cProfile", "frametrace",
                 "frametrace / floor", "frametrace / cProfile",
                 "/ floor, min runs", "/ cProfile, min runs"],
                compare_rows))
    print()
    print("### getEvents() on ~1M recorded events")
    print()
    print(table(["gc", "events", "median s", "min - max s", "events/s"],
                ge_rows))
    print()
    if notes:
        print("Notes:")
        for note in notes:
            print(f"- {note}")
        print()
    print(f"Total run time: {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
