"""``frametrace convert``: trace files into a Parquet dataset."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ._common import PROG, CommandError, Progress


def add_parser(sub: Any) -> argparse.ArgumentParser:
    convert = sub.add_parser(
        "convert", help="turn trace files into a Parquet dataset",
        description="Add the traces of .json, .json.gz or .pftrace files to a Parquet "
                    "dataset (a directory, partitioned by rank and cycle, which DuckDB, "
                    "Spark, Polars and pyarrow read), one file at a time.  Needs "
                    "pip install 'frametrace[data]'.")
    convert.add_argument("traces", nargs="+", metavar="trace.json",
                         help="the traces to convert")
    convert.add_argument("-o", "--output", required=True, metavar="DIR.parquet",
                         help="the dataset's directory (made if missing; files are added)")
    return convert


def run(ns: argparse.Namespace) -> int:
    from .._convert_stream import convert_file
    from .._dataset import check_available

    try:
        check_available()
    except ImportError as exc:
        raise CommandError(str(exc)) from None
    total, started = 0, time.monotonic()
    for path in ns.traces:
        try:
            progress = Progress(f"{PROG}: reading {path}")
            try:
                count = convert_file(path, ns.output, progress=progress)
            finally:
                progress.close()
        except (OSError, ValueError, TypeError) as exc:
            text = str(exc)
            raise CommandError(text if path in text else f"{path}: {text}") from None
        total += count
        print(f"{PROG}: {count:,} events of {path} added to {ns.output}", file=sys.stderr)
    seconds = time.monotonic() - started
    print(f"{PROG}: {total:,} events of {len(ns.traces)} file"
          f"{'s' if len(ns.traces) != 1 else ''} in {seconds:.2f} s", file=sys.stderr)
    return 0
