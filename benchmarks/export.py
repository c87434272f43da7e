"""How fast Chrome trace JSON is written, and how large it is, against
VizTracer on the same run (if it is installed: pip install viztracer).

    python benchmarks/export.py [--events N]

Traces a recursive function (N Python events, plus its C calls), then times
frametrace's write_chrome() (C, straight from the records) to .json and
.json.gz, write_perfetto() to .pftrace, and VizTracer's save() of the same
workload.  A report, never a
test.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import frametrace
from frametrace.export import write_chrome, write_perfetto


def fib(n):
    return n if n < 2 else fib(n - 1) + abs(fib(n - 2))


def fib_arg_for(events):
    n, calls = 1, 1
    while calls * 2 < events:  # fib(n) makes ~1.6^n calls, each with one abs()
        n += 1
        a, b = 1, 1
        for _ in range(n):
            a, b = b, a + b + 1
        calls = a
    return n


def mib(path):
    return os.path.getsize(path) / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=3, help="writes of each kind (best kept)")
    args = parser.parse_args()
    n = fib_arg_for(args.events)
    tmp = tempfile.mkdtemp(prefix="frametrace-export-")
    with frametrace.Tracer(buffer_size=1 << 23) as tracer:
        fib(n)
    count = tracer.stats.dropped + len(tracer.getEvents())
    print(f"fib({n}): {count:,} events recorded, {tracer.stats.dropped} dropped\n")
    print("| writer | events | seconds | events/s | events/CPU-s | MiB | bytes/event |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    json_size = None
    for suffix, writer in ((".json", write_chrome), (".json.gz", write_chrome),
                           (".pftrace", write_perfetto)):
        path = os.path.join(tmp, "frametrace" + suffix)
        # Best of 3, by wall clock and by CPU time (the process's: on a
        # loaded machine the wall clock measures the neighbours).
        dt = cpu = float("inf")
        for _ in range(args.reps):
            c0, t0 = time.process_time(), time.perf_counter()
            written = writer(tracer, path)
            dt = min(dt, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        size = os.path.getsize(path)
        json_size = json_size or size
        print(f"| frametrace {writer.__name__} {suffix} | {written:,} | {dt:.3f} | {written / dt:,.0f} | "
              f"{written / cpu:,.0f} | {mib(path):.1f} | {size / written:.1f} ({size / json_size:.2f}x the JSON) |")
    t0 = time.perf_counter()
    events = tracer.getEvents()
    dt = time.perf_counter() - t0
    print(f"| frametrace getEvents() | {len(events):,} | {dt:.3f} | {len(events) / dt:,.0f} | | | |")
    tracer.clear()
    try:
        from viztracer import VizTracer
    except ImportError:
        print("\nVizTracer: not installed, skipped")
        return
    # C functions are logged by default (ignore_c_function=False).
    viz = VizTracer(tracer_entries=4_000_000, verbose=0)
    viz.start()
    fib(n)
    viz.stop()
    path = os.path.join(tmp, "viztracer.json")
    t0 = time.perf_counter()
    viz.save(path)
    dt = time.perf_counter() - t0
    import json

    with open(path) as fh:
        entries = sum(1 for e in json.load(fh)["traceEvents"] if e.get("ph") == "X")
    print(f"| VizTracer save() .json | {entries:,} | {dt:.3f} | {entries / dt:,.0f} | | {mib(path):.1f} | "
          f"{os.path.getsize(path) / entries:.1f} |")


if __name__ == "__main__":
    main()
