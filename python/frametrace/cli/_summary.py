"""``frametrace summary``: prints a per-function table of a trace file."""
from __future__ import annotations

import argparse
from typing import Any

from ._common import CommandError, count_threads, load, ms, non_negative


def add_parser(sub: Any) -> argparse.ArgumentParser:
    from ..reports import SORT_KEYS

    summ = sub.add_parser("summary", help="print a per-function table of a trace",
                          description="Print a per-function table of a trace file "
                                      "(calls, total, self and mean time, share), and one "
                                      "of torch's ops when it has them (frametrace.torch).")
    summ.add_argument("trace", help="a trace frametrace wrote (.json or .json.gz)")
    summ.add_argument("--sort", choices=SORT_KEYS, default="self", help="order (default self)")
    summ.add_argument("--limit", type=non_negative, default=30, metavar="N",
                      help="at most N functions (default 30; 0: all)")
    summ.add_argument("--per-thread", action="store_true", help="a table per thread")
    summ.add_argument("--group-by-input-shape", action="store_true",
                      help="torch's ops: a row per op and input shapes (record_shapes)")
    return summ


def run(ns: argparse.Namespace) -> int:
    from .. import reports
    from ..loader import MergedTrace

    try:
        trace = load(ns.trace)
    except (OSError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    threads = count_threads(trace.events)
    what = (f"{len(trace.processes)} processes" if isinstance(trace, MergedTrace)
            else f"pid {trace.pid}")
    span = ""
    if trace.tracer_start_ns is not None and trace.tracer_stop_ns is not None:
        span = f", traced for {ms(trace.tracer_stop_ns - trace.tracer_start_ns)}"
    extra = f", {len(trace.ranges)} ranges, {len(trace.steps)} steps" if trace.ranges or trace.steps else ""
    dropped = f", {trace.stats.dropped:,} dropped" if trace.stats.dropped else ""
    print(f"{ns.trace}: {what}, {len(trace.events):,} events, {threads} "
          f"thread{'s' if threads != 1 else ''}{span}{extra}{dropped}")
    table = reports.summary(trace, sort=ns.sort, limit=ns.limit or None, per_thread=ns.per_thread,
                            group_by_input_shape=ns.group_by_input_shape)
    print(table)
    return 0
