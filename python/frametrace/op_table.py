"""The op table of a trace: torch's ops (``frametrace.torch``), as
torch.profiler's ``key_averages().table()`` gives them, from the ops a
``frametrace.Trace`` holds (``Trace.slices`` and ``Trace.slice_tracks``,
in memory or read back by ``frametrace.load``).

    trace.summary()                                  # functions, then ops
    op_table(trace, group_by_input_shape=True).print()

What counts, as torch counts it:

- An op is a slice another tool recorded on a CPU thread: torch's ops and
  annotations (``cpu_op``, ``user_annotation``, runtime calls).  GPU
  activity (kernels, memcpy, memset, GPU annotations) is left out, as
  ``key_averages()`` gives it no row of its own.
- Every slice is one call.  Total time is the sum of its calls' durations
  (torch's "CPU total", recursion counted each time); self time is each
  call's duration minus its child ops' durations, children being the ops
  of the same thread nested in it (torch's "Self CPU").  The ops of a
  thread that cross its Python frames (``frametrace.torch`` puts them on a
  track of their own) nest with that thread's other ops.
- share is self time over all ops' self time (torch's "Self CPU %").
- ``group_by_input_shape=True``: a row per op name and input shapes
  (``record_shapes``' "Input Dims", written as torch writes them in its
  table, ``[]`` for an op without any and for a list of tensors), as
  ``key_averages(group_by_input_shape=True)``.
"""
from __future__ import annotations

import re
import sys
from typing import IO, Any, Iterable, NamedTuple, Optional

from .reports import SORT_KEYS
from .reports._pass import _check_choice, _check_limit

__all__ = ["OpRow", "OpTable", "has_ops", "op_table"]

# Kineto's activity types (its category names) that run on a device, not
# on a CPU thread.
DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation",
                               "concurrent_kernel", "mtia_ccp_events", "hpu_op"})
# frametrace.torch's track of a thread's ops that cross its frames:
# "torch: <thread's name> (not nested in its frames)" (torch_trace_slices),
# with " [pid N]" after it and after the thread's name in a merged trace.
_CROSSING = re.compile(r"torch: (.*) \(not nested in its frames\)((?: \[pid \d+\])?)", re.S)


class OpRow(NamedTuple):
    """One op (one op and input shapes, grouped by them).  Times in ns;
    share a fraction of all ops' self time."""

    name: str
    input_shapes: Optional[str]
    """The input shapes as torch's table writes them ("[[16, 32], []]");
    None in a table not grouped by them."""
    calls: int
    total_ns: int
    self_ns: int
    mean_ns: float
    share: float


class OpTable:
    """The result of ``op_table()``: ``rows`` (``OpRow``s, sorted and
    limited), ``str(table)`` an aligned text table, ``table.print()``.
    ``ops`` and ``calls`` count every row and call before the limit;
    ``self_ns`` is the ops' self time in all (torch's "Self CPU time
    total"); ``shapes_recorded``: some op has input shapes."""

    def __init__(self, rows: list[OpRow], *, ops: int, calls: int, self_ns: int, sort: str,
                 limit: Optional[int], grouped: bool, shapes_recorded: bool):
        self.rows = rows
        self.ops = ops
        self.calls = calls
        self.self_ns = self_ns
        self.sort = sort
        self.limit = limit
        self.group_by_input_shape = grouped
        self.shapes_recorded = shapes_recorded

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Any:
        return iter(self.rows)

    def __repr__(self) -> str:
        return f"<OpTable {len(self.rows)} of {self.ops} ops, sort={self.sort!r}>"

    def print(self, file: Optional[IO[str]] = None) -> None:
        """Prints the table (to sys.stdout by default)."""
        print(str(self), file=file if file is not None else sys.stdout)

    def __str__(self) -> str:
        shown = f"; top {len(self.rows)} shown" if len(self.rows) < self.ops else ""
        per = " and input shapes" if self.group_by_input_shape else ""
        lines = [f"torch ops: {self.ops} ops{per}, {self.calls} calls, {_ms(self.self_ns)} ms "
                 f"self time in all; sorted by {self.sort}{shown}"]
        header = ("calls", "total ms", "self ms", "mean ms", "self %", "op")
        body = [(str(r.calls), _ms(r.total_ns), _ms(r.self_ns), _ms(r.mean_ns),
                 f"{r.share * 100:.1f}%",
                 r.name if r.input_shapes is None else f"{r.name}  {r.input_shapes}")
                for r in self.rows]
        widths = [max(len(header[c]), *(len(row[c]) for row in body)) if body else len(header[c])
                  for c in range(5)]

        def fmt(cells: tuple[str, ...]) -> str:
            return "  ".join([cells[c].rjust(widths[c]) for c in range(5)] + [cells[5]]).rstrip()

        lines.append(fmt(header[:5] + ("  " + (header[5] + "  input shapes" if per else header[5]),)))
        lines.extend(fmt(row[:5] + ("  " + row[5],)) for row in body)
        if self.shapes_recorded and not self.group_by_input_shape:
            lines.append("input shapes recorded: group_by_input_shape=True "
                         "(frametrace summary --group-by-input-shape) shows a row per shape")
        return "\n".join(lines)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _shapes(args: Optional[dict]) -> str:
    """torch's key for an op's input shapes: str() of the list of its
    inputs' dims ("Input Dims"), [] without one.  A list of tensors (its
    dims a list of lists) is [] there: key_averages' shapes hold tensors'
    only."""
    dims = args.get("Input Dims") if isinstance(args, dict) else None
    if not isinstance(dims, list):
        return "[]"
    return str([[] if not isinstance(d, list) or any(isinstance(v, list) for v in d) else d
                for d in dims])


