"""`frametrace compare BEFORE AFTER` of two whole datasets: the time
``frametrace.reports.compare`` takes over two datasets of N events each in
RANKS rank files (benchmarks/sql_ranks.py's synthetic rows: 500 functions,
one thread per rank, S steps; "after" another seed).

    python benchmarks/compare_datasets.py [--events N] [--ranks R] [--steps S]
                                          [--dir DIR] [--unmarked] [--window]
                                          [--repeat K]

--unmarked writes (and compares) the datasets without the events'
``outermost`` column, as writers before it did: compare then totals the
functions with its window over each thread's events, the old way.
--window times, on the same datasets, the query compare ran before the
column existed (WINDOW below, per side) instead of compare.  The
datasets are written once and kept in DIR (default: the temporary
directory), named after their size.  Needs pyarrow, numpy and DuckDB.
A report, never a test: nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sql_ranks import write_rank  # noqa: E402


# What compare ran per side before the outermost column: the window over
# each thread's events sorted per function.
WINDOW = """
select name, file, line, kind, count(*), sum(self_ns),
       sum(case when coalesce(outer_end, -1) >= end_ns then 0 else dur_ns end)
from (select name, file, line, kind, self_ns, dur_ns, end_ns,
             max(end_ns) over (partition by rank, cycle, pid, thread, tid, name, file, line, kind
                               order by start_ns, depth
                               rows between unbounded preceding and 1 preceding) as outer_end
      from events)
group by name, file, line, kind
"""


def dataset(folder: str, side: str, args: argparse.Namespace) -> str:
    kind = "unmarked" if args.unmarked else "marked"
    root = os.path.join(folder, f"frametrace-compare-{side}-{kind}-"
                                f"{args.ranks}x{args.events}.parquet")
    if not os.path.isdir(os.path.join(root, "steps")):
        t0 = time.perf_counter()
        per = args.events // args.ranks
        for rank in range(args.ranks):
            write_rank(root, rank, per, args.steps, seed=rank + (0 if side == "before" else 10_000),
                       outermost=not args.unmarked)
        print(f"wrote {per * args.ranks:,} events in {args.ranks} rank files to {root} in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return root


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=100_000_000)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--unmarked", action="store_true")
    ap.add_argument("--window", action="store_true")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    import frametrace
    from frametrace import reports

    before, after = dataset(args.dir, "before", args), dataset(args.dir, "after", args)
    label = ("datasets without the outermost column" if args.unmarked
             else "datasets with the outermost column")
    print(f"{args.events:,} events per side, {args.ranks} ranks, {label}; "
          f"os.cpu_count()={os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")
    best_wall = best_cpu = float("inf")
    for _ in range(args.repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        if args.window:
            functions = len(frametrace.sql(WINDOW, before)) + len(frametrace.sql(WINDOW, after))
        else:
            functions = reports.compare(before, after).functions
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    what = "the window query, both sides" if args.window else "compare"
    print(f"  {what}: {best_wall:.1f} s wall, {best_cpu:.1f} s CPU (best of {args.repeat}), "
          f"{functions} functions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
