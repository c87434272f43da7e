"""``frametrace flamegraph``: writes an SVG flame graph of a trace file."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from .._output import reason
from ._common import PROG, CommandError, load


def add_parser(sub: Any) -> argparse.ArgumentParser:
    flame = sub.add_parser("flamegraph", help="write an SVG flame graph of a trace",
                           description="Write a self-contained SVG flame graph of a trace file.")
    flame.add_argument("trace", help="a trace frametrace wrote (.json or .json.gz)")
    flame.add_argument("-o", "--output", metavar="out.svg",
                       help="where to write it (default: the trace's name with .svg)")
    flame.add_argument("--title", help="the graph's title (default: the trace's file name)")
    return flame


def run(ns: argparse.Namespace) -> int:
    from .. import reports

    output = ns.output or _default_svg(ns.trace)
    try:
        trace = load(ns.trace)
    except (OSError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    try:
        reports.write_flamegraph_svg(trace, output, title=ns.title or os.path.basename(ns.trace))
    except OSError as exc:
        raise CommandError(f"could not write {output}: {reason(exc)}") from None
    print(f"{PROG}: flame graph of {len(trace.events):,} events written to {output}",
          file=sys.stderr)
    return 0


def _default_svg(path: str) -> str:
    base = path
    for suffix in (".gz", ".json"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base + ".svg"
