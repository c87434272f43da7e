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
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from . import _pftrace
from ._dataset import (Writer, events_per_thread, events_table, trace_rank, write_dataset,
                       write_small_tables)
from ._reader import Progress, _Bad, _named_errors
from ._tracer import Event
from .loader import MergedTrace, _chrome_trace, _ChromeEvents, _Plan, load, load_chrome

CHUNK = 1 << 20  # events held at a time
MERGED = "a merged trace of several processes: convert the files it merged"


class _Restart(Exception):
    """What the written chunks were made with changed later in the file."""


def convert_file(path: Any, root: Any, *, chunk: int = CHUNK, progress: Progress = None) -> int:
    """Adds the trace of the file at path to the dataset at root; returns
    how many Python/C events were written.  progress as load() calls it."""
    path = os.fspath(path)
    with _named_errors(path):
        is_pftrace = _pftrace.read(path, None) is not None  # its first bytes say
    if not is_pftrace:
        try:
            return _streamed(path, os.fspath(root), chunk, progress)
        except _Restart:
            pass
    trace = load(path, progress=progress)
    if isinstance(trace, MergedTrace):
        raise ValueError(f"{path}: {MERGED}")
    return write_dataset(trace, root)


def _streamed(path: str, root: str, chunk: int, progress: Progress) -> int:
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
                trace = load_chrome(path, progress, make)
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
        self.ids: Any = None
        self.pool = ThreadPoolExecutor(1)  # no thread before a chunk is written
        self.pending: Any = None

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
        """Writes the calls but those still open (all if last), which
        start the next chunk."""
        calls = self.calls
        if not calls:
            return
        if self.facts is None:
            trace = _chrome_trace(self)
            job, self.facts = self._facts(trace)
            self.step_records = job.steps
            pid, rank, cycle = self.facts[:3]
            self.writer = Writer(self.root, rank, cycle, pid)
        still_open = [] if last else sorted({i for _, stack in self.threads.values()
                                             for i in stack})
        table, parents = self._table(still_open)
        if self.file is None:
            ctx = self.writer.row_groups(table.schema)
            self.file = (ctx, ctx.__enter__())
        # Written on the other core while the next chunk is read (pyarrow
        # lets go of the GIL); one chunk at a time waits for it.
        self._wait()
        self.pending = self.pool.submit(_write, self.file[1], table)
        for serial, rows in events_per_thread(table).items():
            self.per_serial[serial] = self.per_serial.get(serial, 0) + rows
        # The open calls start the next chunk, each with its parent's new
        # index (the stacks the outermost column is marked from).
        new = {old: i for i, old in enumerate(still_open)}
        self.carried_parents = parents
        self.carried_ids = [self.ids[i] for i in still_open]
        calls[:] = [_with_parent(calls[i], new.get(calls[i].parent, -1))
                    for i in still_open]  # the list the C path holds
        for _, stack in self.threads.values():
            stack[:] = [] if last else [new[i] for i in stack]

    def _table(self, still_open: list) -> tuple[Any, list]:
        """The chunk's rows but still_open's, with their ids in the file,
        and the parent ids of still_open."""
        pa = self.writer.pa
        import pyarrow.compute as pc

        calls, pid, names = self.calls, self.facts[0], self.facts[3]
        table, seen = events_table(self.writer, calls, names, self.step_records, pid)
        for t in seen:
            self.seen.setdefault(t[2], t)
        n, k = len(calls), len(self.carried_ids)
        # Local index i is id carried_ids[i] below k, else next_id + i - k.
        first = self.next_id - k
        self.next_id += n - k
        self.ids = _Ids(self.carried_ids, first)
        local_id = table.column("id")
        id_a = pc.add(local_id, first)
        parent = pc.add(table.column("parent"), first)
        self_ns = table.column("self_ns")
        if k:
            carried = pa.array(self.carried_ids, type=pa.int64())
            id_a = pa.chunked_array([carried, id_a.slice(k)])
            # A child's parent is carried when it is on a stack: below k.
            local = table.column("parent")
            low = pc.less(local, k)
            parent = pc.if_else(low, pc.take(carried, pc.if_else(low, local, 0)), parent)
            parent = pa.chunked_array([pa.array(self.carried_parents, type=pa.int64()),
                                       parent.slice(k)])
            earlier = [self.children_ns.pop(i, 0) for i in self.carried_ids]
            self_ns = pa.chunked_array([pc.subtract(self_ns.slice(0, k),
                                                    pa.array(earlier, type=pa.int64())),
                                        self_ns.slice(k)])
        columns = {"id": id_a, "parent": parent, "self_ns": self_ns}
        for name, column in columns.items():
            table = table.set_column(table.schema.get_field_index(name), name, column)
        parents = [parent[i].as_py() for i in still_open]
        if still_open:
            for i in still_open:  # its children's durs met so far, for its self time
                self.children_ns[self.ids[i]] = (calls[i].end_ns - calls[i].start_ns
                                                 - self_ns[i].as_py())
            for i in still_open:  # but a carried child's: subtracted again next chunk
                up = self.ids[calls[i].parent] if calls[i].parent >= 0 else None
                if up in self.children_ns:
                    self.children_ns[up] -= calls[i].end_ns - calls[i].start_ns
            table = table.filter(pc.invert(pc.is_in(local_id, pa.array(still_open,
                                                                       type=pa.int64()))))
        return table, parents

    def _wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()

    def finish(self, trace: Any) -> int:
        """Writes the last chunk and the other tables; the events count."""
        self.flush(last=True)
        if self.facts is None:  # no call at all
            return write_dataset(trace, self.root)
        job, facts = self._facts(trace)
        if facts != self.facts:
            raise _Restart()
        self._wait()
        ctx, self.file = self.file[0], None
        ctx.__exit__(None, None, None)  # the events file in place
        write_small_tables(self.writer, job, self.per_serial, self.seen.values())
        return self.next_id

    def close(self) -> None:
        """The events file dropped if it was not completed."""
        try:
            self._wait()
        except Exception:
            pass  # the error the caller has is the one it raises
        self.pool.shutdown()
        if self.file is not None:
            ctx, self.file = self.file[0], None
            ctx.__exit__(_Restart, _Restart(), None)


class _Ids:
    """A chunk's ids by local index: carried[i] below len(carried), else
    first + i."""

    def __init__(self, carried: list, first: int) -> None:
        self.carried, self.first = carried, first

    def __getitem__(self, i: int) -> int:
        return self.carried[i] if i < len(self.carried) else self.first + i


def _write(write: Any, table: Any) -> None:
    for batch in table.to_batches():
        write(batch)


def _with_parent(e: Any, parent: int) -> Any:
    return Event((e.name, e.filename, e.lineno, e.kind, e.thread_id, e.native_thread_id,
                  e.start_ns, e.end_ns, e.depth, parent, e.open_at_start, e.open_at_stop,
                  e.thread_serial, e.open_at_loss))
