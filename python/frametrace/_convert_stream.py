"""``frametrace convert``'s one file: a Chrome JSON trace into a dataset
with a bounded number of its events in memory.

The loader's reader (``loader.load_chrome``) streams the file; its Events
go to a sink that, every ``chunk`` events, writes them as a row group of
the events table and forgets them.  The calls still open then (on a
thread's stack: later events may be their children) are carried into the
next chunk, at most a stack's depth per thread: their ids, parents and
the children's durations met so far are kept, so parents, depths and self
times are what the whole file gives.  The chunks need the steps and
thread names (which write_chrome writes before the calls); a file that
gives them later, and a .pftrace (read whole anyway), is converted whole
(``load`` then ``write_dataset``).
"""
from __future__ import annotations

import gc
import os
from typing import Any, Optional

from . import _pftrace
from ._dataset import (Writer, events_per_thread, events_table, trace_rank, write_dataset,
                       write_small_tables)
from ._reader import _Bad, _named_errors
from ._tracer import Event
from .loader import MergedTrace, _chrome_trace, _ChromeEvents, _Plan, load, load_chrome

CHUNK = 1 << 20  # events held at a time
MERGED = "a merged trace of several processes: convert the files it merged"


class _Restart(Exception):
    """What the written chunks were made with changed later in the file."""


def convert_file(path: Any, root: Any, *, chunk: int = CHUNK) -> int:
    """Adds the trace of the file at path to the dataset at root; returns
    how many Python/C events were written."""
    path = os.fspath(path)
    with _named_errors(path):
        is_pftrace = _pftrace.read(path, None) is not None  # its first bytes say
    if not is_pftrace:
        try:
            return _streamed(path, os.fspath(root), chunk)
        except _Restart:
            pass
    trace = load(path)
    if isinstance(trace, MergedTrace):
        raise ValueError(f"{path}: {MERGED}")
    return write_dataset(trace, root)


def _streamed(path: str, root: str, chunk: int) -> int:
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of new objects, no cycles: no collections meanwhile
    sink: Optional[_Chunked] = None

    def make(plan: _Plan) -> _Chunked:
        nonlocal sink
        if plan.merged:
            raise _Bad(MERGED)
        sink = _Chunked(plan, root, chunk)
        return sink
    try:
        with _named_errors(path):
            try:
                trace = load_chrome(path, None, make)
                assert sink is not None
                return sink.finish(trace)
            finally:
                if sink is not None:
                    sink.close()
    finally:
        if gc_was_enabled:
            gc.enable()


