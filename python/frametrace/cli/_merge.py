"""``frametrace merge``: merges the traces of several processes into one
timeline."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from ._common import PROG, CommandError, Progress, ms


def add_parser(sub: Any) -> argparse.ArgumentParser:
    merge = sub.add_parser(
        "merge", help="merge the traces of several processes into one timeline",
        description="Merge Chrome traces frametrace wrote (of several processes) into one "
                    "file, each process on its own track, aligned by the wall-clock time "
                    "each trace records.")
    merge.add_argument("traces", nargs="+", metavar="trace.json", help="the traces to merge")
    merge.add_argument("-o", "--output", required=True, metavar="all.json",
                       help="the merged trace (.json.gz: compressed)")
    return merge


def run(ns: argparse.Namespace) -> int:
    from ..loader import merge

    progress = Progress(f"{PROG}: merging into {ns.output}")
    try:
        other = merge(ns.traces, ns.output, progress=progress)
    except (OSError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    finally:
        progress.close()
    inputs = other["inputs"]
    print(f"{PROG}: {other['metadata']['events']:,} events of {len(inputs)} "
          f"process{'es' if len(inputs) != 1 else ''} merged into {ns.output}", file=sys.stderr)
    for d in inputs:
        renamed = f" (was {d['original_pid']})" if d["pid"] != d["original_pid"] else ""
        start = d["start_ns"] + d["shift_ns"] - other["origin_ns"]
        name = f" {d['process_name']!r}" if d.get("process_name") else ""
        print(f"  pid {d['pid']}{renamed}{name}: {d['source']}, starts at +{ms(start)}",
              file=sys.stderr)
    return 0
