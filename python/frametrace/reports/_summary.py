"""The summary table: per function calls, total, self and mean time and
share of the traced time (per thread on request), and torch's ops'."""
from __future__ import annotations

import sys
from typing import IO, Any, Mapping, NamedTuple, Optional

from ._pass import (_check_choice, _check_limit, _display, _Functions, _ms, _Names,
                    _shared_idents, _source, _thread_names)
from ._waits import is_wait

SORT_KEYS: tuple[str, ...] = ("self", "total", "calls", "mean", "name")
"""The orders ``summary(sort=...)`` knows: self, total and mean time and
calls descending; name ascending."""


class SummaryRow(NamedTuple):
    """One function of a summary.  Times in nanoseconds; share is a fraction
    (0.25 for 25%) of the table's traced time; thread_id is None in a table
    of all threads."""

    name: str
    filename: str
    lineno: int
    kind: str
    thread_id: Any
    calls: int
    primitive_calls: int
    """Calls that were not recursive: the function was not already on the stack."""
    total_ns: int
    self_ns: int
    mean_ns: float
    share: float
    capped: bool
    thread_serial: Any = None
    """The thread's thread_serial in a per-thread table (None: all threads,
    or events with no serial)."""
    wait: bool = False
    """A C call that blocks (``reports.WAIT_CALLS``): its time is waiting,
    not work; ``[wait]`` in the text table."""

    @property
    def function(self) -> str:
        """"name (file:line)" for Python functions, "name" for C functions."""
        return _display(self.name, self.filename, self.lineno, self.kind)


class _ThreadTables(dict):
    """SummaryTable.threads: {thread_serial: table}; a thread_id also finds
    its thread's table where one thread only had that id."""

    def __missing__(self, key: Any) -> "SummaryTable":
        found = [t for t in self.values() if t.thread_id == key and t.thread_serial is not None]
        if len(found) == 1:
            return found[0]
        raise KeyError(key)


