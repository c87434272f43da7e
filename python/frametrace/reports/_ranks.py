"""The ranks report: per step, each rank's duration, the straggler (the
slowest rank) and how far it is above the median, and the functions whose
self time differs most between the straggler and the median rank; read with
DuckDB from datasets."""
from __future__ import annotations

import statistics
import sys
from typing import IO, Any, NamedTuple, Optional

from ._pass import PathLike, _check_limit, _display, _ms


WIDE = 16  # the most ranks the text gives a column each


class FunctionGap(NamedTuple):
    """One function's self time in a step on the straggler and on the
    median rank (ns)."""

    name: str
    filename: str
    lineno: int
    kind: str
    straggler_ns: int
    median_ns: int

    @property
    def diff_ns(self) -> int:
        return self.straggler_ns - self.median_ns

    @property
    def function(self) -> str:
        return _display(self.name, self.filename, self.lineno, self.kind)


class StepRanks(NamedTuple):
    """One step: durations {rank: ns} (of the ranks that ran it), their
    median, the straggler and the median rank (the rank at the lower
    middle), and the functions (FunctionGap) whose self time differs
    between the two, largest difference (either way) first."""

    step: int
    durations: dict
    median_ns: float
    straggler: int
    median_rank: int
    functions: list

    @property
    def straggler_ns(self) -> int:
        return self.durations[self.straggler]

    @property
    def excess(self) -> float:
        """How far the straggler is above the median (0.5: 50% slower)."""
        return self.straggler_ns / self.median_ns - 1 if self.median_ns else 0.0


class RanksReport:
    """The result of ``ranks()``: ``steps`` (StepRanks, by step), ``ranks``
    (every rank seen); ``str(report)`` the text, ``print()``,
    ``write_svg(path)`` the heat map."""

    def __init__(self, steps: list[StepRanks], ranks: list[int]):
        self.steps = steps
        self.ranks = ranks

    def __repr__(self) -> str:
        return f"<RanksReport {len(self.ranks)} ranks, {len(self.steps)} steps>"

    def __str__(self) -> str:
        if not self.steps:
            return f"{_count(len(self.ranks), 'rank')}, no steps"
        lines = [f"{_count(len(self.ranks), 'rank')}, {_count(len(self.steps), 'step')}; per step "
                 f"each rank's duration (ms), the straggler (slowest rank) against the median"]
        if len(self.ranks) <= WIDE:
            label = [f"rank {r}" for r in self.ranks]
            cells = [[_ms(s.durations[r]) if r in s.durations else "-" for r in self.ranks]
                     for s in self.steps]
        else:  # too many ranks for a column each: the spread (each: .steps, the heat map)
            label = ["ranks", "fastest"]
            cells = [[str(len(s.durations)), _ms(min(s.durations.values()))]
                     for s in self.steps]
        head = ["step"] + label + ["median", "straggler", "above median"]
        rows = [[str(s.step)] + c + [_ms(s.median_ns), f"rank {s.straggler}",
                                     f"{s.excess * 100:+.1f}%"]
                for s, c in zip(self.steps, cells)]
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
        for row in [head] + rows:
            lines.append("  ".join(v.rjust(w) for v, w in zip(row, widths)).rstrip())
        for s in self.steps:
            if not s.functions or s.straggler == s.median_rank:
                continue
            lines.append("")
            lines.append(f"step {s.step}: rank {s.straggler} (straggler) - rank {s.median_rank} "
                         f"(median), self time in ms")
            fw = max(len(_ms(f.straggler_ns)) for f in s.functions)
            mw = max(len(_ms(f.median_ns)) for f in s.functions)
            dw = max(len(f"{f.diff_ns / 1e6:+.3f}") for f in s.functions)
            for f in s.functions:
                lines.append(f"  {f.diff_ns / 1e6:+.3f}".rjust(dw + 2) +
                             f"  {_ms(f.straggler_ns).rjust(fw)}  {_ms(f.median_ns).rjust(mw)}"
                             f"  {f.function}")
        return "\n".join(lines)

    def print(self, file: Optional[IO[str]] = None) -> None:
        print(str(self), file=file if file is not None else sys.stdout)

    def write_svg(self, path: PathLike) -> str:
        """Writes the heat map (ranks x steps, colour: the step's duration
        against the step's median) as a standalone SVG; returns the path."""
        from ._heatmap import write_heatmap

        return write_heatmap(self, path)


_DURATIONS = """
select rank, step, max(end_ns) - min(start_ns) as dur from steps {where}
group by rank, step order by step, rank
"""

# Per picked step, each function's self time on the straggler and on the
# median rank, the `top` largest differences.
_GAPS = """
with pick(step, slow, med) as (values {values}),
f as (
  select e.step, e.name, e.file, e.line, e.kind,
         sum(case when e.rank = p.slow then e.self_ns else 0 end) as slow_ns,
         sum(case when e.rank = p.med then e.self_ns else 0 end) as med_ns
  from events e join pick p on e.step = p.step and (e.rank = p.slow or e.rank = p.med)
  {where}
  group by e.step, e.name, e.file, e.line, e.kind)
select step, name, file, line, kind, slow_ns, med_ns from (
  select *, row_number() over (partition by step
                               order by abs(slow_ns - med_ns) desc, name, file, line) as k
  from f where slow_ns <> med_ns) where k <= {top} order by step, k
"""


def ranks(paths: Any, *, functions: int = 5, cycle: Optional[int] = None) -> RanksReport:
    """Per step of the datasets at paths (a path or a list of dataset
    directories, DuckDB: ``frametrace[sql]``), each rank's duration (its
    step's first start to last end), the straggler and its excess over the
    median, and the ``functions`` functions whose self time in that step
    differs most between the straggler and the median rank; cycle: only
    that cycle's steps."""
    from .._sql import connect, run_query

    top = _check_limit(functions)
    if cycle is not None and (isinstance(cycle, bool) or not isinstance(cycle, int)):
        raise TypeError(f"cycle must be an int or None, not {type(cycle).__name__}")
    with connect(paths) as con:
        where = f"where cycle = {int(cycle)}" if cycle is not None else ""
        per: dict[int, dict[int, int]] = {}
        seen: set = set()
        for rank, step, dur in run_query(con, _DURATIONS.format(where=where)).fetchall():
            per.setdefault(step, {})[rank] = dur
            seen.add(rank)
        picks = {}
        for step, durs in per.items():
            slow = max(sorted(durs), key=lambda r: durs[r])
            order = sorted(durs, key=lambda r: (durs[r], r))
            picks[step] = (slow, order[(len(order) - 1) // 2])
        gaps: dict[int, list[FunctionGap]] = {}
        todo = [(s, p) for s, p in picks.items() if p[0] != p[1]]
        if todo and top != 0:
            values = ", ".join(f"({int(s)}, {int(a)}, {int(b)})" for s, (a, b) in todo)
            gwhere = f"where e.cycle = {int(cycle)}" if cycle is not None else ""
            query = _GAPS.format(values=values, where=gwhere,
                                 top=top if top is not None else 2**62)
            for step, name, file, line, kind, slow_ns, med_ns in run_query(con, query).fetchall():
                gaps.setdefault(step, []).append(
                    FunctionGap(name, file, line, kind, int(slow_ns), int(med_ns)))
    steps = [StepRanks(step, durs, statistics.median(durs.values()), picks[step][0],
                       picks[step][1], gaps.get(step, []))
             for step, durs in sorted(per.items())]
    return RanksReport(steps, sorted(seen))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