class _Chunked(_ChromeEvents):
    """The loader's sink, its calls written every chunk events."""

    def __init__(self, plan: _Plan, root: str, chunk: int) -> None:
        super().__init__(plan)
        self.root, self.chunk = root, max(1, chunk)
        self.carried_ids: list[int] = []  # the global id of calls[i], i < len(carried_ids)
        self.carried_parents: list[Optional[int]] = []  # and of its parent
        self.children_ns: dict[int, int] = {}  # carried id -> its children's durs written
        self.next_id = 0
        self.per_serial: dict[int, int] = {}
        self.seen: dict[int, tuple] = {}
        self.facts: Any = None  # what the chunks were made with
        self.file: Any = None  # (the row_groups context, its write)
        self.writer: Any = None
        self.step_records: list = []

    def c_fast(self) -> Any:
        c = super().c_fast()
        if c is None:
            return None

        def fast(buf: str, pos: int, stop: int) -> tuple[int, int, int]:
            taken = c(buf, pos, stop)
            if len(self.calls) >= self.chunk:
                self.flush()
            return taken
        return fast

    def on_event(self, ev: Any, key: Optional[str] = None) -> None:
        super().on_event(ev, key)
        if len(self.calls) >= self.chunk:
            self.flush()

    def _facts(self, trace: Any) -> tuple:
        """(job, what the rows depend on besides the events)."""
        from .export import _prepare

        job = _prepare(trace, self.root, "convert")
        names = {t.serial: t.name for t in trace.threads}
        return job, (job.pid, trace_rank(trace), trace.cycle, names,
                     [(s.step, s.start_ns, s.end_ns) for s in job.steps])

    def flush(self, last: bool = False) -> None:
        calls = self.calls
        if not calls:
            return
        if self.facts is None:
            trace = _chrome_trace(self)
            job, self.facts = self._facts(trace)
            self.step_records = job.steps
            pid, rank, cycle = self.facts[:3]
            self.writer = Writer(self.root, rank, cycle, pid)
        pa = self.writer.pa
        import pyarrow.compute as pc

        pid, names = self.facts[0], self.facts[3]
        table, seen = events_table(self.writer, calls, names, self.step_records, pid)
        for t in seen:
            self.seen.setdefault(t[2], t)
        n, k = len(calls), len(self.carried_ids)
        ids = self.carried_ids + list(range(self.next_id, self.next_id + n - k))
        self.next_id += n - k
        id_a = pa.array(ids, type=pa.int64())
        local = table.column("parent")
        parent = pc.take(id_a, local)
        if k:
            parent = pa.concat_arrays([pa.array(self.carried_parents, type=pa.int64()),
                                       parent.combine_chunks()[k:]])
            earlier = pa.array([self.children_ns.pop(i, 0) for i in self.carried_ids] +
                               [0] * (n - k), type=pa.int64())
            self_ns = pc.subtract(table.column("self_ns"), earlier)
        else:
            self_ns = table.column("self_ns")
        table = (table.set_column(table.schema.get_field_index("id"), "id", id_a)
                 .set_column(table.schema.get_field_index("parent"), "parent", parent)
                 .set_column(table.schema.get_field_index("self_ns"), "self_ns", self_ns))
        still_open = [] if last else sorted({i for _, stack in self.threads.values()
                                             for i in stack})
        if still_open:
            keep = [True] * n
            for i in still_open:
                keep[i] = False
            for i in still_open:  # its children's durs met so far, for its self time
                self.children_ns[ids[i]] = (calls[i].end_ns - calls[i].start_ns
                                            - self_ns[i].as_py())
            table = table.filter(pa.array(keep))
        if self.file is None:
            ctx = self.writer.row_groups("events", table.schema)
            self.file = (ctx, ctx.__enter__())
        for batch in table.to_batches():
            self.file[1](batch)
        for serial, rows in events_per_thread(table).items():
            self.per_serial[serial] = self.per_serial.get(serial, 0) + rows
        # The open calls start the next chunk, each with its parent's new
        # index (-1 in the Event: its dur is already its parent's).
        new = {old: i for i, old in enumerate(still_open)}
        self.carried_parents = [parent[i].as_py() for i in still_open]
        self.carried_ids = [ids[i] for i in still_open]
        carried = [_without_parent(calls[i]) for i in still_open]
        calls[:] = carried  # the same list: the reader's C path holds it
        for _, stack in self.threads.values():
            stack[:] = [] if last else [new[i] for i in stack]

    def finish(self, trace: Any) -> int:
        """Writes the last chunk and the other tables; the events count."""
        self.flush(last=True)
        if self.facts is None:  # no call at all
            return write_dataset(trace, self.root)
        job, facts = self._facts(trace)
        if facts != self.facts:
            raise _Restart()
        ctx, self.file = self.file[0], None
        ctx.__exit__(None, None, None)  # the events file in place
        write_small_tables(self.writer, job, self.per_serial, self.seen.values())
        return self.next_id

    def close(self) -> None:
        """The events file dropped if it was not completed."""
        if self.file is not None:
            ctx, self.file = self.file[0], None
            ctx.__exit__(_Restart, _Restart(), None)


def _without_parent(e: Any) -> Any:
    return Event((e.name, e.filename, e.lineno, e.kind, e.thread_id, e.native_thread_id,
                  e.start_ns, e.end_ns, e.depth, -1, e.open_at_start, e.open_at_stop,
                  e.thread_serial, e.open_at_loss))