class SummaryTable:
    """The result of ``summary()``: ``rows`` (``SummaryRow``s, sorted and
    limited), ``str(table)`` an aligned text table, ``table.print()``.

    ``traced_ns``: the shares' denominator, summed over ``thread_count``
    threads; ``wall_ns``: the trace's wall time; ``functions`` and
    ``calls``: counts before the limit.  With ``per_thread=True``,
    ``threads`` maps each thread's thread_serial (its thread_id for events
    with no serial) to its own table, whose ``thread_id``,
    ``thread_serial`` and ``thread_name`` say which thread
    (``threads[thread_id]`` also finds the one thread that had that id),
    and ``rows`` is their rows, thread after thread.  What the numbers
    mean: :doc:`/viewing`, "The summary"."""

    def __init__(self, rows: list[SummaryRow], *, traced_ns: int, functions: int, calls: int,
                 sort: str, limit: Optional[int], thread_id: Any = None,
                 thread_name: Optional[str] = None,
                 threads: Optional[dict[Any, "SummaryTable"]] = None):
        self.rows = rows
        self.traced_ns = traced_ns
        self.functions = functions
        self.calls = calls
        self.sort = sort
        self.limit = limit
        self.thread_id = thread_id
        self.thread_serial: Any = None
        self.ident_shared = False  # another thread of the events had this thread_id
        self.thread_name = thread_name
        self.threads: dict[Any, SummaryTable] = threads if threads is not None else {}
        self.thread_count = 1
        """How many threads the traced time is summed over."""
        self.wall_ns: Optional[int] = None
        """The trace's wall time (its tracer's start to stop), when known."""
        self.ops: Any = None
        """The op table (``frametrace.op_table.OpTable``) of a Trace with
        torch's ops, printed after the functions; else None."""

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Any:
        return iter(self.rows)

    def __repr__(self) -> str:
        n = len(self.threads)
        per = f", {n} thread{'s' if n != 1 else ''}" if n else ""
        return (f"<SummaryTable {len(self.rows)} of {self.functions} functions, "
                f"sort={self.sort!r}{per}>")

    def __str__(self) -> str:
        ops = [str(self.ops)] if self.ops is not None else []
        if self.threads:
            n = len(self.threads)
            parts = [f"{n} thread{'s' if n != 1 else ''}, {self.calls} calls, "
                     f"{self._traced_text()}"]
            for table in self.threads.values():
                parts.append(table._render())
            return "\n\n".join(parts + ops)
        return "\n\n".join([self._render()] + ops)

    def print(self, file: Optional[IO[str]] = None) -> None:
        """Prints the table (to sys.stdout by default)."""
        print(str(self), file=file if file is not None else sys.stdout)

    def _traced_text(self) -> str:
        """What the shares are of: one thread's time, or the sum of several
        threads' (more than the wall time when they ran at once)."""
        if self.thread_count <= 1:
            return f"{_ms(self.traced_ns)} ms traced (its outermost calls' time)"
        wall = f" in {_ms(self.wall_ns)} ms of wall time" if self.wall_ns is not None else ""
        return (f"{_ms(self.traced_ns)} ms of thread time (each thread's outermost calls, "
                f"summed over {self.thread_count} threads){wall}")

    def _render(self) -> str:
        lines = []
        if self.thread_id is not None:
            named = f" ({self.thread_name})" if self.thread_name else ""
            which = (f" #{self.thread_serial}"
                     if self.ident_shared and self.thread_serial is not None else "")
            lines.append(f"thread {self.thread_id}{which}{named}")
        shown = (f"; top {len(self.rows)} shown" if len(self.rows) < self.functions else "")
        lines.append(f"{self.functions} functions, {self.calls} calls, {self._traced_text()}; "
                     f"sorted by {self.sort}{shown}")
        header = ("calls", "total ms", "self ms", "mean ms", "share", "function")
        body = [
            (str(r.calls), _ms(r.total_ns), _ms(r.self_ns), _ms(r.mean_ns),
             f"{r.share * 100:.1f}%",
             ("* " if r.capped else "  ") + r.function + (" [wait]" if r.wait else ""))
            for r in self.rows
        ]
        widths = [max(len(header[c]), *(len(row[c]) for row in body)) if body else len(header[c])
                  for c in range(5)]

        def fmt_row(cells: tuple[str, ...]) -> str:
            return "  ".join([cells[c].rjust(widths[c]) for c in range(5)] + [cells[5]]).rstrip()

        lines.append(fmt_row(header[:5] + ("  " + header[5],)))
        lines.extend(fmt_row(row) for row in body)
        if not body:
            lines.append("(no events)")
        if any(r.capped for r in self.rows):
            lines.append("* capped: still running when the tracer stopped; its time is cut "
                         "at the stop")
        if any(r.wait for r in self.rows):
            lines.append("[wait]: blocked in a lock, sleep, select or join: waiting, not work "
                         "(before 3.14, a wait in \"with lock:\" is the caller's self time)")
        return "\n".join(lines)


_SORTERS = {
    "self": lambda r: (-r.self_ns, r.name, r.filename, r.lineno, r.kind),
    "total": lambda r: (-r.total_ns, r.name, r.filename, r.lineno, r.kind),
    "calls": lambda r: (-r.calls, r.name, r.filename, r.lineno, r.kind),
    "mean": lambda r: (-r.mean_ns, r.name, r.filename, r.lineno, r.kind),
    "name": lambda r: (r.name, r.filename, r.lineno, r.kind),
}


def _table(acc: dict[tuple[Any, ...], list[Any]], traced: int, sort: str, limit: Optional[int],
           thread_id: Any, thread_name: Optional[str], thread_serial: Any = None) -> SummaryTable:
    rows = []
    ncalls = 0
    for (name, filename, lineno, kind), (calls, prim, total, self_ns, capped) in acc.items():
        ncalls += calls
        rows.append(SummaryRow(name, filename, lineno, kind, thread_id, calls, prim, total,
                               self_ns, total / calls if calls else 0.0,
                               self_ns / traced if traced else 0.0, capped, thread_serial,
                               is_wait(name, kind)))
    rows.sort(key=_SORTERS[sort])
    functions = len(rows)
    if limit is not None:
        del rows[limit:]
    return SummaryTable(rows, traced_ns=traced, functions=functions, calls=ncalls, sort=sort,
                        limit=limit, thread_id=thread_id, thread_name=thread_name)


