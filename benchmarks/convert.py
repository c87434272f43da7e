"""How fast traces become Parquet datasets: Trace.save("x.parquet") from a
stopped tracer, and ``frametrace convert`` of a Chrome JSON trace (its
load and its write, timed apart).  Needs pyarrow (frametrace[data]).

    python benchmarks/convert.py [--events N]

Traces a recursive function (about N Python and C events), writes it as
.json, then times each path and prints events/s.  A report, never a test.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import frametrace
from frametrace._dataset import write_dataset


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


def timed(what, count, func):
    started = time.perf_counter()
    func()
    seconds = time.perf_counter() - started
    print(f"{what:<34} {count:>11,} events {seconds:7.2f} s {count / seconds / 1e6:6.2f} M events/s")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    ns = parser.parse_args()
    tracer = frametrace.Tracer(buffer_size=max(1 << 20, ns.events * 4))
    with tracer:
        fib(fib_arg_for(ns.events))
    with tempfile.TemporaryDirectory() as tmp:
        trace = frametrace.as_trace(tracer)
        n = len(trace.events)
        js = os.path.join(tmp, "t.json")
        trace.save(js)
        print(f"{n:,} events; JSON {os.path.getsize(js) / 2**20:.0f} MiB")
        fresh = frametrace.as_trace(tracer)  # its Events not built yet
        timed("Trace.save(x.parquet), from records", n,
              lambda: fresh.save(os.path.join(tmp, "a.parquet")))
        timed("  of which: getEvents()", n, tracer.getEvents)
        loaded = []
        t_load = timed("convert: load(t.json)", n, lambda: loaded.append(frametrace.load(js)))
        t_write = timed("convert: write the dataset", n,
                        lambda: write_dataset(loaded[0], os.path.join(tmp, "b.parquet")))
        print(f"{'convert, whole':<34} {n:>11,} events {t_load + t_write:7.2f} s "
              f"{n / (t_load + t_write) / 1e6:6.2f} M events/s")
        shutil.rmtree(os.path.join(tmp, "a.parquet"))


if __name__ == "__main__":
    main()
