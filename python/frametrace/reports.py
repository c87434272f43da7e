"""Reports of a trace: a per-function summary table, pstats files, collapsed
stacks and a flame graph.

    from frametrace import reports

    with frametrace.trace() as tracer:
        train_step()
    events = tracer.getEvents()

    reports.summary(events).print()                  # top 30 functions by self time
    reports.write_pstats(events, "step.pstats")      # pstats.Stats("step.pstats"), snakeviz
    reports.write_collapsed(events, "step.folded")   # flamegraph.pl, speedscope
    reports.write_flamegraph_svg(events, "step.svg")

Every function takes the list ``Tracer.getEvents()`` returns (or any
sequence of 14-field event tuples in the same order: each thread's events in
call order, parents before their children, ``parent`` the index of the
parent event in the same sequence), or a ``frametrace.Trace``, whose
``events`` (and ``threads``' names) are used.  Each makes a single pass over the
events, keeping a few integers per event.

Conventions shared by every report:

- A function is ``(name, filename, lineno, kind)``: frametrace's qualified
  name (``co_name`` on 3.10), where its code is, and "py" or "c".
- Every event is one call, including events flagged ``open_at_start`` (they
  were already running when tracing began, and start at the tracer's start)
  and each resume-to-yield slice of a generator (as cProfile counts them).
- Self time is an event's duration minus the durations of its direct
  children.  Total (inclusive) time counts a function's time once per
  outermost activation on a thread's stack: a recursive call inside an
  activation of the same function adds no total time (cProfile's
  ``cumtime``).
- The traced time, the denominator of every share, is the sum of the
  durations of the root events (``parent == -1``) over all threads (over the
  one thread for a per-thread table): the time the trace covers on each
  thread, added up.
- A function is *capped* when one of its events was still running at the
  tracer's stop (``open_at_stop``): its time ends at the stop, shorter than
  the real call.
"""
from __future__ import annotations

import marshal
import os
import re
import sys
import types
import zlib
from typing import IO, Any, Iterable, Iterator, Mapping, NamedTuple, Optional, Sequence, Union

from . import _tracer
from ._output import open_output

__all__ = [
    "SORT_KEYS",
    "SummaryRow",
    "SummaryTable",
    "collapsed_stacks",
    "pstats_label",
    "summary",
    "write_collapsed",
    "write_flamegraph_svg",
    "write_pstats",
]

PathLike = Union[str, "os.PathLike[str]"]

SORT_KEYS: tuple[str, ...] = ("self", "total", "calls", "mean", "name")
"""The orders ``summary(sort=...)`` knows: self, total and mean time and
calls descending; name ascending."""

_WEIGHTS = ("self", "calls")


# ---- input ------------------------------------------------------------------


class _Names:
    """The threads' names of a report: a Trace's own per thread (by
    thread_serial, Trace.threads) and the caller's (by thread_id).  A name
    by thread_id names a thread only where no other thread of the events
    had that id (CPython reuses idents)."""

    def __init__(self, serial: dict[int, str]) -> None:
        self.serial = serial
        self.given: dict[Any, str] = {}

    def of(self, key: Any, tid: Any, shared: bool) -> Optional[str]:
        if not shared and tid in self.given:
            return self.given[tid]
        return self.serial.get(key)


def _thread_key(serial: Any, tid: Any) -> Any:
    """How the reports tell threads apart: thread_serial, or thread_id for an
    event with none (0)."""
    return serial if serial else tid


def _source(events: Any) -> tuple[Sequence[Any], _Names]:
    """(events, thread names) of a list of events or a Trace."""
    names = _Names({})
    if not isinstance(events, (list, tuple)) and hasattr(events, "events"):
        for t in getattr(events, "threads", None) or ():
            try:
                serial, name = t[0], t[3]
            except (TypeError, IndexError, KeyError):
                continue
            if type(serial) is int and serial > 0 and isinstance(name, str):
                names.serial[serial] = name
        events = events.events
    if isinstance(events, (str, bytes)) or not isinstance(events, Iterable):
        raise TypeError(f"events must be a list of frametrace.Event (tracer.getEvents()) "
                        f"or a frametrace.Trace, not {type(events).__name__}")
    if type(events) not in (list, tuple):
        events = list(events)
    return events, names


