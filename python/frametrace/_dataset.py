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

import contextlib
import json
import os
import secrets
import sys
from operator import attrgetter
from typing import Any, Callable, Iterable, Iterator, Optional

from . import _tracer
from ._output import output_path
from ._ranks import rank_of
from ._version import __version__

SUFFIX = ".parquet"
TABLES = ("events", "steps", "threads", "ranges", "torch_ops", "metadata")
# Events per row group, and per batch built at a time: what one batch of
# columns holds in memory is bounded, whatever the trace's size.
ROW_GROUP = 1 << 20
# How the events table is encoded: times and ids that grow by small steps
# as deltas (a third smaller, and faster to write than plain with its
# compression), and statistics (what readers skip row groups with) only
# for the columns queries filter on: each one costs the writer.
EVENTS_DELTA = ("id", "parent", "start_ns", "end_ns")
EVENTS_STATISTICS = ("pid", "thread", "id", "start_ns", "end_ns", "step", "name")
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

    def given(name: str, kind: Any) -> Any:
        return pa.field(name, kind, nullable=False)
    return {
        # Columns that no event leaves empty (every writer checks a
        # function's and a thread's fields alike) are required: Parquet
        # then writes no definition level per value (a fifth of the write).
        "events": pa.schema([
            given("pid", i64), given("thread", i32), ("tid", i64), ("thread_name", s),
            given("id", i64), ("parent", i64), given("depth", i32), given("name", s),
            given("file", s), given("line", i32), given("kind", s), given("start_ns", i64),
            given("end_ns", i64), given("dur_ns", i64), given("self_ns", i64), ("step", i32),
            given("open_at_start", b), given("open_at_stop", b), given("outermost", b)]),
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


class Writer:
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

    @contextlib.contextmanager
    def row_groups(self, batches_schema: Any) -> Iterator[Callable[[Any], None]]:
        """The events table, written a row group per call of what this
        yields (with a batch of batches_schema: the table's, with strings
        dictionary-encoded); renamed into place when the block ends."""
        with output_path(self.path("events")) as where:
            # store_schema=False: readers see the layout's plain strings
            # (dictionary-encoded in the file either way).
            # Dictionaries for the strings only: times and ids are all
            # different, and trying one for them doubles the write's time.
            strings = [f.name for f in batches_schema if not self.pa.types.is_integer(f.type)
                       and not self.pa.types.is_boolean(f.type)]
            with self.pq.ParquetWriter(where, batches_schema, store_schema=False,
                                       use_dictionary=strings,
                                       column_encoding=dict.fromkeys(EVENTS_DELTA,
                                                                     "DELTA_BINARY_PACKED"),
                                       write_statistics=list(EVENTS_STATISTICS)) as out:
                yield lambda batch: out.write_batch(batch, row_group_size=ROW_GROUP)


def trace_rank(trace: Any) -> int:
    rank = rank_of(trace.distributed) if isinstance(trace.distributed, dict) else None
    return rank if rank is not None else 0


def events_table(w: Writer, events: list, names: dict, steps: list, pid: int
                  ) -> tuple[Any, list]:
    """The events table, and the threads the events name [(thread_id,
    native_thread_id, serial)]: the columns made in C
    (``_tracer._event_columns``) and wrapped as Arrow arrays without a
    copy; functions and threads, numbered there, looked up by pyarrow.
    names: {thread serial: name}."""
    pa = w.pa
    import pyarrow.compute as pc

    n = len(events)
    (ids, start, end, parent, self_ns, depth, func, thread, open_start, open_stop, outermost,
     funcs, threads) = _tracer._event_columns(events)

    def column(kind: Any, data: bytes) -> Any:
        return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(data)])

    i64, i32 = pa.int64(), pa.int32()
    columns = {
        "start_ns": column(i64, start), "end_ns": column(i64, end),
        "parent": column(i64, parent), "self_ns": column(i64, self_ns),
        "depth": column(i32, depth), "id": column(i64, ids),
        "open_at_start": pc.cast(column(pa.uint8(), open_start), pa.bool_()),
        "open_at_stop": pc.cast(column(pa.uint8(), open_stop), pa.bool_()),
        "outermost": pc.cast(column(pa.uint8(), outermost), pa.bool_())}
    columns["dur_ns"] = pc.subtract(columns["end_ns"], columns["start_ns"])
    columns["parent"] = pc.if_else(pc.less(columns["parent"], 0), pa.scalar(None, i64),
                                   columns["parent"])
    return events_columns_table(w, columns, column(i32, func), column(i32, thread), funcs,
                                threads, names, steps, pid), threads


