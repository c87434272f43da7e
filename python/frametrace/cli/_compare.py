"""``frametrace compare``: per function, what changed between two runs
(trace files or datasets), and both sides' step times."""
from __future__ import annotations

import argparse
from typing import Any

from ._common import CommandError, non_negative


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("compare", help="compare two runs per function",
                       description="Per function, calls and self/total time before and after, "
                                   "largest change of self time first, and the step-time "
                                   "distributions of both sides (min/median/p90/max).  A side "
                                   "is a trace file (.json, .json.gz, .pftrace) or a dataset "
                                   "directory (DuckDB: pip install 'frametrace[sql]').")
    p.add_argument("before", help="the run before: a trace file or a dataset")
    p.add_argument("after", help="the run after: a trace file or a dataset")
    p.add_argument("--cycle", type=non_negative, metavar="N",
                   help="cycle N on both sides (a trace file must be of cycle N)")
    p.add_argument("--limit", type=non_negative, default=30, metavar="N",
                   help="at most N functions (default 30; 0: all)")
    return p


def run(ns: argparse.Namespace) -> int:
    from .. import reports

    try:
        report = reports.compare(ns.before, ns.after, limit=ns.limit or None, cycle=ns.cycle)
    except (ImportError, OSError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    report.print()
    return 0