def _thread_names(default: _Names, given: Optional[Mapping[Any, str]]) -> _Names:
    if given is None:
        return default
    if not isinstance(given, Mapping):
        raise TypeError(f"thread_names must be a mapping {{thread_id: name}}, not {type(given).__name__}")
    default.given = dict(given)
    return default


def _shared_idents(idents: Mapping[Any, Any]) -> set:
    """The thread_ids that several threads (thread keys) of the events had."""
    seen: set = set()
    shared: set = set()
    for tid in idents.values():
        (shared if tid in seen else seen).add(tid)
    return shared


def _pass(events: Sequence[Any], mode: int) -> tuple[Any, ...]:
    """The one pass over the events, in C (mode 0: by call path, 1: by
    function, 2: and by caller -> callee pair): its columns.  Its numbers
    are memoryviews of packed int64 or int32 (a few bytes a value, not an
    int object each); a sums column where a sum passed int64 is a list of
    ints.  TypeError or ValueError naming the event for events that are
    not getEvents()'s."""
    return _tracer._report_pass(events, mode)


def _display(name: str, filename: str, lineno: int, kind: str) -> str:
    """"name (file:line)" for Python functions, "name" for C functions."""
    return name if kind == "c" else f"{name} ({filename}:{lineno})"


# ---- the function pass --------------------------------------------------------


class _Functions:
    """Per (function, thread) numbers, from one pass over the events.  With
    edges, also per (caller, callee) pair, cProfile-style."""

    def __init__(self, events: Sequence[Any], edges: bool = False):
        (self.keys, self.calls, self.prim, self.selfs, self.totals, self.capped,
         self.threads, thread_ids, self.roots, self.ecallers, self.ecallees, self.enc,
         self.epc, self.ett, self.ect) = _pass(events, 2 if edges else 1)
        self.idents = dict(zip(self.threads, thread_ids))


