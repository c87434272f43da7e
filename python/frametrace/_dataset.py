"""A Trace as tables of Parquet files: frametrace's dataset.

A dataset is a directory (``x.parquet`` by convention) with one folder per
table (events, steps, threads, ranges, torch_ops, metadata), each
hive-partitioned by rank and cycle (``events/rank=0/cycle=3/part-...``);
the partition columns are in the path only.  A writer only adds files, each
written beside its name and renamed into place (``_output.output_path``):
ranks, cycles and ``frametrace convert`` write into one dataset side by
side, and a reader never sees half a file.  pyarrow (``frametrace[data]``)
is imported only when a dataset is written.
"""
from __future__ import annotations

import json
import os
import secrets
import sys
from operator import attrgetter
from typing import Any, Iterable, Optional

from . import _tracer
from ._output import output_path
from ._ranks import rank_of
from ._version import __version__

SUFFIX = ".parquet"
TABLES = ("events", "steps", "threads", "ranges", "torch_ops", "metadata")
# Events per row group, and per batch built at a time: what one batch of
# columns holds in memory is bounded, whatever the trace's size.
ROW_GROUP = 1 << 20
MISSING = ("writing a .parquet dataset needs pyarrow, which is not installed: "
           "pip install 'frametrace[data]'")


def pyarrow_modules() -> tuple[Any, Any]:
    """(pyarrow, pyarrow.parquet); ImportError saying what to install."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise ImportError(MISSING) from exc
    return pyarrow, pyarrow.parquet


def check_available() -> None:
    """ImportError naming the extra when pyarrow is missing: what a command
    checks before it runs a program whose trace goes to a dataset."""
    pyarrow_modules()


def is_dataset(path: Any) -> bool:
    """True if path names a dataset (it ends in .parquet)."""
    name = os.fspath(path)
    return isinstance(name, str) and name.rstrip(os.sep).endswith(SUFFIX)


def _schemas(pa: Any) -> dict:
    i32, i64, s, b = pa.int32(), pa.int64(), pa.string(), pa.bool_()
    return {
        "events": pa.schema([
            ("pid", i64), ("thread", i32), ("tid", i64), ("thread_name", s), ("id", i64),
            ("parent", i64), ("depth", i32), ("name", s), ("file", s), ("line", i32),
            ("kind", s), ("start_ns", i64), ("end_ns", i64), ("dur_ns", i64), ("self_ns", i64),
            ("step", i32), ("open_at_start", b), ("open_at_stop", b)]),
        "steps": pa.schema([("pid", i64), ("step", i32), ("name", s), ("start_ns", i64),
                            ("end_ns", i64), ("dur_ns", i64)]),
        "threads": pa.schema([("pid", i64), ("thread", i32), ("tid", i64), ("name", s),
                              ("events", i64), ("dropped", i64)]),
        "ranges": pa.schema([("pid", i64), ("thread", i32), ("tid", i64), ("name", s),
                             ("start_ns", i64), ("end_ns", i64), ("dur_ns", i64),
                             ("open_at_start", b), ("open_at_end", b)]),
        "torch_ops": pa.schema([("pid", i64), ("thread", i32), ("tid", i64), ("name", s),
                                ("track", s), ("start_ns", i64), ("end_ns", i64),
                                ("dur_ns", i64), ("args", s)]),
        "metadata": pa.schema([("pid", i64), ("key", s), ("value", s)]),
    }


def _text(value: Optional[str]) -> Optional[str]:
    """A string as UTF-8 allows: a name that is not (a file name's byte,
    which Python holds as a lone surrogate) gets the surrogate's \\uXXXX
    escape, the text JSON has for it."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _strings(pa: Any, values: Any) -> Any:
    """A string column of values (str or None), in C unless a value is not
    UTF-8 (then each is fixed by _text)."""
    try:
        return pa.array(values, type=pa.string())
    except (UnicodeEncodeError, pa.ArrowInvalid):
        return pa.array([_text(v) for v in values], type=pa.string())


