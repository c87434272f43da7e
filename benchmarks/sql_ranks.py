"""SQL over a big distributed job: the time DuckDB takes (frametrace.sql's
views) over RANKS rank files totalling N events, for "self time of the top
20 functions per rank" and "per-step duration per rank".

    python benchmarks/sql_ranks.py [--events N] [--ranks R] [--steps S]
                                   [--dir DIR] [--repeat K]

Needs pyarrow, numpy and DuckDB (``pip install 'frametrace[sql]' pyarrow
numpy``).  Writes (once; kept in DIR, default a folder in the temporary
directory named after the size) a dataset in frametrace's layout with
synthetic rows made with numpy and written with pyarrow directly: per rank
one events file (a main thread's calls over 500 functions, depth 0-7, in S
steps) and its steps table.  Then times each query K times (wall clock and
this process's CPU time; DuckDB uses every core) and prints the best.
A report, never a test: nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

QUERIES = {
    "top 20 functions by self time per rank": """
        select rank, name, sum(self_ns) as self_ns
        from events group by rank, name
        qualify row_number() over (partition by rank order by sum(self_ns) desc) <= 20""",
    "per-step duration per rank (steps table)": """
        select step, rank, max(end_ns) - min(start_ns) from steps group by step, rank""",
    "per-step duration per rank (from events)": """
        select step, rank, max(end_ns) - min(start_ns) from events
        where step is not null group by step, rank""",
}


def write_rank(root: str, rank: int, n: int, steps: int, seed: int,
               outermost: bool = True) -> None:
    """One rank's events and steps; outermost=False: the events table as
    writers before that column wrote it."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    names = pa.array([f"module{i % 37}.function_{i}" for i in range(500)])
    fid = rng.zipf(1.3, n) % 500
    dur = rng.integers(200, 20_000, n, dtype=np.int64)
    start = np.cumsum(dur // 2)
    depth = rng.integers(0, 8, n).astype(np.int32)
    step = (np.arange(n, dtype=np.int64) * steps // n).astype(np.int32)
    ids = np.arange(n, dtype=np.int64)
    cols = {
        "pid": pa.array(np.full(n, 1000 + rank, np.int64)),
        "thread": pa.array(np.ones(n, np.int32)),
        "tid": pa.array(np.full(n, 1000 + rank, np.int64)),
        "thread_name": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)),
                                                      pa.array(["MainThread"])),
        "id": pa.array(ids),
        "parent": pa.array(np.maximum(ids - 1, 0)),
        "depth": pa.array(depth),
        "name": pa.DictionaryArray.from_arrays(pa.array(fid.astype(np.int32)), names),
        "file": pa.DictionaryArray.from_arrays(pa.array((fid % 37).astype(np.int32)),
                                               pa.array([f"/src/module{i}.py"
                                                         for i in range(37)])),
        "line": pa.array((fid * 7 % 900).astype(np.int32)),
        "kind": pa.DictionaryArray.from_arrays(pa.array((fid % 5 == 0).astype(np.int32)),
                                               pa.array(["py", "c"])),
        "start_ns": pa.array(start),
        "end_ns": pa.array(start + dur),
        "dur_ns": pa.array(dur),
        "self_ns": pa.array(dur // 3),
        "step": pa.array(step),
        "open_at_start": pa.array(np.zeros(n, bool)),
        "open_at_stop": pa.array(np.zeros(n, bool)),
    }
    if outermost:  # a tenth inside a call of their own function
        cols["outermost"] = pa.array(rng.random(n) >= 0.1)
    for table, data in (("events", cols), ("steps", _steps(np, pa, start, dur, step, steps,
                                                          rank))):
        folder = os.path.join(root, table, f"rank={rank}", "cycle=0")
        os.makedirs(folder, exist_ok=True)
        pq.write_table(pa.table(data), os.path.join(folder, "part-0.parquet.tmp"))
        os.replace(os.path.join(folder, "part-0.parquet.tmp"),
                   os.path.join(folder, "part-0.parquet"))


def _steps(np, pa, start, dur, step, steps, rank):  # type: ignore[no-untyped-def]
    bounds = np.searchsorted(step, np.arange(steps + 1))
    s = start[np.minimum(bounds[:-1], len(start) - 1)]
    e = start[np.maximum(bounds[1:] - 1, 0)] + dur[np.maximum(bounds[1:] - 1, 0)]
    return {"pid": pa.array(np.full(steps, 1000 + rank, np.int64)),
            "step": pa.array(np.arange(steps, dtype=np.int32)),
            "name": pa.array([f"step#{i}" for i in range(steps)]),
            "start_ns": pa.array(s), "end_ns": pa.array(e), "dur_ns": pa.array(e - s)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=100_000_000)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--dir")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import frametrace

    root = args.dir or os.path.join(tempfile.gettempdir(),
                                    f"frametrace-sql-bench-{args.ranks}x{args.events}.parquet")
    if not os.path.isdir(os.path.join(root, "steps")):
        t0 = time.perf_counter()
        per = args.events // args.ranks
        for rank in range(args.ranks):
            write_rank(root, rank, per, args.steps, seed=rank)
        print(f"wrote {per * args.ranks:,} events in {args.ranks} rank files to {root} in "
              f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
    (events,), = frametrace.sql("select count(*) from events", root)
    print(f"{events:,} events, {args.ranks} ranks, {size / 2**20:.0f} MiB of Parquet; "
          f"DuckDB, best of {args.repeat}, os.cpu_count()={os.cpu_count()}")
    for label, query in QUERIES.items():
        best_wall = best_cpu = float("inf")
        for _ in range(args.repeat):
            w0, c0 = time.perf_counter(), time.process_time()
            rows = frametrace.sql(query, root)
            best_wall = min(best_wall, time.perf_counter() - w0)
            best_cpu = min(best_cpu, time.process_time() - c0)
        print(f"  {label}: {best_wall:.2f} s wall, {best_cpu:.2f} s CPU, {len(rows):,} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