def events_columns_table(w: Writer, columns: dict, func_a: Any, thread_a: Any, funcs: list,
                         threads: list, names: dict, steps: list, pid: int) -> Any:
    """The events table of columns (the times, ids and flags, as Arrow
    arrays) and the per-event numbers of funcs [(name, filename, lineno,
    kind)] and threads [(thread_id, native_thread_id, serial)]; columns
    the table's schema does not name are left out."""
    pa = w.pa
    import pyarrow.compute as pc

    n = len(func_a)
    i64, i32 = pa.int64(), pa.int32()
    # Per function and per thread (few), then taken per event in C.
    f_name, f_file, f_line, f_kind = (zip(*funcs) if funcs else ((), (), (), ()))
    t_serial = [t[2] for t in threads]
    per_func = {"name": _strings(pa, f_name), "file": _strings(pa, f_file),
                "line": pa.array(f_line, type=i32), "kind": _strings(pa, f_kind)}
    per_thread = {"thread": pa.array(t_serial, type=i32),
                  "tid": pa.array([t[1] for t in threads], type=i64),
                  "thread_name": _strings(pa, [names.get(s) for s in t_serial])}
    # Strings stay dictionary-encoded (as Parquet stores them): no string
    # per event is made.
    for key, values in per_func.items():
        columns[key] = _per_event(pa, pc, values, func_a)
    for key, values in per_thread.items():
        columns[key] = _per_event(pa, pc, values, thread_a)
    columns["pid"] = pa.Array.from_buffers(i64, n, [None, pa.py_buffer(
        pid.to_bytes(8, sys.byteorder, signed=True) * n)])  # (pa.repeat: 20x slower)
    columns["step"] = step_column(pa, pc, columns["start_ns"], steps)
    schema = w.schemas["events"]
    return pa.table([columns[f.name] for f in schema],
                    schema=pa.schema([f.with_type(columns[f.name].type) for f in schema]))


def step_column(pa: Any, pc: Any, start: Any, steps: list) -> Any:
    """The step each start_ns is in (null outside steps)."""
    i32 = pa.int32()
    step_a = pa.nulls(len(start), i32)
    if len(start):  # a chunk of convert's spans few of a file's steps: only those
        first, last = pc.min_max(start).values()
        steps = [s for s in steps if s.start_ns <= last.as_py() and s.end_ns > first.as_py()]
    for s in steps:  # one vectorised pass each
        inside = pc.and_(pc.greater_equal(start, s.start_ns), pc.less(start, s.end_ns))
        step_a = pc.if_else(inside, pa.scalar(s.step, i32), step_a)
    return step_a


def _per_event(pa: Any, pc: Any, values: Any, indices: Any) -> Any:
    """values[indices]: strings as a dictionary array, numbers taken.  The
    indices are the C numbering's, all in range: not checked again."""
    if not pa.types.is_string(values.type):
        return pc.take(values, indices, boundscheck=False)
    # Parquet's writer takes a dictionary array's indices as they are only
    # when its values are distinct (else it writes every string plain,
    # three times slower and the file far larger): one entry per distinct
    # string, none for null (the indices hold those).
    distinct = pc.unique(values.drop_null())
    if len(distinct) < len(values):
        indices = pc.take(pc.index_in(values, value_set=distinct), indices, boundscheck=False)
    return pa.DictionaryArray.from_arrays(indices, distinct, safe=False)


def write_dataset(trace: Any, path: Any, *, progress: Any = None) -> int:
    """Writes trace (a Trace, or what ``as_trace()`` takes) into the
    dataset at path (a directory, made if missing), in its rank's and
    cycle's partition; returns how many Python/C events were written."""
    from .export import _prepare

    job = _prepare(trace, path, "write_dataset")
    trace = job.trace
    root = job.path
    w = Writer(root, trace_rank(trace), trace.cycle, job.pid)
    pid = job.pid
    events = trace.events
    events = events if type(events) is list else list(events)
    threads = {t.serial: t for t in trace.threads}
    names = {s: t.name for s, t in threads.items()}
    table, seen = events_table(w, events, names, job.steps, pid)
    with w.row_groups(table.schema) as write:
        for batch in table.to_batches(max_chunksize=ROW_GROUP):
            write(batch)
    count = table.num_rows
    per_serial = events_per_thread(table)
    del table
    if progress is not None:
        progress(count, count)
    write_small_tables(w, job, per_serial, seen)
    return count


def events_per_thread(table: Any) -> dict:
    """{thread serial: rows} of an events table."""
    counted = table.group_by("thread").aggregate([("id", "count")])
    return dict(zip(counted.column("thread").to_pylist(),
                    counted.column("id_count").to_pylist()))


def write_small_tables(w: Writer, job: Any, per_serial: dict, seen: Iterable[tuple]) -> None:
    """All tables but events: per_serial ({thread serial: events}) and seen
    (the threads the events name, see events_table) from the events."""
    trace, pid = job.trace, job.pid
    threads = {t.serial: t for t in trace.threads}
    for thread_id, native, serial in seen:  # a list of Events names no ThreadInfo
        if serial not in threads:
            threads[serial] = _tracer.ThreadInfo((serial, thread_id, native, None, 0))
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


def _write_ops(w: Writer, trace: Any, pid: int, threads: dict) -> None:
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


def _write_metadata(w: Writer, trace: Any, job: Any) -> None:
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