class _Writer:
    """Writes tables into one rank's and cycle's partition of a dataset."""

    def __init__(self, root: str, rank: int, cycle: int, pid: int):
        self.pa, self.pq = pyarrow_modules()
        self.schemas = _schemas(self.pa)
        self.root, self.rank, self.cycle, self.pid = root, rank, cycle, pid
        self.unique = secrets.token_hex(8)

    def path(self, table: str) -> str:
        return os.path.join(self.root, table, f"rank={self.rank}", f"cycle={self.cycle}",
                            f"part-{self.pid}-{self.unique}.parquet")

    def table(self, name: str, columns: dict) -> None:
        """A small table, whole."""
        t = self.pa.table(columns, schema=self.schemas[name])
        with output_path(self.path(name)) as where:
            self.pq.write_table(t, where)

    def batches(self, name: str, batches: Iterable[Any]) -> int:
        """A large table, a row group per batch; returns its row count."""
        rows = 0
        with output_path(self.path(name)) as where:
            with self.pq.ParquetWriter(where, self.schemas[name]) as out:
                for batch in batches:
                    out.write_batch(batch, row_group_size=ROW_GROUP)
                    rows += batch.num_rows
        return rows


def _rank(trace: Any) -> int:
    rank = rank_of(trace.distributed) if isinstance(trace.distributed, dict) else None
    return rank if rank is not None else 0


_FIELDS = attrgetter("thread_serial", "native_thread_id", "depth", "name", "filename", "lineno",
                     "kind", "open_at_start", "open_at_stop")


def _event_batches(w: _Writer, events: list, names: dict, steps: list, pid: int) -> Iterable[Any]:
    """The events table in batches of ROW_GROUP events: each column made
    in C (map over the events, pyarrow's conversion and compute), no
    Python code run per event.  names: {thread serial: name}."""
    pa = w.pa
    import pyarrow.compute as pc

    n, i64 = len(events), pa.int64()
    ids = pa.array(range(n), type=i64)
    starts = pa.array(map(attrgetter("start_ns"), events), type=i64)
    durs = pc.subtract(pa.array(map(attrgetter("end_ns"), events), type=i64), starts)
    parents = pa.array(map(attrgetter("parent"), events), type=i64)
    # Self time: a call's duration less its children's, summed per parent.
    sums = pa.table({"parent": parents, "dur": durs}).group_by("parent").aggregate(
        [("dur", "sum")])
    joined = pa.table({"id": ids}).join(sums, keys="id", right_keys="parent",
                                        join_type="left outer").sort_by("id")
    selfs = pc.subtract(durs, pc.fill_null(joined.column("dur_sum"), 0).combine_chunks())
    serial_keys = pa.array(sorted(names), type=pa.int32())
    serial_names = _strings(pa, [names[k] for k in serial_keys.to_pylist()])
    for lo in range(0, n, ROW_GROUP):
        chunk = events[lo:lo + ROW_GROUP]
        k = len(chunk)
        serial, tid, depth, name, file, line, kind, o_start, o_stop = zip(*map(_FIELDS, chunk))
        serial_a = pa.array(serial, type=pa.int32())
        start_a = starts.slice(lo, k)
        parent_a = parents.slice(lo, k)
        step_a = pa.nulls(k, pa.int32())
        for s in steps:  # a window's few steps: one vectorised pass each
            inside = pc.and_(pc.greater_equal(start_a, s.start_ns), pc.less(start_a, s.end_ns))
            step_a = pc.if_else(inside, pa.scalar(s.step, pa.int32()), step_a)
        yield pa.record_batch([
            pa.array([pid] * k, type=i64), serial_a, pa.array(tid, type=i64),
            pc.take(serial_names, pc.index_in(serial_a, value_set=serial_keys)),
            ids.slice(lo, k),
            pc.if_else(pc.less(parent_a, 0), pa.scalar(None, i64), parent_a),
            pa.array(depth, type=pa.int32()), _strings(pa, name), _strings(pa, file),
            pa.array(line, type=pa.int32()), _strings(pa, kind), start_a,
            pc.add(start_a, durs.slice(lo, k)), durs.slice(lo, k), selfs.slice(lo, k), step_a,
            pa.array(o_start, type=pa.bool_()), pa.array(o_stop, type=pa.bool_())],
            schema=w.schemas["events"])