# ---- summary ------------------------------------------------------------------


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

    @property
    def function(self) -> str:
        """"name (file:line)" for Python functions, "name" for C functions."""
        return _display(self.name, self.filename, self.lineno, self.kind)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


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

    ``traced_ns`` is the share denominator (sum of root durations),
    ``functions`` and ``calls`` count every function and call before the
    limit.  With ``per_thread=True``, ``threads`` maps each thread's
    thread_serial (its thread_id for events with no serial) to its own table
    (sorted and limited on its own, shares of that thread's traced time;
    ``thread_id``, ``thread_serial`` and ``thread_name`` say which thread),
    and ``rows`` is their rows, thread after thread.  Threads that had the
    same thread_id (CPython reuses idents) are separate tables, labelled
    ``thread <id> #<serial>``; ``threads[thread_id]`` also finds the table
    of the one thread that had that id."""

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
        self.ops: Any = None
        """The op table (``frametrace.op_table.OpTable``) of a Trace with
        torch's ops, printed after the functions; else None."""

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Any:
        return iter(self.rows)

    def __repr__(self) -> str:
        per = f", {len(self.threads)} threads" if self.threads else ""
        return (f"<SummaryTable {len(self.rows)} of {self.functions} functions, "
                f"sort={self.sort!r}{per}>")

    def __str__(self) -> str:
        ops = [str(self.ops)] if self.ops is not None else []
        if self.threads:
            n = len(self.threads)
            parts = [f"{n} thread{'s' if n != 1 else ''}, {self.calls} calls, "
                     f"{_ms(self.traced_ns)} ms traced (sum of root durations)"]
            for table in self.threads.values():
                parts.append(table._render())
            return "\n\n".join(parts + ops)
        return "\n\n".join([self._render()] + ops)

    def print(self, file: Optional[IO[str]] = None) -> None:
        """Prints the table (to sys.stdout by default)."""
        print(str(self), file=file if file is not None else sys.stdout)

    def _render(self) -> str:
        lines = []
        if self.thread_id is not None:
            named = f" ({self.thread_name})" if self.thread_name else ""
            which = (f" #{self.thread_serial}"
                     if self.ident_shared and self.thread_serial is not None else "")
            lines.append(f"thread {self.thread_id}{which}{named}")
        shown = (f"; top {len(self.rows)} shown" if len(self.rows) < self.functions else "")
        lines.append(f"{self.functions} functions, {self.calls} calls, {_ms(self.traced_ns)} ms "
                     f"traced (sum of root durations); sorted by {self.sort}{shown}")
        header = ("calls", "total ms", "self ms", "mean ms", "share", "function")
        body = [
            (str(r.calls), _ms(r.total_ns), _ms(r.self_ns), _ms(r.mean_ns),
             f"{r.share * 100:.1f}%", ("* " if r.capped else "  ") + r.function)
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
        return "\n".join(lines)


_SORTERS = {
    "self": lambda r: (-r.self_ns, r.name, r.filename, r.lineno, r.kind),
    "total": lambda r: (-r.total_ns, r.name, r.filename, r.lineno, r.kind),
    "calls": lambda r: (-r.calls, r.name, r.filename, r.lineno, r.kind),
    "mean": lambda r: (-r.mean_ns, r.name, r.filename, r.lineno, r.kind),
    "name": lambda r: (r.name, r.filename, r.lineno, r.kind),
}


def _check_limit(limit: Any) -> Optional[int]:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int >= 0 or None, not {type(limit).__name__}")
    if limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    return limit


def _check_choice(what: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{what} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def _table(acc: dict[tuple[Any, ...], list[Any]], traced: int, sort: str, limit: Optional[int],
           thread_id: Any, thread_name: Optional[str], thread_serial: Any = None) -> SummaryTable:
    rows = []
    ncalls = 0
    for (name, filename, lineno, kind), (calls, prim, total, self_ns, capped) in acc.items():
        ncalls += calls
        rows.append(SummaryRow(name, filename, lineno, kind, thread_id, calls, prim, total,
                               self_ns, total / calls if calls else 0.0,
                               self_ns / traced if traced else 0.0, capped, thread_serial))
    rows.sort(key=_SORTERS[sort])
    functions = len(rows)
    if limit is not None:
        del rows[limit:]
    return SummaryTable(rows, traced_ns=traced, functions=functions, calls=ncalls, sort=sort,
                        limit=limit, thread_id=thread_id, thread_name=thread_name)


def summary(events: Any, *, sort: str = "self", limit: Optional[int] = 30,
            per_thread: bool = False,
            thread_names: Optional[Mapping[Any, str]] = None,
            group_by_input_shape: bool = False) -> SummaryTable:
    """A table of the functions of a trace: calls, total (inclusive) time,
    self time, mean (total / calls), share and capped, per function
    ``(name, filename, lineno, kind)``.

    share is the function's **self time over the traced time, the sum of the
    root events' durations** (over all threads; over the thread in a
    per-thread table), so the shares of a full table add up to 100%.  Total
    time counts each outermost activation once (recursive calls inside it add
    nothing), like cProfile's cumtime.  capped: one of the function's events
    was still running at the tracer's stop, its time cut there (marked ``*``
    in the text table).

    sort: "self" (default), "total", "calls", "mean" (descending) or "name"
    (ascending); ties by name, file, line.  limit: at most this many rows
    (None: all).  per_thread: one table per thread in ``table.threads``,
    keyed by thread_serial (each OS thread its own, whatever the reuse of
    thread ids; each sorted, limited and shared on its own); ``table.rows``
    then holds their rows one thread after another, each with its thread_id
    and thread_serial.
    thread_names ({thread_id: name}; default: a Trace's threads' own) label
    the threads.

    A ``frametrace.Trace`` with torch's ops (``frametrace.torch``) also
    gets their table, ``table.ops`` (``frametrace.op_table.op_table``, of
    all threads, with the same sort and limit; a row per op and input
    shapes with group_by_input_shape), printed after the functions.
    """
    from .op_table import has_ops, op_table

    sort = _check_choice("sort", sort, SORT_KEYS)
    limit = _check_limit(limit)
    if not isinstance(group_by_input_shape, bool):
        raise TypeError(f"group_by_input_shape must be a bool, not "
                        f"{type(group_by_input_shape).__name__}")
    table = _summary(events, sort, limit, per_thread, thread_names)
    if has_ops(events):
        table.ops = op_table(events, sort=sort, limit=limit,
                             group_by_input_shape=group_by_input_shape)
    return table


def _summary(events: Any, sort: str, limit: Optional[int], per_thread: bool,
             thread_names: Optional[Mapping[Any, str]]) -> SummaryTable:
    evs, default_names = _source(events)
    names = _thread_names(default_names, thread_names)
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
        return SummaryTable([r for t in tables.values() for r in t.rows],
                            traced_ns=sum(fs.roots.values()),
                            functions=len({k[:4] for k in keys}), calls=sum(calls), sort=sort,
                            limit=limit, threads=tables)
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
    return _table(acc, sum(fs.roots.values()), sort, limit, None, None)


# ---- pstats -------------------------------------------------------------------

_c_labels: dict[str, str] = {}


def pstats_label(name: str, filename: str, lineno: int, kind: str, *,
                 qualnames: bool = False) -> tuple[str, int, str]:
    """The pstats key of a function, as cProfile makes it.

    Python functions: ``(filename, lineno, co_name)``; frametrace's name is
    the qualified name on 3.11+, so its last dotted part is used (the whole
    qualified name with qualnames=True).

    C functions: ``("~", 0, description)``, cProfile's description of the
    builtin (pstats shows it in braces):

    - ``len`` (a builtins function): ``<built-in method builtins.len>``;
    - ``math.sqrt`` (a function of a module): ``<built-in method math.sqrt>``,
      when ``math`` is a module of this process whose ``sqrt`` is a builtin;
    - ``list.append`` (anything else, a method of a type):
      ``<method 'append' of 'list' objects>``.  cProfile names the type by
      its ``tp_name`` (``collections.OrderedDict``), frametrace by its
      qualified name (``OrderedDict``), and cProfile describes class methods
      of builtin types (``dict.fromkeys``) as ``<built-in method fromkeys>``:
      those keys differ from cProfile's.
    """
    if not isinstance(name, str) or not isinstance(filename, str):
        raise TypeError(f"name and filename must be str, not {type(name).__name__} "
                        f"and {type(filename).__name__}")
    if kind != "c":
        return (filename, lineno, name if qualnames else name.rsplit(".", 1)[-1])
    label = _c_labels.get(name)
    if label is None:
        owner, dot, attr = name.rpartition(".")
        if not dot:
            label = f"<built-in method builtins.{name}>"
        else:
            module = sys.modules.get(owner)
            if (isinstance(module, types.ModuleType)
                    and isinstance(getattr(module, attr, None), types.BuiltinFunctionType)):
                label = f"<built-in method {name}>"
            else:
                label = f"<method '{attr}' of '{owner}' objects>"
        _c_labels[name] = label
    return ("~", 0, label)


def write_pstats(events: Any, path: PathLike, *, qualnames: bool = False) -> str:
    """Writes the trace as a pstats file (``pstats.Stats(path)``, snakeviz,
    gprof2dot); returns the path.

    The file is what ``cProfile.Profile.dump_stats`` writes: the marshal of
    ``{func: (primitive_calls, calls, tottime, cumtime, callers)}``, func a
    ``pstats_label`` key (cProfile's naming of Python and C functions),
    callers ``{caller: (calls, primitive_calls, tottime, cumtime)}`` per
    caller -> callee edge, in cProfile's order (pstats reads that tuple as
    nc, cc, tt, ct).  Times in seconds: tottime is self time, cumtime the
    total time of outermost activations.  Primitive calls are calls of a
    function not already on the thread's stack; an edge's are the calls from
    that caller not within another call of the same edge, and its cumtime
    counts only those, as cProfile does.  The threads are merged (pstats
    has no threads); root events have no callers.
    """
    evs, _ = _source(events)
    fs = _Functions(evs, edges=True)
    labels = [pstats_label(*key[:4], qualnames=qualnames) for key in fs.keys]
    # Sums in lists, added to in place: a function's threads (and
    # functions that label alike) are one pstats entry.
    stats: dict[tuple[str, int, str], list[Any]] = {}
    for fid, label in enumerate(labels):
        row = stats.get(label)
        if row is None:
            stats[label] = [fs.prim[fid], fs.calls[fid], fs.selfs[fid], fs.totals[fid], {}]
        else:
            row[0] += fs.prim[fid]
            row[1] += fs.calls[fid]
            row[2] += fs.selfs[fid]
            row[3] += fs.totals[fid]
    callers_of = [stats[label][4] for label in labels]
    enc, epc, ett, ect = fs.enc, fs.epc, fs.ett, fs.ect
    for eid, (pfid, fid) in enumerate(zip(fs.ecallers, fs.ecallees)):
        callers = callers_of[fid]
        caller = labels[pfid]
        edge = callers.get(caller)
        if edge is None:
            callers[caller] = [enc[eid], epc[eid], ett[eid], ect[eid]]
        else:
            edge[0] += enc[eid]
            edge[1] += epc[eid]
            edge[2] += ett[eid]
            edge[3] += ect[eid]
    out = {}
    for label, (pc, nc, tt, ct, callers) in stats.items():
        out[label] = (pc, nc, tt / 1e9, ct / 1e9,
                      {k: (v[0], v[1], v[2] / 1e9, v[3] / 1e9) for k, v in callers.items()})
    path = os.fspath(path)
    with open_output(path, "wb") as fh:
        marshal.dump(out, fh)
    return path


# ---- call paths ---------------------------------------------------------------


class _Paths:
    """Events merged by identical call path (per thread): one node per
    distinct path, with its total, self time, calls and capped flag."""

    def __init__(self, events: Sequence[Any]):
        (self.parents, self.info, self.totals, self.selfs, self.calls, self.capped,
         thread_keys, thread_ids, self.threads, self.first_child, self.next_sibling,
         self.funcs, self.path_funcs) = _pass(events, 0)
        self.idents = dict(zip(thread_keys, thread_ids))


_UNSAFE = re.compile(r"[;\r\n]")


def _frame(info: tuple[Any, ...]) -> str:
    return _UNSAFE.sub(lambda m: ":" if m.group() == ";" else " ", _display(*info[:4]))


def _thread_label(key: Any, idents: Mapping[Any, Any], shared: set, names: _Names) -> str:
    """"name (thread <thread_id>)"; where several threads had that id, its
    serial too: "name (thread <thread_id> #<serial>)"."""
    tid = idents.get(key, key)
    name = names.of(key, tid, tid in shared)
    which = f"thread {tid} #{key}" if tid in shared else f"thread {tid}"
    return f"{name} ({which})" if name else which


def collapsed_stacks(events: Any, *, weight: str = "self", threads: bool = True,
                     thread_names: Optional[Mapping[Any, str]] = None) -> list[str]:
    """The trace in the collapsed ("folded") stack format of flamegraph.pl
    and speedscope: one line per distinct call path, ``"frame;frame;frame
    weight"``, root first.

    A frame is ``name (file:line)`` for Python functions and ``name`` for C
    functions, with ';' replaced by ':' and line breaks by spaces.  With
    threads=True (the default) each line starts with a frame for its thread,
    ``thread <thread_id>`` (``<name> (thread <thread_id>)`` when the thread's
    name is known: thread_names, or a Trace's), so the threads make separate
    towers; with threads=False identical paths of different threads merge.

    weight="self": the path's self time (the time of its leaf frame minus its
    children's, over every call through that path) in whole microseconds,
    rounded to nearest; paths weighing 0 are left out.  weight="calls": the
    number of calls through that path.  Lines come in the order the paths
    first occur in the trace.
    """
    return list(_collapsed_lines(events, weight, threads, thread_names))


def _collapsed_lines(events: Any, weight: str, threads: bool,
                     thread_names: Optional[Mapping[Any, str]]) -> Iterator[str]:
    """collapsed_stacks()'s lines one by one.  Memory linear in the number
    of paths (not in the length of their labels): a label is a frame and
    the id of its parent's label, spelt out only when its line is made."""
    weight = _check_choice("weight", weight, _WEIGHTS)
    evs, default_names = _source(events)
    names = _thread_names(default_names, thread_names)
    paths = _Paths(evs)
    shared = _shared_idents(paths.idents)
    values = paths.selfs if weight == "self" else paths.calls
    # Only what the labels need is kept from here: the paths' other columns
    # go before the labels are made.
    parents, path_funcs, funcs, idents = paths.parents, paths.path_funcs, paths.funcs, paths.idents
    del paths
    texts: list[str] = []
    text_ids: dict[str, int] = {}

    def frame_id(text: str) -> int:
        fid = text_ids.get(text)
        if fid is None:
            fid = text_ids[text] = len(texts)
            texts.append(text)
        return fid

    # Identical labels (paths of different threads with threads=False, or
    # frames that display alike) are one line: a label is (parent label, frame).
    frame_of_func = [frame_id(_frame(key)) for key in funcs]
    top_of_func = [frame_id(_frame((_thread_label(key[4], idents, shared, names), "", 0,
                                    "c"))) if threads else -1
                   for key in funcs]
    label_up, label_frame, label_value = _tracer._collapse_labels(
        parents, path_funcs, frame_of_func, top_of_func, values)
    n = len(label_up)

    def lines() -> Iterator[str]:
        start = 0
        while start < n:
            batch, start = _tracer._collapsed_batch(label_up, label_frame, label_value, texts,
                                                    weight == "self", start, 4096)
            yield from batch

    return lines()


def write_collapsed(events: Any, path: PathLike, *, weight: str = "self", threads: bool = True,
                    thread_names: Optional[Mapping[Any, str]] = None) -> str:
    """Writes ``collapsed_stacks(events, ...)`` to path, one line each
    (UTF-8); returns the path.  ``flamegraph.pl path > out.svg``, or open it
    in speedscope."""
    lines = _collapsed_lines(events, weight, threads, thread_names)
    path = os.fspath(path)
    with open_output(path, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as fh:
        for line in lines:
            fh.write(line + "\n")
    return path


# ---- SVG flame graph -----------------------------------------------------------

_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_FRAME_H = 16
_FONT = 11
_CHAR_W = _FONT * 0.6
_PAD = 10
_TOP = 44
_MIN_PX = 0.1


def _xml(text: str) -> str:
    text = _XML_INVALID.sub("\ufffd", text)
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def _color(name: str, kind: str) -> str:
    h = zlib.crc32(name.encode("utf-8", "surrogatepass"))
    a, b, c = h & 0xFF, (h >> 8) & 0xFF, (h >> 16) & 0xFF
    if kind == "c":  # C functions: blues
        return f"rgb({60 + a % 50},{150 + b % 60},{200 + c % 50})"
    if kind == "py":  # Python functions: flamegraph.pl's warm palette
        return f"rgb({205 + a % 50},{b % 230},{c % 55})"
    return "rgb(200,200,200)"  # all, threads


# Click a frame to zoom in on it (its callees fill the width, its callers
# span it); click "all" to zoom out.  Labels are cut as _label() cuts them.
_ZOOM_SCRIPT = """<script type="text/ecmascript"><![CDATA[
(function () {
  var PAD = %(pad)s, INNER = %(inner).2f, CHAR_W = %(char_w).2f;
  var frames = Array.prototype.slice.call(document.querySelectorAll("g.f"));
  function label(text, px) {
    var fits = Math.floor((px - 4) / CHAR_W);
    if (fits < 3) return "";
    return text.length <= fits ? text : text.slice(0, fits - 2) + "..";
  }
  function place(g, x, w) {
    var rect = g.querySelector("rect"), text = g.querySelector("text");
    g.style.display = w > 0 ? "" : "none";
    rect.setAttribute("x", x.toFixed(2));
    rect.setAttribute("width", w.toFixed(2));
    if (text) {
      text.setAttribute("x", (x + 3).toFixed(2));
      text.textContent = label(g.getAttribute("data-n"), w);
    }
  }
  function zoom(target) {
    var tl = +target.getAttribute("data-l"), tx = +target.getAttribute("data-x"),
        tw = +target.getAttribute("data-w"), scale = INNER / tw, eps = 1e-6;
    frames.forEach(function (g) {
      var l = +g.getAttribute("data-l"), x = +g.getAttribute("data-x"),
          w = +g.getAttribute("data-w");
      if (l < tl) {  // a caller: spans the width if it encloses the target
        place(g, PAD, x <= tx + eps && x + w >= tx + tw - eps ? INNER : 0);
      } else if (x >= tx - eps && x + w <= tx + tw + eps) {
        place(g, PAD + (x - tx) * scale, w * scale);
      } else {
        place(g, 0, 0);
      }
    });
  }
  frames.forEach(function (g) {
    g.style.cursor = "pointer";
    g.addEventListener("click", function () { zoom(g); });
  });
})();
]]></script>
"""


def _label(text: str, px: float) -> str:
    fits = int((px - 4) / _CHAR_W)
    if fits < 3:
        return ""
    return text if len(text) <= fits else text[:fits - 2] + ".."


def write_flamegraph_svg(events: Any, path: PathLike, *, title: str = "frametrace",
                         width: int = 1200,
                         thread_names: Optional[Mapping[Any, str]] = None) -> str:
    """Writes a flame graph of the trace as a self-contained SVG (no external
    font, script or link: it opens in any browser or viewer; in a browser, a
    click on a frame zooms in on it, a click on "all" zooms out); returns the
    path.

    Events with the same call path on a thread merge into one frame; a
    frame's width is its inclusive time (the sum of the durations of its
    events), its children sit on top of it, left to right in the order they
    were first called.  All threads are merged in one graph: the bottom frame
    "all" is the traced time (the sum of the root durations of every
    thread), above it one frame per thread (``thread <id>`` or its name),
    then that thread's roots.  Each frame carries a ``<title>`` tooltip:
    name and file:line, inclusive time, share of the traced time, self time,
    calls, and whether it was capped at the tracer's stop.  Frames narrower
    than 0.1 px are not drawn (nor, then, anything above them).  Python
    frames are warm colors, C frames blue.
    """
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, not {type(title).__name__}")
    if isinstance(width, bool) or not isinstance(width, int):
        raise TypeError(f"width must be an int (pixels), not {type(width).__name__}")
    if width < 100:
        raise ValueError(f"width must be >= 100 pixels, got {width}")
    evs, default_names = _source(events)
    names = _thread_names(default_names, thread_names)
    paths = _Paths(evs)
    shared = _shared_idents(paths.idents)
    first_child, next_sibling = paths.first_child, paths.next_sibling
    traced = sum(paths.threads.values())
    roots_of: dict[Any, list[int]] = {tid: [] for tid in paths.threads}
    for p, pp in enumerate(paths.parents):
        if pp < 0:
            roots_of[paths.info[p][4]].append(p)

    inner = width - 2 * _PAD
    scale = inner / traced if traced > 0 else 0.0
    frames: list[tuple[int, float, float, str, str, str]] = []  # level, x, w, label, tip, fill

    def tip(text: str, total: int, self_ns: Optional[int], calls: Optional[int],
            capped: bool) -> str:
        share = total / traced * 100 if traced else 0.0
        parts = [f"{text}", f"{_ms(total)} ms, {share:.2f}% of traced time"]
        if self_ns is not None:
            parts[-1] += f"; self {_ms(max(self_ns, 0))} ms; {calls} call{'s' if calls != 1 else ''}"
        if capped:
            parts.append("capped: still running at the tracer's stop")
        return "\n".join(parts)

    max_level = 0
    if traced > 0:
        frames.append((0, _PAD, inner, "all", tip("all threads", traced, None, None, False), ""))
        x_ns = 0
        for tid, roots in roots_of.items():
            tsum = paths.threads[tid]
            w = tsum * scale
            if w >= _MIN_PX:
                tl = _thread_label(tid, paths.idents, shared, names)
                frames.append((1, _PAD + x_ns * scale, w, tl, tip(tl, tsum, None, None, False), ""))
                max_level = max(max_level, 1)
                todo = []
                x = x_ns
                for r in roots:
                    todo.append((r, x, 2))
                    x += paths.totals[r]
                while todo:
                    p, x, level = todo.pop()
                    total = paths.totals[p]
                    w = total * scale
                    if w < _MIN_PX:
                        continue
                    info = paths.info[p]
                    frames.append((level, _PAD + x * scale, w, info[0],
                                   tip(_display(*info[:4]), total, paths.selfs[p],
                                       paths.calls[p], paths.capped[p]),
                                   _color(info[0], info[3])))
                    max_level = max(max_level, level)
                    cx = x
                    k = first_child[p]
                    while k >= 0:
                        todo.append((k, cx, level + 1))
                        cx += paths.totals[k]
                        k = next_sibling[k]
            x_ns += tsum

    height = _TOP + (max_level + 1) * _FRAME_H + _PAD + 14
    base = height - _PAD - 14  # bottom of level 0
    out = [
        '<?xml version="1.0" encoding="UTF-8" standalone="no"?>\n',
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">\n',
        "<style>text{font-family:monospace;font-size:%dpx;fill:#000}"
        " .f rect{stroke:#fff;stroke-width:0.5}"
        " .f:hover rect{stroke:#000;stroke-width:1}"
        " .h{font-size:%dpx;text-anchor:middle}</style>\n" % (_FONT, _FONT + 6),
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fdfdf6"/>\n',
        f'<text class="h" x="{width / 2:.1f}" y="22">{_xml(title)}</text>\n',
        f'<text x="{_PAD}" y="38">{len(evs)} events, {_ms(traced)} ms traced (sum of root '
        f'durations); width: inclusive time; hover a frame for details</text>\n',
    ]
    if not frames:
        out.append(f'<text x="{_PAD}" y="{base - 2}">(no events)</text>\n')
    for level, fx, fw, label, tiptext, fill in frames:
        fy = base - (level + 1) * _FRAME_H
        text = _label(label, fw)
        out.append(
            f'<g class="f" data-l="{level}" data-n="{_xml(label)}" data-x="{fx:.2f}" '
            f'data-w="{fw:.2f}"><title>{_xml(tiptext)}</title>'
            f'<rect x="{fx:.2f}" y="{fy}" width="{fw:.2f}" height="{_FRAME_H - 1}" rx="2" '
            f'fill="{fill or _color(label, "")}"/>'
            + (f'<text x="{fx + 3:.2f}" y="{fy + _FRAME_H - 4}">{_xml(text)}</text>' if text else "")
            + "</g>\n")
    if frames:
        out.append(_ZOOM_SCRIPT % {"pad": _PAD, "inner": inner, "char_w": _CHAR_W})
    out.append("</svg>\n")
    path = os.fspath(path)
    with open_output(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.writelines(out)
    return path
