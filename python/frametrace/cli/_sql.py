"""``frametrace sql``: runs a query on DuckDB over datasets and prints the
result (an aligned table, CSV or JSON)."""
from __future__ import annotations

import argparse
import csv
import json
import sys
from typing import Any

from ._common import CommandError


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("sql", help="run SQL over trace datasets (DuckDB)",
                       description="Run a SQL query on DuckDB (pip install 'frametrace[sql]') "
                                   "over datasets, with the views events, steps, threads, "
                                   "ranges, torch_ops and metadata (each with its rank and "
                                   "cycle columns) over all PATHS.")
    p.add_argument("query", help="the SQL query")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="dataset directories (or trace files, written as a dataset first)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="table: aligned text (default); csv; json: a list of objects")
    return p


def _text(value: Any) -> str:
    return "NULL" if value is None else str(value)


def _table(names: list[str], rows: list[tuple]) -> str:
    cells = [[_text(v) for v in row] for row in rows]
    widths = [max(len(n), *(len(r[i]) for r in cells)) if cells else len(n)
              for i, n in enumerate(names)]
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows)
               for i in range(len(names))]

    def line(vals: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(vals, widths, numeric)).rstrip()

    out = [line(names), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)


def run(ns: argparse.Namespace) -> int:
    from .._sql import SQLError, connect, run_query

    try:
        with connect(ns.paths) as con:
            result = run_query(con, ns.query)
            names = [d[0] for d in result.description] if result.description else []
            rows = result.fetchall() if names else []
    except (ImportError, SQLError, OSError) as exc:
        raise CommandError(str(exc)) from None
    if ns.format == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows(rows)
    elif ns.format == "json":
        json.dump([dict(zip(names, row)) for row in rows], sys.stdout, default=str, indent=1)
        print()
    else:
        print(_table(names, rows))
    return 0
