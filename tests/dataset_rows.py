"""A test fixture: writes datasets in frametrace's dataset layout (one
folder per table, hive-partitioned by rank and cycle) with pyarrow, from
rows given by hand (ranks with a known straggler), for the SQL and report
tests.  Traces are written by the product's own Trace.save("x.parquet")."""
from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

I32, I64, S, B = pa.int32(), pa.int64(), pa.string(), pa.bool_()
SCHEMAS = {
    "events": [("pid", I64), ("thread", I32), ("tid", I64), ("thread_name", S), ("id", I64),
               ("parent", I64), ("depth", I32), ("name", S), ("file", S), ("line", I32),
               ("kind", S), ("start_ns", I64), ("end_ns", I64), ("dur_ns", I64),
               ("self_ns", I64), ("step", I32), ("open_at_start", B), ("open_at_stop", B),
               ("outermost", B)],
    "steps": [("pid", I64), ("step", I32), ("name", S), ("start_ns", I64), ("end_ns", I64),
              ("dur_ns", I64)],
    "threads": [("pid", I64), ("thread", I32), ("tid", I64), ("name", S), ("events", I64),
                ("dropped", I64)],
    "ranges": [("pid", I64), ("thread", I32), ("tid", I64), ("name", S), ("start_ns", I64),
               ("end_ns", I64), ("dur_ns", I64), ("open_at_start", B), ("open_at_end", B)],
    "torch_ops": [("pid", I64), ("thread", I32), ("tid", I64), ("name", S), ("track", S),
                  ("start_ns", I64), ("end_ns", I64), ("dur_ns", I64), ("args", S)],
    "metadata": [("pid", I64), ("key", S), ("value", S)],
}


def write_table(root: str, table: str, rank: int, cycle: int,
                rows: Iterable[Mapping[str, Any]], part: str = "0") -> str:
    """Writes rows (dicts by column) as one file of table's partition."""
    schema = pa.schema(SCHEMAS[table])
    rows = list(rows)
    cols = {name: [r.get(name) for r in rows] for name in schema.names}
    folder = os.path.join(root, table, f"rank={rank}", f"cycle={cycle}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"part-{part}.parquet")
    pq.write_table(pa.table(cols, schema=schema), path)
    return path


def synthetic_ranks(root: str, ranks: int = 4, steps: int = 5, slow: tuple = (2, 3),
                    step_ms: int = 100, slow_ms: int = 200,
                    slow_name: str = "slow_io") -> str:
    """A dataset of ranks training in lockstep: each step a train_step of
    step_ms with forward and backward under it; on rank slow[0] at step
    slow[1], slow_name adds slow_ms."""
    ms = 1_000_000
    for rank in range(ranks):
        events, step_rows = [], []
        t = 0
        for step in range(steps):
            extra = slow_ms * ms if (rank, step) == tuple(slow) else 0
            dur = step_ms * ms + extra
            base = len(events)
            children = [("forward", 60 * ms), ("backward", 30 * ms)]
            if extra:
                children.append((slow_name, extra))
            events.append(dict(pid=1000 + rank, thread=1, tid=1000 + rank,
                               thread_name="MainThread", id=base, parent=None, depth=0,
                               name="train_step", file="train.py", line=10, kind="py",
                               start_ns=t, end_ns=t + dur, dur_ns=dur,
                               self_ns=dur - sum(d for _, d in children), step=step,
                               open_at_start=False, open_at_stop=False, outermost=True))
            c = t
            for i, (name, d) in enumerate(children):
                events.append(dict(pid=1000 + rank, thread=1, tid=1000 + rank,
                                   thread_name="MainThread", id=base + 1 + i, parent=base,
                                   depth=1, name=name, file="train.py", line=20 + i,
                                   kind="py", start_ns=c, end_ns=c + d, dur_ns=d, self_ns=d,
                                   step=step, open_at_start=False, open_at_stop=False,
                                   outermost=True))
                c += d
            step_rows.append(dict(pid=1000 + rank, step=step, name=f"step#{step}", start_ns=t,
                                  end_ns=t + dur, dur_ns=dur))
            t += dur
        write_table(root, "events", rank, 0, events)
        write_table(root, "steps", rank, 0, step_rows)
        write_table(root, "metadata", rank, 0, [dict(pid=1000 + rank, key="clock",
                                                     value='"monotonic"')])
    return root
