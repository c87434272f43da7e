"""The before/after report: per function, calls and self and total time on
both sides, sorted by the change of self time, and both sides' step-time
distributions.  A side is a trace file (read with frametrace.load and the
summary's pass) or a dataset directory (read with DuckDB)."""
from __future__ import annotations

import os
import sys
from typing import IO, Any, NamedTuple, Optional

from ._pass import _check_limit, _display, _ms


class CompareRow(NamedTuple):
    """One function on both sides (0 where a side did not call it); ns."""

    name: str
    filename: str
    lineno: int
    kind: str
    calls_before: int
    calls_after: int
    self_before: int
    self_after: int
    total_before: int
    total_after: int

    @property
    def self_change(self) -> int:
        return self.self_after - self.self_before

    @property
    def function(self) -> str:
        return _display(self.name, self.filename, self.lineno, self.kind)


class StepStats(NamedTuple):
    """A side's step durations (ns): how many, min, median, p90, max (None
    without steps)."""

    steps: int
    min: Optional[int]
    median: Optional[float]
    p90: Optional[int]
    max: Optional[int]


def step_stats(durations: list) -> StepStats:
    d = sorted(durations)
    if not d:
        return StepStats(0, None, None, None, None)
    n = len(d)
    median = d[n // 2] if n % 2 else (d[n // 2 - 1] + d[n // 2]) / 2
    p90 = d[max(0, -(-9 * n // 10) - 1)]  # nearest rank
    return StepStats(n, d[0], median, p90, d[-1])


class CompareReport:
    """The result of ``compare()``: ``rows`` (CompareRow, largest change of
    self time first, either way), ``before_steps`` and ``after_steps``
    (StepStats), ``functions`` (how many before the limit);
    ``str(report)`` the text, ``print()``."""

    def __init__(self, before: str, after: str, rows: list[CompareRow], functions: int,
                 before_steps: StepStats, after_steps: StepStats):
        self.before, self.after = before, after
        self.rows = rows
        self.functions = functions
        self.before_steps, self.after_steps = before_steps, after_steps

    def __repr__(self) -> str:
        return f"<CompareReport {len(self.rows)} of {self.functions} functions>"

    def __str__(self) -> str:
        lines = [f"before: {self.before}", f"after:  {self.after}", "",
                 "step time (ms)   steps       min    median       p90       max"]
        for label, st in (("before", self.before_steps), ("after", self.after_steps)):
            vals = [st.min, st.median, st.p90, st.max]
            lines.append(f"{label:<15} {st.steps:>7}" +
                         "".join(f"{_ms(v) if v is not None else '-':>10}" for v in vals))
        shown = f"; top {len(self.rows)} shown" if len(self.rows) < self.functions else ""
        lines += ["", f"{self.functions} functions, sorted by the change of self time{shown}"]
        head = ("self +/- ms", "self before", "self after", "total before", "total after",
                "calls before", "calls after")
        body = [(f"{r.self_change / 1e6:+.3f}", _ms(r.self_before), _ms(r.self_after),
                 _ms(r.total_before), _ms(r.total_after), str(r.calls_before),
                 str(r.calls_after)) for r in self.rows]
        widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
                  for i, h in enumerate(head)]
        lines.append("  ".join(h.rjust(w) for h, w in zip(head, widths)) + "  function")
        for r, b in zip(self.rows, body):
            lines.append("  ".join(v.rjust(w) for v, w in zip(b, widths)) + "  " + r.function)
        if not body:
            lines.append("(no functions)")
        return "\n".join(lines)

    def print(self, file: Optional[IO[str]] = None) -> None:
        print(str(self), file=file if file is not None else sys.stdout)


# A function's total counts its outermost activations on a thread's stack
# (the summary's rule), which the writer marks per event: one group-by.
_FUNCTIONS = """
select name, file, line, kind, count(*), sum(self_ns),
       coalesce(sum(dur_ns) filter (where outermost), 0),
       count(*) filter (where outermost is null)
from {events} {where} group by name, file, line, kind
"""
# Files written before the outermost column: the same rule from the events
# sorted per thread and function (a call is inside an earlier call of the
# same function on its thread when that one ends no earlier), which takes
# minutes over 100M events.
_UNMARKED_TOTALS = """
select name, file, line, kind,
       sum(case when coalesce(outer_end, -1) >= end_ns then 0 else dur_ns end)
from (select name, file, line, kind, dur_ns, end_ns,
             max(end_ns) over (partition by rank, cycle, pid, thread, tid, name, file, line, kind
                               order by start_ns, depth
                               rows between unbounded preceding and 1 preceding) as outer_end
      from {events} {where})
group by name, file, line, kind
"""
_STEPS = """
select max(end_ns) - min(start_ns) from steps {where} group by rank, cycle, pid, step
"""


def _dataset_side(path: str, cycle: Optional[int]) -> tuple[dict, list]:
    from .._sql import connect, run_query

    with connect([path]) as con:
        if cycle is not None and not run_query(
                con, f"select 1 from steps where cycle = {cycle} union all "
                     f"select 1 from events where cycle = {cycle} limit 1").fetchall():
            raise ValueError(f"{path}: no cycle {cycle}")
        where = f"where cycle = {cycle}" if cycle is not None else ""
        names = [d[0] for d in run_query(con, "select * from events limit 0").description]
        events = ("events" if "outermost" in names
                  else "(select *, null::boolean as outermost from events)")
        funcs, unmarked = {}, 0
        for r in run_query(con, _FUNCTIONS.format(events=events, where=where)).fetchall():
            funcs[tuple(r[:4])] = (int(r[4]), int(r[5]), int(r[6]))
            unmarked += r[7]
        if unmarked:  # a thread's events are in one file: whole threads here
            cond = f"{where} and" if where else "where"
            for *key, total in run_query(con, _UNMARKED_TOTALS.format(
                    events=events, where=f"{cond} outermost is null")).fetchall():
                calls, self_ns, marked = funcs[tuple(key)]
                funcs[tuple(key)] = (calls, self_ns, marked + int(total))
        steps = [r[0] for r in run_query(con, _STEPS.format(where=where)).fetchall()]
    return funcs, steps


def _trace_side(what: Any, cycle: Optional[int]) -> tuple[dict, list]:
    from .._trace import as_trace
    from ..loader import load
    from ._summary import summary

    trace = load(what) if isinstance(what, (str, os.PathLike)) else as_trace(what)
    if cycle is not None and trace.cycle != cycle:
        raise ValueError(f"{what}: a trace of cycle {trace.cycle}, not {cycle}")
    funcs = {(r.name, r.filename, r.lineno, r.kind): (r.calls, r.self_ns, r.total_ns)
             for r in summary(trace, limit=None)}
    return funcs, [s.end_ns - s.start_ns for s in trace.steps]


def _side(what: Any, cycle: Optional[int]) -> tuple[dict, list]:
    if isinstance(what, (str, os.PathLike)) and os.path.isdir(what):
        return _dataset_side(os.fspath(what), cycle)
    return _trace_side(what, cycle)


def compare(before: Any, after: Any, *, limit: Optional[int] = 30,
            cycle: Optional[int] = None) -> CompareReport:
    """Compares two runs, per function (``(name, file, line, kind)``):
    calls, self and total time before and after, the ``limit`` largest
    changes of self time first (None: all), and the step-time
    distributions of both sides.  A side is a trace file (.json, .json.gz,
    .pftrace), a Trace (or what ``as_trace()`` takes), or a dataset
    directory (DuckDB: ``frametrace[sql]``); cycle: that cycle on both
    sides (a trace file must be of that cycle).  A dataset's total time
    sums the events its writer marked ``outermost``; the events of files
    written before that column existed are sorted per thread and function
    instead (the same answer, about 40 s per 6M events on two cores)."""
    limit = _check_limit(limit)
    if cycle is not None and (isinstance(cycle, bool) or not isinstance(cycle, int)):
        raise TypeError(f"cycle must be an int or None, not {type(cycle).__name__}")
    fb, sb = _side(before, cycle)
    fa, sa = _side(after, cycle)
    rows = []
    for key in fb.keys() | fa.keys():
        cb, selfb, totb = fb.get(key, (0, 0, 0))
        ca, selfa, tota = fa.get(key, (0, 0, 0))
        name, filename, lineno, kind = key
        rows.append(CompareRow(name, filename, lineno, kind, cb, ca, selfb, selfa, totb, tota))
    rows.sort(key=lambda r: (-abs(r.self_change), r.name, r.filename, r.lineno, r.kind))
    label = (lambda w: os.fspath(w) if isinstance(w, (str, os.PathLike)) else type(w).__name__)
    return CompareReport(label(before), label(after), rows[:limit] if limit else rows, len(rows),
                         step_stats(sb), step_stats(sa))
