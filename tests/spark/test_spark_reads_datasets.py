"""Spark (local mode) reads a dataset frametrace wrote, with no schema or
option given but the path, and its answer to one query equals DuckDB's
through frametrace.sql."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

REQUIRED = bool(os.environ.get("FRAMETRACE_SPARK_REQUIRED"))


def _need(ok: bool, why: str) -> None:
    if not ok:
        if REQUIRED:
            pytest.fail(f"spark tests required (FRAMETRACE_SPARK_REQUIRED) but {why}",
                        pytrace=False)
        pytest.skip(why)


try:
    import pyspark  # noqa: F401
    HAVE_PYSPARK = True
except ImportError:
    HAVE_PYSPARK = False

PROGRAM = textwrap.dedent("""
    import frametrace

    def slow(n):
        return sum(range(n))

    def train_step(i):
        return slow(20_000 * (1 + i % 3))

    for i in range(6):
        train_step(i)
        frametrace.step()
""")

QUERY = ("select rank, cycle, name, count(*) as calls, sum(self_ns) as self_ns "
         "from events group by rank, cycle, name order by rank, cycle, name")


@pytest.fixture(scope="module")
def spark():
    _need(HAVE_PYSPARK, "pyspark is not installed")
    _need(shutil.which("java") is not None, "no Java on PATH (Spark runs on the JVM)")
    pytest.importorskip("duckdb", reason="the answer is compared with DuckDB's")
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("frametrace-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    yield session
    session.stop()


def frametrace_cli(*args, rank):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE="3")
    done = subprocess.run([sys.executable, "-m", "frametrace", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A stepped program's cycles on three ranks, as a job writes them:
    ranks 0 and 1 straight into the dataset, rank 2 as JSON files that
    convert adds."""
    pytest.importorskip("pyarrow", reason="datasets are written with pyarrow")
    d = tmp_path_factory.mktemp("spark")
    (d / "train.py").write_text(PROGRAM)
    out = d / "job.parquet"
    steps = ["--steps", "wait=0,warmup=0,active=2"]
    for rank in (0, 1):
        frametrace_cli("run", *steps, "-o", out, d / "train.py", rank=rank)
    frametrace_cli("run", *steps, "-o", d / "r2.json", d / "train.py", rank=2)
    files = sorted(p for p in d.iterdir() if p.name.startswith("r2") and p.suffix == ".json")
    assert len(files) >= 3, files
    frametrace_cli("convert", *files, "-o", out, rank=2)
    return str(out)


def test_spark_reads_a_dataset_as_duckdb_does(spark, dataset):
    import frametrace

    spark.read.parquet(os.path.join(dataset, "events")).createOrReplaceTempView("events")
    theirs = [tuple(row) for row in spark.sql(QUERY).collect()]
    ours = [tuple(row) for row in frametrace.sql(QUERY, [dataset])]
    assert theirs == ours
    cycles = {(rank, cycle) for rank, cycle, *_ in ours}
    assert {rank for rank, _ in cycles} == {0, 1, 2} and len(cycles) >= 9
    assert all(calls == 2 for _, cycle, name, calls, _ in ours if name == "slow" and cycle < 3)


def test_spark_reads_every_table_with_its_partitions(spark, dataset):
    for table in ("events", "steps", "threads", "ranges", "torch_ops", "metadata"):
        frame = spark.read.parquet(os.path.join(dataset, table))
        assert {"rank", "cycle"} <= set(frame.columns), table
    steps = spark.read.parquet(os.path.join(dataset, "steps"))
    assert steps.filter("dur_ns <= 0").count() == 0
    assert steps.count() == len(frametrace_steps(dataset))


def frametrace_steps(dataset):
    import frametrace

    return frametrace.sql("select step from steps", [dataset])
