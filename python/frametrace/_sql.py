"""SQL over frametrace datasets on DuckDB (the optional ``sql`` extra):
the dataset layout's tables as views, over any number of datasets.

    rows = frametrace.sql("select rank, count(*) from events group by rank",
                          ["run.parquet"])

A path is a dataset directory (one sub-directory per table, hive-partitioned
by rank and cycle), or a single trace file (.json, .json.gz, .pftrace),
which is loaded and written as a dataset in a temporary directory first.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator, Sequence, Union

PathLike = Union[str, "os.PathLike[str]"]

INSTALL_HINT = "pip install 'frametrace[sql]'"

# The dataset layout's tables and their columns (DuckDB types), for the
# view of a table no dataset has files of: queries still bind.
TABLES: dict[str, tuple[tuple[str, str], ...]] = {
    "events": (("pid", "BIGINT"), ("thread", "INTEGER"), ("tid", "BIGINT"),
               ("thread_name", "VARCHAR"), ("id", "BIGINT"), ("parent", "BIGINT"),
               ("depth", "INTEGER"), ("name", "VARCHAR"), ("file", "VARCHAR"),
               ("line", "INTEGER"), ("kind", "VARCHAR"), ("start_ns", "BIGINT"),
               ("end_ns", "BIGINT"), ("dur_ns", "BIGINT"), ("self_ns", "BIGINT"),
               ("step", "INTEGER"), ("open_at_start", "BOOLEAN"),
               ("open_at_stop", "BOOLEAN"), ("outermost", "BOOLEAN")),
    "steps": (("pid", "BIGINT"), ("step", "INTEGER"), ("name", "VARCHAR"),
              ("start_ns", "BIGINT"), ("end_ns", "BIGINT"), ("dur_ns", "BIGINT")),
    "threads": (("pid", "BIGINT"), ("thread", "INTEGER"), ("tid", "BIGINT"),
                ("name", "VARCHAR"), ("events", "BIGINT"), ("dropped", "BIGINT")),
    "ranges": (("pid", "BIGINT"), ("thread", "INTEGER"), ("tid", "BIGINT"),
               ("name", "VARCHAR"), ("start_ns", "BIGINT"), ("end_ns", "BIGINT"),
               ("dur_ns", "BIGINT"), ("open_at_start", "BOOLEAN"),
               ("open_at_end", "BOOLEAN")),
    "torch_ops": (("pid", "BIGINT"), ("thread", "INTEGER"), ("tid", "BIGINT"),
                  ("name", "VARCHAR"), ("track", "VARCHAR"), ("start_ns", "BIGINT"),
                  ("end_ns", "BIGINT"), ("dur_ns", "BIGINT"), ("args", "VARCHAR")),
    "metadata": (("pid", "BIGINT"), ("key", "VARCHAR"), ("value", "VARCHAR")),
}
PARTITIONS = (("rank", "BIGINT"), ("cycle", "BIGINT"))

TRACE_SUFFIXES = (".json", ".json.gz", ".pftrace", ".pftrace.gz")


class SQLError(ValueError):
    """DuckDB refused a query (its message), or a path is not a dataset."""


def duckdb_module() -> Any:
    """DuckDB, imported on first use; ImportError naming the extra."""
    try:
        import duckdb
    except ImportError:
        raise ImportError(f"frametrace's SQL needs DuckDB: {INSTALL_HINT}") from None
    return duckdb


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _has_parquet(folder: str) -> bool:
    for _, _, files in os.walk(folder):
        if any(f.endswith(".parquet") for f in files):
            return True
    return False


def _view(con: Any, table: str, dirs: Sequence[str]) -> None:
    folders = [os.path.join(d, table) for d in dirs if _has_parquet(os.path.join(d, table))]
    if not folders:
        cols = ", ".join(f"CAST(NULL AS {t}) AS {c}" for c, t in TABLES[table] + PARTITIONS)
        con.execute(f"CREATE VIEW {table} AS SELECT {cols} WHERE false")
        return
    globs = ", ".join(_quote(os.path.join(f, "**", "*.parquet")) for f in folders)
    types = ", ".join(f"{c}: {t}" for c, t in PARTITIONS)
    con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet([{globs}], "
                f"hive_partitioning = true, union_by_name = true, hive_types = {{{types}}})")


def _as_dataset(path: str, scratch: str) -> str:
    """A single trace file as a dataset in scratch, through Trace.save's
    Parquet writer."""
    from .loader import load

    trace = load(path)
    target = os.path.join(scratch, f"{len(os.listdir(scratch))}.parquet")
    try:
        return trace.save(target)
    except ValueError as exc:
        raise SQLError(f"{path}: a trace file cannot be queried here ({exc}); convert it to a "
                       f"dataset first") from None


def _dataset_dirs(paths: Any, scratch: list[str]) -> list[str]:
    if isinstance(paths, (str, bytes, os.PathLike)):
        paths = [paths]
    dirs = []
    for p in paths:
        p = os.fspath(p)
        if isinstance(p, bytes):
            p = os.fsdecode(p)
        if os.path.isdir(p):
            dirs.append(p)
        elif os.path.isfile(p) and p.endswith(TRACE_SUFFIXES):
            if not scratch:
                scratch.append(tempfile.mkdtemp(prefix="frametrace-sql-"))
            dirs.append(_as_dataset(p, scratch[0]))
        elif os.path.exists(p):
            raise SQLError(f"{p}: not a dataset directory nor a trace file "
                           f"({', '.join(TRACE_SUFFIXES)})")
        else:
            raise SQLError(f"{p}: no such dataset or trace file")
    if not dirs:
        raise SQLError("no dataset given")
    return dirs


@contextmanager
def connect(paths: Any) -> Iterator[Any]:
    """An in-memory DuckDB connection with the views events, steps,
    threads, ranges, torch_ops and metadata over all paths (each table's
    rows of every dataset, with their rank and cycle columns)."""
    duckdb = duckdb_module()
    scratch: list[str] = []
    try:
        dirs = _dataset_dirs(paths, scratch)
        con = duckdb.connect(":memory:")
        try:
            for table in TABLES:
                _view(con, table, dirs)
            yield con
        finally:
            con.close()
    finally:
        if scratch:
            shutil.rmtree(scratch[0], ignore_errors=True)


def run_query(con: Any, query: str, params: Any = None) -> Any:
    """con.execute(query), DuckDB's errors as SQLError with its message."""
    duckdb = duckdb_module()
    try:
        return con.execute(query, params) if params is not None else con.execute(query)
    except duckdb.Error as exc:
        raise SQLError(str(exc)) from None


def sql(query: str, paths: Any, *, frame: bool = False) -> Any:
    """Runs query on DuckDB over the datasets at paths (a path or a list:
    dataset directories, or single trace files) with the views events,
    steps, threads, ranges, torch_ops and metadata ready; returns the rows
    as a list of tuples, or with frame=True a pandas DataFrame (a
    pyarrow.Table where pandas is not installed; None for a statement
    that returns no rows).  SQLError (a
    ValueError) with DuckDB's message for a bad query; ImportError without
    DuckDB (``pip install 'frametrace[sql]'``)."""
    if not isinstance(query, str):
        raise TypeError(f"query must be a str, not {type(query).__name__}")
    with connect(paths) as con:
        if not frame:
            result = run_query(con, query)
            return result.fetchall() if result.description else []
        # A relation (con.sql) converts without the DB-API result's copy.
        try:
            rel = con.sql(query)
        except duckdb_module().Error as exc:
            raise SQLError(str(exc)) from None
        if rel is None:
            return None
        try:
            import pandas
        except ImportError:
            return rel.to_arrow_table()
        del pandas  # DuckDB makes the DataFrame; only pandas' presence matters
        return rel.df()