def _threads_of(trace: Any) -> list[list]:
    """The CPU ops of trace, one list per thread: a thread's own, and
    its crossing track's joined to it."""
    by_name: dict[str, list[int]] = {}
    for t in getattr(trace, "threads", None) or ():
        by_name.setdefault(t.name or f"thread {t.thread_id}", []).append(t.serial)
    groups: dict[Any, list] = {}
    for serial, items in (trace.slices or {}).items():
        groups.setdefault(("serial", serial), []).extend(items)
    for k, (name, items) in enumerate(trace.slice_tracks or ()):
        key: Any = ("track", k)
        crossing = _CROSSING.fullmatch(name)
        if crossing:
            serials = by_name.get(crossing[1] + crossing[2], [])
            if len(serials) == 1:  # one thread of that name: it is its
                key = ("serial", serials[0])
        groups.setdefault(key, []).extend(items)
    return [[x for x in items if x.category not in DEVICE_CATEGORIES]
            for items in groups.values()]


def _self_times(items: list) -> Iterable[tuple[Any, int]]:
    """(op, self ns) of one thread's ops: its duration minus those of the
    ops directly nested in it."""
    ops = sorted(items, key=lambda x: (x.start_ns, -x.end_ns))
    children = [0] * len(ops)
    stack: list[int] = []  # indices of the ops open at the current start
    for i, x in enumerate(ops):
        while stack and ops[stack[-1]].end_ns <= x.start_ns and not (
                ops[stack[-1]].start_ns <= x.start_ns and x.end_ns <= ops[stack[-1]].end_ns):
            stack.pop()
        # The innermost open op that holds x (one that crosses x is not its parent).
        for j in reversed(stack):
            if ops[j].start_ns <= x.start_ns and x.end_ns <= ops[j].end_ns:
                children[j] += x.end_ns - x.start_ns
                break
        stack.append(i)
    for i, x in enumerate(ops):
        yield x, (x.end_ns - x.start_ns) - children[i]


def has_ops(trace: Any) -> bool:
    """Whether trace holds ops another tool recorded on a CPU thread."""
    return any(x.category not in DEVICE_CATEGORIES
               for items in list((getattr(trace, "slices", None) or {}).values())
               + [t[1] for t in getattr(trace, "slice_tracks", None) or ()] for x in items)


_SORTERS = {
    "self": lambda r: (-r.self_ns, r.name, r.input_shapes or ""),
    "total": lambda r: (-r.total_ns, r.name, r.input_shapes or ""),
    "calls": lambda r: (-r.calls, r.name, r.input_shapes or ""),
    "mean": lambda r: (-r.mean_ns, r.name, r.input_shapes or ""),
    "name": lambda r: (r.name, r.input_shapes or ""),
}


def op_table(trace: Any, *, sort: str = "self", limit: Optional[int] = 30,
             group_by_input_shape: bool = False) -> OpTable:
    """The op table of trace (a ``frametrace.Trace``): calls, total, self
    and mean time and self share per op name (per name and input shapes
    with group_by_input_shape), over all threads.  sort and limit as for
    ``frametrace.reports.summary``."""
    sort = _check_choice("sort", sort, SORT_KEYS)
    limit = _check_limit(limit)
    if not isinstance(group_by_input_shape, bool):
        raise TypeError(f"group_by_input_shape must be a bool, not "
                        f"{type(group_by_input_shape).__name__}")
    acc: dict[tuple[str, Optional[str]], list[int]] = {}
    shapes_recorded = False
    for items in _threads_of(trace):
        for x, self_ns in _self_times(items):
            shapes = _shapes(x.args)
            shapes_recorded = shapes_recorded or shapes != "[]"
            # torch's table folds its step annotations into one row.
            name = "ProfilerStep*" if x.name.startswith("ProfilerStep#") else x.name
            key = (name, shapes if group_by_input_shape else None)
            a = acc.get(key)
            if a is None:
                acc[key] = [1, x.end_ns - x.start_ns, self_ns]
            else:
                a[0] += 1
                a[1] += x.end_ns - x.start_ns
                a[2] += self_ns
    all_self = sum(a[2] for a in acc.values())
    rows = [OpRow(name, shapes, calls, total, self_ns, total / calls,
                  self_ns / all_self if all_self else 0.0)
            for (name, shapes), (calls, total, self_ns) in acc.items()]
    rows.sort(key=_SORTERS[sort])
    ops = len(rows)
    if limit is not None:
        del rows[limit:]
    return OpTable(rows, ops=ops, calls=sum(a[0] for a in acc.values()), self_ns=all_self,
                   sort=sort, limit=limit, grouped=group_by_input_shape,
                   shapes_recorded=shapes_recorded)
