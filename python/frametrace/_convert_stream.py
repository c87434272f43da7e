"""``frametrace convert``'s one file: a Chrome JSON trace into a dataset
with a bounded number of its events in memory.

The loader's reader (``loader.load_chrome``) streams the file into a sink
whose calls go to C (``_tracer._ChromeColumns``): the lines write_chrome
writes are parsed there straight into the events table's columns (the
GIL released), the others are parsed by the reader and added one by one;
both are nested there as the loader nests them.  Every ``chunk`` calls,
the rows of those no longer open are written as a row group (on a second
thread, while the next chunk is parsed); open calls stay, at most a
stack's depth per thread, so ids, parents, depths, self times and
``outermost`` are what the whole file gives.  The chunks need the steps and
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
from ._dataset import (Writer, events_columns_table, events_per_thread, trace_rank,
                       write_dataset, write_small_tables)
from ._reader import Progress, _Bad, _named_errors
from ._tracer import _ChromeColumns
from .loader import MergedTrace, _chrome_trace, _ChromeEvents, _Plan, load, load_chrome

# Events parsed per chunk: each chunk's row group is written on the other
# core while the next is parsed, so the smaller the chunk, the sooner both
# cores are busy (the wall time of a file of 1.5M events is 40% less with
# 128Ki than with 1Mi); as small as DuckDB's own row groups (122,880 rows).
CHUNK = 1 << 17
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
    """The loader's sink, its calls written every chunk calls."""

    def __init__(self, plan: _Plan, root: str, chunk: int) -> None:
        super().__init__(plan)
        self.root, self.chunk = root, max(1, chunk)
        self.columns = _ChromeColumns()
        self.funcs: dict[tuple, int] = {}  # (name, filename, lineno, kind) -> number
        self.func_list: list[tuple] = []
        self.thread_list: list[tuple] = []  # (thread_id, native_thread_id, serial) by number
        self.thread_numbers: dict[tuple, int] = {}  # thread_list's item -> its number
        self.per_serial: dict[int, int] = {}
        self.facts: Any = None  # what the chunks were made with
        self.file: Any = None  # (the row_groups context, its write)
        self.writer: Any = None
        self.step_records: list = []
        self.pool = ThreadPoolExecutor(1)  # no thread before a chunk is written
        self.pending: Any = None
        # Rows held when the next chunk is written: chunk more than the
        # open calls (a stack deeper than a chunk is not written each call).
        self.flush_at = self.chunk

    def c_fast(self) -> Any:
        if super().c_fast() is None:  # the loader's C path turned off
            return None
        parse, plan = self.columns.parse, self.plan

        def fast(buf: str, pos: int, stop: int) -> tuple[int, int, int]:
            while True:
                pos, start, end, taken, full = parse(buf, pos, stop, plan.origin,
                                                     plan.earliest_stop, self.flush_at)
                self.n += taken
                if not full:
                    return pos, start, end
                self.flush()
        return fast

    def thread(self, pid: int, tid: int) -> tuple[tuple[int, int, int], list[int]]:
        thread = super().thread(pid, tid)
        if thread[0] not in self.thread_numbers:
            self.thread_numbers[thread[0]] = self.columns.thread(pid, tid)
            self.thread_list.append(thread[0])
        return thread

    def place(self, thread: tuple, info: tuple, ts: int, end: int, flags: tuple,
              key: Optional[str]) -> None:
        number = self.funcs.get(info)
        if number is None:
            number = self.funcs[info] = len(self.func_list)
            self.func_list.append(info)
            self.columns.function(key, info[3] == "c", number)
        elif key is not None:  # parse() takes this function's next lines
            self.columns.function(key, info[3] == "c", number)
        self.columns.add(number, self.thread_numbers[thread[0]], ts, end, *flags)
        if self.columns.counts()[0] >= self.flush_at:
            self.flush()

    def _facts(self, trace: Any) -> tuple:
        """(job, what the rows depend on besides the events)."""
        from .export import _prepare

        job = _prepare(trace, self.root, "convert")
        names = {t.serial: t.name for t in trace.threads}
        return job, (job.pid, trace_rank(trace), trace.cycle, names,
                     [(s.step, s.start_ns, s.end_ns) for s in job.steps])

    def flush(self, last: bool = False) -> None:
        """Writes the rows of the calls no longer open (all if last)."""
        if self.facts is None:
            if not self.columns.counts()[1]:
                return
            trace = _chrome_trace(self)
            job, self.facts = self._facts(trace)
            self.step_records = job.steps
            pid, rank, cycle = self.facts[:3]
            self.writer = Writer(self.root, rank, cycle, pid)
        flushed = self.columns.flush(last)
        self.flush_at = self.columns.counts()[0] + self.chunk
        if not flushed[0]:
            return
        # Made into a table and written on the other core while the next
        # chunk is parsed (pyarrow and parse() let go of the GIL); one chunk
        # at a time waits for it.
        self._wait()
        self.pending = self.pool.submit(self._write, flushed, self.func_list[:],
                                        self.thread_list[:])

    def _write(self, flushed: tuple, funcs: list, threads: list) -> None:
        """On the writer's thread: flushed's rows as a row group."""
        table = self._table(flushed, funcs, threads)
        if self.file is None:
            ctx = self.writer.row_groups(table.schema)
            self.file = (ctx, ctx.__enter__())
        for batch in table.to_batches():
            self.file[1](batch)
        for serial, rows in events_per_thread(table).items():
            self.per_serial[serial] = self.per_serial.get(serial, 0) + rows

    def _table(self, flushed: tuple, funcs: list, threads: list) -> Any:
        """The events table of columns.flush()'s rows, of functions funcs
        and threads threads (func_list and thread_list as they were)."""
        n, ids, start, end, parent, valid, self_ns, depth, func, thread, oas, oast, outer = flushed
        pa = self.writer.pa
        import pyarrow.compute as pc

        def column(kind: Any, data: bytes, validity: Optional[bytes] = None) -> Any:
            return pa.Array.from_buffers(kind, n, [None if validity is None
                                                   else pa.py_buffer(validity),
                                                   pa.py_buffer(data)])
        i64, i32, b = pa.int64(), pa.int32(), pa.bool_()
        columns = {"id": column(i64, ids), "start_ns": column(i64, start),
                   "end_ns": column(i64, end), "parent": column(i64, parent, valid),
                   "self_ns": column(i64, self_ns), "depth": column(i32, depth),
                   "open_at_start": column(b, oas), "open_at_stop": column(b, oast),
                   "outermost": column(b, outer)}
        columns["dur_ns"] = pc.subtract(columns["end_ns"], columns["start_ns"])
        names = self.facts[3]
        return events_columns_table(self.writer, columns, column(i32, func),
                                    column(i32, thread), funcs, threads,
                                    names, self.step_records, self.facts[0])

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
        write_small_tables(self.writer, job, self.per_serial, self.thread_list)
        count: int = self.columns.counts()[1]
        return count

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