def write_dataset(trace: Any, path: Any, *, progress: Any = None) -> int:
    """Writes trace (a Trace, or what ``as_trace()`` takes) into the
    dataset at path (a directory, made if missing), in its rank's and
    cycle's partition; returns how many Python/C events were written."""
    from .export import _prepare

    job = _prepare(trace, path, "write_dataset")
    trace = job.trace
    root = job.path
    w = _Writer(root, _rank(trace), trace.cycle, job.pid)
    pid = job.pid
    events = trace.events
    events = events if type(events) is list else list(events)
    threads = {t.serial: t for t in trace.threads}
    for e in events:
        if not isinstance(e, _tracer.Event):
            raise TypeError(f"Trace.events must hold frametrace.Event, not {type(e).__name__}")
    serials = set(map(attrgetter("thread_serial"), events))
    names = {s: (threads[s].name if s in threads else None) for s in serials | set(threads)}
    count = w.batches("events", _event_batches(w, events, names, job.steps, pid))
    if progress is not None:
        progress(count, count)
    per_serial: dict = {}
    for s in map(attrgetter("thread_serial"), events):
        per_serial[s] = per_serial.get(s, 0) + 1
    infos = sorted(threads.values(), key=attrgetter("serial"))
    w.table("threads", {
        "pid": [pid] * len(infos), "thread": [t.serial for t in infos],
        "tid": [t.native_thread_id for t in infos], "name": [_text(t.name) for t in infos],
        "events": [per_serial.get(t.serial, 0) for t in infos],
        "dropped": [t.dropped or 0 for t in infos]})
    steps = job.steps
    w.table("steps", {
        "pid": [pid] * len(steps), "step": [s.step for s in steps],
        "name": [_text(s.name) for s in steps], "start_ns": [s.start_ns for s in steps],
        "end_ns": [s.end_ns for s in steps], "dur_ns": [s.end_ns - s.start_ns for s in steps]})
    by_ident = {t.thread_id: t for t in infos}  # a range's thread: the latest with its ident
    ranges = job.ranges
    w.table("ranges", {
        "pid": [pid] * len(ranges),
        "thread": [getattr(by_ident.get(r.thread_id), "serial", None) for r in ranges],
        "tid": [getattr(by_ident.get(r.thread_id), "native_thread_id", None) for r in ranges],
        "name": [_text(r.name) for r in ranges], "start_ns": [r.start_ns for r in ranges],
        "end_ns": [r.end_ns for r in ranges], "dur_ns": [r.end_ns - r.start_ns for r in ranges],
        "open_at_start": [bool(getattr(r, "open_at_start", False)) for r in ranges],
        "open_at_end": [bool(getattr(r, "open_at_end", False)) for r in ranges]})
    _write_ops(w, trace, pid, threads)
    _write_metadata(w, trace, job)
    return count


def _write_ops(w: _Writer, trace: Any, pid: int, threads: dict) -> None:
    """Other tools' slices (frametrace.torch's ops, kernels)."""
    from .export import _check_slices

    by_serial, tracks = _check_slices(trace.slices, trace.slice_tracks, list(threads))
    rows = [(serial, threads[serial].native_thread_id, None, x)
            for serial, items in by_serial.items() for x in items]
    rows += [(None, None, name, x) for name, items in tracks for x in items]
    w.table("torch_ops", {
        "pid": [pid] * len(rows), "thread": [r[0] for r in rows], "tid": [r[1] for r in rows],
        "name": [_text(r[3].name) for r in rows], "track": [_text(r[2]) for r in rows],
        "start_ns": [r[3].start_ns for r in rows], "end_ns": [r[3].end_ns for r in rows],
        "dur_ns": [r[3].end_ns - r[3].start_ns for r in rows],
        "args": [None if r[3].args is None else _text(json.dumps(r[3].args)) for r in rows]})


def _write_metadata(w: _Writer, trace: Any, job: Any) -> None:
    """One row per key, its value as JSON."""
    meta = dict(trace.metadata())
    meta.update(process_name=job.process_name or f"python {job.pid}",
                clock_anchor=trace.clock_anchor, metadata=job.metadata,
                frametrace_version=__version__)
    if trace.tracer is not None:  # recorded here: this Python's
        meta["python_version"] = sys.version.split()[0]
    keys = list(meta)
    w.table("metadata", {"pid": [job.pid] * len(keys), "key": keys,
                         "value": [_text(json.dumps(meta[k], default=str)) for k in keys]})
