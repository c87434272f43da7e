"""The sql, ranks and compare commands in real processes: output formats,
exit status and messages of bad input, the heat map, and compare of two
runs of a program made slower in one function."""
import csv
import io
import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import pytest

# Most of these read synthetic datasets: no tracer runs, nothing that a
# setup changes.  The tests that run a program under `frametrace run` take
# each setup (the clock fixture).


def cli(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "frametrace", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def job(tmp_path):
    pytest.importorskip("pyarrow", reason="the datasets are written with pyarrow")
    pytest.importorskip("duckdb", reason="SQL runs on DuckDB (frametrace[sql])")
    from dataset_rows import synthetic_ranks

    return synthetic_ranks(str(tmp_path / "job.parquet"))


QUERY = "select rank, count(*) as n, max(name) as last from events group by rank order by rank"


def test_sql_prints_a_table_csv_and_json(job):
    proc = cli("sql", QUERY, job)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["rank", "n", "last"]
    assert lines[2].split() == ["0", "15", "train_step"]
    assert lines[-1] == "(4 rows)"
    assert lines[0].index("last") == lines[2].index("train_step")  # aligned
    assert lines[0].index("n ") + 1 == lines[2].index("15 ") + 2  # numbers to the right
    proc = cli("sql", QUERY, job, "--format", "csv")
    assert list(csv.reader(io.StringIO(proc.stdout)))[:3] == [
        ["rank", "n", "last"], ["0", "15", "train_step"], ["1", "15", "train_step"]]
    proc = cli("sql", QUERY, job, "--format", "json")
    assert json.loads(proc.stdout)[2] == {"rank": 2, "n": 16, "last": "train_step"}


@pytest.mark.parametrize("command", [["sql", "select * from range(200000)"], ["ranks"]])
def test_a_reader_that_goes_away_ends_the_report_quietly(job, command):
    """``| head -1``: the report stops at the closed pipe, exit 1, no
    traceback."""
    proc = subprocess.run(f"{sys.executable} -m frametrace {command[0]} "
                          f"{' '.join(repr(a) for a in command[1:])} {job} | head -c 1",
                          shell=True, capture_output=True, text=True, timeout=300,
                          executable="/bin/bash")
    assert proc.stderr == "" and len(proc.stdout) == 1


def test_bad_sql_and_bad_paths_exit_2_without_a_traceback(job, tmp_path):
    proc = cli("sql", "select nope from events", job)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("frametrace sql: ") and "nope" in proc.stderr
    assert "Traceback" not in proc.stderr
    (tmp_path / "notes.txt").write_text("hello")
    for path, says in ((tmp_path / "missing", "no such dataset"),
                       (tmp_path / "notes.txt", "not a dataset")):
        proc = cli("sql", "select 1", path)
        assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr


def test_missing_duckdb_names_the_extra(tmp_path):
    (tmp_path / "duckdb.py").write_text("raise ImportError('no duckdb here')\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    for args in (("sql", "select 1", tmp_path), ("ranks", tmp_path)):
        proc = cli(*args, env=env)
        assert proc.returncode == 2, proc.stderr
        assert "pip install 'frametrace[sql]'" in proc.stderr and "Traceback" not in proc.stderr


def test_ranks_prints_the_straggler_and_writes_the_heat_map(job, tmp_path):
    svg = tmp_path / "heat.svg"
    proc = cli("ranks", job, "--svg", svg)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.split()[:1] == ["3"])
    assert row.split()[-3:] == ["rank", "2", "+200.0%"]
    assert "step 3: rank 2 (straggler)" in proc.stdout
    assert "+200.000" in proc.stdout and "slow_io (train.py:22)" in proc.stdout
    cells = [e for e in ET.parse(svg).iter("{http://www.w3.org/2000/svg}rect")
             if e.get("class") == "cell"]
    assert len(cells) == 4 * 5


PROGRAM = textwrap.dedent('''\
    import sys

    def spin(n):
        total = 0
        for i in range(n):
            total += i * i
        return total

    def steady():
        return spin(30_000)

    def grows():
        total = 0
        for i in range(int(sys.argv[1])):
            total += i
        return total

    for _ in range(3):
        steady()
        grows()
''')


@pytest.mark.usefixtures("clock")
def test_compare_names_the_function_made_slower(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    for name, n in (("before", 30_000), ("after", 300_000)):
        proc = cli("run", "-o", f"{name}.json", "prog.py", n, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    proc = cli("compare", "before.json", "after.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("  function\n", 1)[1].splitlines()
    assert table[0].split()[0].startswith("+") and table[0].endswith("grows (prog.py:12)")
    assert table[0].split()[-4:-2] == ["3", "3"]  # calls before, after
    proc = cli("compare", "before.json", "after.json", "--cycle", "1", cwd=tmp_path)
    assert proc.returncode == 2 and "cycle 0, not 1" in proc.stderr
    proc = cli("compare", "before.json", "missing.json", cwd=tmp_path)
    assert proc.returncode == 2 and "missing.json" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.usefixtures("clock")
def test_sql_over_trace_files(tmp_path):
    pytest.importorskip("duckdb", reason="SQL runs on DuckDB (frametrace[sql])")
    (tmp_path / "prog.py").write_text(PROGRAM)
    proc = cli("run", "-o", "t.json", "prog.py", 1000, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    import frametrace

    trace = frametrace.load(str(tmp_path / "t.json"))
    try:
        trace.save(str(tmp_path / "probe.parquet"))
    except (ValueError, ImportError) as exc:
        writer = f"no Parquet writer here ({exc})"
    else:
        writer = None
    proc = cli("sql", "select count(*) as n, count(distinct pid) as p from events", "t.json",
               "--format", "csv", cwd=tmp_path)
    if writer is not None:  # the file cannot become a dataset: said plainly
        assert proc.returncode == 2 and "convert it to a dataset first" in proc.stderr, writer
        assert "Traceback" not in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == f"{len(trace.events)},1"
