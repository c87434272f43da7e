"""``frametrace ranks``: per step, each rank's duration, the straggler and
the functions that make it slow; a heat map as SVG on request."""
from __future__ import annotations

import argparse
from typing import Any, Optional

from ._common import CommandError, non_negative


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("ranks", help="find the straggler rank of each step (datasets)",
                       description="Per step of a distributed job's datasets: each rank's "
                                   "duration, the straggler (slowest rank) and how far it is "
                                   "above the median, and the functions whose self time "
                                   "differs most between the straggler and the median rank "
                                   "(DuckDB: pip install 'frametrace[sql]').")
    p.add_argument("paths", nargs="+", metavar="PATH", help="dataset directories")
    p.add_argument("--functions", type=non_negative, default=5, metavar="N",
                   help="functions shown per step (default 5)")
    p.add_argument("--cycle", type=non_negative, metavar="N", help="only cycle N's steps")
    p.add_argument("--svg", metavar="heat.svg",
                   help="also write a heat map (ranks x steps, colour: the step's duration "
                        "against the step's median)")
    return p


def run(ns: argparse.Namespace) -> int:
    from .. import reports
    from .._sql import SQLError

    cycle: Optional[int] = ns.cycle
    try:
        report = reports.ranks(ns.paths, functions=ns.functions, cycle=cycle)
        if ns.svg:
            report.write_svg(ns.svg)
    except (ImportError, SQLError, OSError) as exc:
        raise CommandError(str(exc)) from None
    report.print()
    return 0
