"""Reports of a trace: a per-function summary table, pstats files, collapsed
stacks and a flame graph.

    from frametrace import reports

    with frametrace.trace() as tracer:
        train_step()

    reports.summary(tracer).print()                  # top 30 functions by self time
    reports.write_pstats(tracer, "step.pstats")      # pstats.Stats("step.pstats"), snakeviz
    reports.write_collapsed(tracer, "step.folded")   # flamegraph.pl, speedscope
    reports.write_flamegraph_svg(tracer, "step.svg")
    reports.compare("before.json", "after.json").print()  # what changed, per function
    reports.ranks(["run.parquet"]).print()           # stragglers per step (DuckDB)

Every report takes the trace first (then the path, for those that write
one): a ``frametrace.Trace`` or what ``frametrace.as_trace()`` turns into
one (a stopped tracer, a snapshot, a loaded trace, or the list
``Tracer.getEvents()`` returns, or any list of 14-field event tuples in the
same order: each thread's events in call order, parents before their
children, ``parent`` the index of the parent event in the same list); its
``events`` (and ``threads``' names) are used.  One module per report, the
shared pass over the events in ``_pass``.  Each makes a single pass over the
events, keeping a few integers per event.

What a function, a call, self, total and traced time, capped and wait
mean, the same in every report: docs/viewing.md, "The summary".
"""
from ._collapsed import collapsed_stacks, write_collapsed
from ._compare import CompareReport, CompareRow, StepStats, compare
from ._flamegraph import write_flamegraph_svg
from ._pstats import pstats_label, write_pstats
from ._ranks import FunctionGap, RanksReport, StepRanks, ranks
from ._summary import SORT_KEYS, SummaryRow, SummaryTable, summary
from ._waits import WAIT_CALLS

__all__ = [
    "CompareReport",
    "CompareRow",
    "FunctionGap",
    "RanksReport",
    "SORT_KEYS",
    "StepRanks",
    "StepStats",
    "SummaryRow",
    "SummaryTable",
    "WAIT_CALLS",
    "collapsed_stacks",
    "compare",
    "pstats_label",
    "ranks",
    "summary",
    "write_collapsed",
    "write_flamegraph_svg",
    "write_pstats",
]
