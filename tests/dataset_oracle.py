"""A test fixture: writes datasets in frametrace's dataset layout (one
folder per table, hive-partitioned by rank and cycle) with pyarrow, from a
Trace's events or from rows given by hand, for the SQL and report tests.
Not the product's writer (Trace.save("x.parquet")); a reference for it."""
from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq

I32, I64, S, B = pa.int32(), pa.int64(), pa.string(), pa.bool_()
SCHEMAS = {
    "events": [("pid", I64), ("thread", I32), ("tid", I64), ("thread_name", S), ("id", I64),
               ("parent", I64), ("depth", I32), ("name", S), ("file", S), ("line", I32),
               ("kind", S), ("start_ns", I64), ("end_ns", I64), ("dur_ns", I64),
               ("self_ns", I64), ("step", I32), ("open_at_start", B), ("open_at_stop", B)],
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


def trace_tables(trace: Any) -> dict[str, list[dict]]:
    """A Trace's rows of each table (events with self time and step)."""
    events = trace.events
    child_dur = [0] * len(events)
    for e in events:
        if e.parent >= 0:
            child_dur[e.parent] += e.end_ns - e.start_ns
    steps = sorted(trace.steps, key=lambda s: s.start_ns)

    def step_of(t: int) -> Any:
        for s in steps:
            if s.start_ns <= t < s.end_ns:
                return s.step
        return None

    names = {t.serial: t.name for t in trace.threads}
    ev_rows = [dict(pid=trace.pid, thread=e.thread_serial, tid=e.native_thread_id,
                    thread_name=names.get(e.thread_serial), id=i,
                    parent=e.parent if e.parent >= 0 else None, depth=e.depth, name=e.name,
                    file=e.filename, line=e.lineno, kind=e.kind, start_ns=e.start_ns,
                    end_ns=e.end_ns, dur_ns=e.end_ns - e.start_ns,
                    self_ns=e.end_ns - e.start_ns - child_dur[i], step=step_of(e.start_ns),
                    open_at_start=e.open_at_start, open_at_stop=e.open_at_stop)
               for i, e in enumerate(events)]
    return {
        "events": ev_rows,
        "steps": [dict(pid=trace.pid, step=s.step, name=s.name, start_ns=s.start_ns,
                       end_ns=s.end_ns, dur_ns=s.end_ns - s.start_ns) for s in steps],
        "threads": [dict(pid=trace.pid, thread=t.serial, tid=t.native_thread_id, name=t.name,
                         events=sum(1 for e in events if e.thread_serial == t.serial),
                         dropped=t.dropped) for t in trace.threads],
        "ranges": [dict(pid=trace.pid, thread=None, tid=r.thread_id, name=r.name,
                        start_ns=r.start_ns, end_ns=r.end_ns, dur_ns=r.end_ns - r.start_ns,
                        open_at_start=r.open_at_start, open_at_end=r.open_at_end)
                   for r in trace.ranges],
        "metadata": [dict(pid=trace.pid, key=k, value=json.dumps(v))
                     for k, v in trace.metadata().items()],
    }


def write_trace(root: str, trace: Any, part: str = "0") -> str:
    """Adds a Trace to the dataset at root (its rank, or 0, and its cycle)."""
    rank = (trace.distributed or {}).get("rank", 0)
    for table, rows in trace_tables(trace).items():
        write_table(root, table, rank, trace.cycle, rows, part)
    return root


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
                               open_at_start=False, open_at_stop=False))
            c = t
            for i, (name, d) in enumerate(children):
                events.append(dict(pid=1000 + rank, thread=1, tid=1000 + rank,
                                   thread_name="MainThread", id=base + 1 + i, parent=base,
                                   depth=1, name=name, file="train.py", line=20 + i,
                                   kind="py", start_ns=c, end_ns=c + d, dur_ns=d, self_ns=d,
                                   step=step, open_at_start=False, open_at_stop=False))
                c += d
            step_rows.append(dict(pid=1000 + rank, step=step, name=f"step#{step}", start_ns=t,
                                  end_ns=t + dur, dur_ns=dur))
            t += dur
        write_table(root, "events", rank, 0, events)
        write_table(root, "steps", rank, 0, step_rows)
        write_table(root, "metadata", rank, 0, [dict(pid=1000 + rank, key="clock",
                                                     value='"monotonic"')])
    return root
