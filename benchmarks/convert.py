"""How fast traces become Parquet datasets: Trace.save("x.parquet") from a
stopped tracer, and ``frametrace convert`` of a Chrome JSON trace (its
load and its write, timed apart).  Needs pyarrow (frametrace[data]).

    python benchmarks/convert.py [--events N]

Traces a recursive function (about N Python and C events), writes it as
.json (and, last, as .json.gz), then times each path and prints events/s,
by the CPU time of the process (its threads' too: convert writes on a
second one) and by the clock.  A report, never a test.
"""
from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time

import frametrace
from frametrace._convert_stream import convert_file
from frametrace._dataset import Writer, events_table, write_dataset

# The same traced program as the export benchmark's.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import fib, fib_arg_for  # noqa: E402


def timed(what, count, func):
    cpu, started = time.process_time(), time.perf_counter()
    func()
    cpu, seconds = time.process_time() - cpu, time.perf_counter() - started
    print(f"{what:<34} {count:>11,} events {seconds:7.2f} s {count / seconds / 1e6:6.2f} M/s; "
          f"CPU {cpu:7.2f} s {count / cpu / 1e6:6.2f} M/s")
    return cpu


def _write_events(w, table):
    with w.row_groups(table.schema) as write:
        for batch in table.to_batches(max_chunksize=1 << 20):
            write(batch)


def main() -> None:
    importlib.import_module("pyarrow.parquet")  # its import is no part of a write's time
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
        print(f"{'load, then write (CPU)':<34} {n:>11,} events {t_load + t_write:7.2f} s "
              f"{n / (t_load + t_write) / 1e6:6.2f} M events/s")
        w = Writer(os.path.join(tmp, "c.parquet"), 0, 0, 1)
        tables = []
        timed("  of which: the columns", n,
              lambda: tables.append(events_table(w, loaded[0].events, {}, [], 1)[0]))
        del loaded[:]
        timed("  of which: the Parquet encoding", n,
              lambda: _write_events(w, tables[0]))
        tables.clear()
        timed("frametrace convert (in chunks)", n,
              lambda: convert_file(js, os.path.join(tmp, "d.parquet")))
        os.remove(js)
        gz = js + ".gz"
        trace.save(gz)
        timed("frametrace convert of .json.gz", n,
              lambda: convert_file(gz, os.path.join(tmp, "e.parquet")))
        shutil.rmtree(os.path.join(tmp, "a.parquet"))


if __name__ == "__main__":
    main()