def summary(trace: Any, *, sort: str = "self", limit: Optional[int] = 30,
            per_thread: bool = False,
            thread_names: Optional[Mapping[Any, str]] = None,
            group_by_input_shape: bool = False) -> SummaryTable:
    """The ``SummaryTable`` of a trace (a Trace, or what ``as_trace()``
    takes): calls, total, self and mean time, share, capped and wait per
    function ``(name, filename, lineno, kind)``; what they mean:
    :doc:`/viewing`, "The summary".

    sort: "self" (default), "total", "calls", "mean" (descending) or "name"
    (ascending); ties by name, file, line.  limit: at most this many rows
    (None: all).  per_thread: one table per thread in ``table.threads``,
    each sorted and limited on its own.  thread_names ({thread_id: name};
    default: a Trace's threads' own) label the threads.
    group_by_input_shape: a row per op and input shapes in the table of
    torch's ops, ``table.ops`` (``frametrace.op_table.op_table``, of all
    threads, with the same sort and limit), which a Trace with torch's ops
    (``frametrace.torch``) gets.

    Raises ValueError for an unknown sort or a negative limit, TypeError
    for arguments of the wrong type or a trace without a list of events.
    """
    from ..op_table import has_ops, op_table

    sort = _check_choice("sort", sort, SORT_KEYS)
    limit = _check_limit(limit)
    if not isinstance(group_by_input_shape, bool):
        raise TypeError(f"group_by_input_shape must be a bool, not "
                        f"{type(group_by_input_shape).__name__}")
    trace, evs, default_names = _source(trace)
    table = _summary(evs, _thread_names(default_names, thread_names), sort, limit, per_thread)
    start, stop = getattr(trace, "tracer_start_ns", None), getattr(trace, "tracer_stop_ns", None)
    if type(start) is int and type(stop) is int and stop >= start:
        table.wall_ns = stop - start
    if has_ops(trace):
        table.ops = op_table(trace, sort=sort, limit=limit,
                             group_by_input_shape=group_by_input_shape)
    return table


def _summary(evs: Any, names: _Names, sort: str, limit: Optional[int],
             per_thread: bool) -> SummaryTable:
    fs = _Functions(evs)
    keys, calls, prim, totals, selfs, capped = fs.keys, fs.calls, fs.prim, fs.totals, fs.selfs, fs.capped
    if per_thread:
        per: dict[Any, dict[tuple[Any, ...], list[Any]]] = {tk: {} for tk in fs.threads}
        for fid, key in enumerate(keys):
            per[key[4]][key[:4]] = [calls[fid], prim[fid], totals[fid], selfs[fid], capped[fid]]
        shared = _shared_idents(fs.idents)
        tables = _ThreadTables()
        for tk, tacc in per.items():
            tid = fs.idents[tk]
            serial = tk if tk != tid else None
            table = _table(tacc, fs.roots.get(tk, 0), sort, limit, tid,
                           names.of(tk, tid, tid in shared), serial)
            table.thread_serial = serial
            table.ident_shared = tid in shared
            tables[tk] = table
        whole = SummaryTable([r for t in tables.values() for r in t.rows],
                             traced_ns=sum(fs.roots.values()),
                             functions=len({k[:4] for k in keys}), calls=sum(calls), sort=sort,
                             limit=limit, threads=tables)
        whole.thread_count = len(fs.threads)
        return whole
    acc: dict[tuple[Any, ...], list[Any]] = {}
    for fid, key in enumerate(keys):
        a = acc.get(key[:4])
        if a is None:
            acc[key[:4]] = [calls[fid], prim[fid], totals[fid], selfs[fid], capped[fid]]
        else:
            a[0] += calls[fid]
            a[1] += prim[fid]
            a[2] += totals[fid]
            a[3] += selfs[fid]
            a[4] = a[4] or capped[fid]
    table = _table(acc, sum(fs.roots.values()), sort, limit, None, None)
    table.thread_count = len(fs.threads)
    return table
