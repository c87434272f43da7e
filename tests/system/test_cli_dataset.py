"""frametrace convert and run -o x.parquet, in subprocesses: datasets from
trace files, and the refusal before the program runs without pyarrow."""
import os
import subprocess
import sys

import pytest

import frametrace

pytestmark = pytest.mark.usefixtures("clock")

PROGRAM = '''
import sys, threading
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
t = threading.Thread(target=fib, args=(8,))
t.start(); t.join(); fib(9)
open(sys.argv[1], "w").close()
'''


def cli(*args, cwd, hide_pyarrow=False):
    """python -m frametrace args..., with pyarrow made unimportable
    (a module of that name that raises first on the path) if asked."""
    package_root = os.path.dirname(os.path.dirname(frametrace.__file__))
    path = [package_root]
    if hide_pyarrow:
        hidden = cwd / "hidden"
        hidden.mkdir(exist_ok=True)
        (hidden / "pyarrow.py").write_text("raise ImportError('hidden by the test')\n")
        path.insert(0, str(hidden))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    return subprocess.run([sys.executable, "-m", "frametrace", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)


def test_run_to_a_parquet_output_is_refused_before_the_program_without_pyarrow(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    proc = cli("run", "-o", "out.parquet", "prog.py", "ran", cwd=tmp_path, hide_pyarrow=True)
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'frametrace[data]'" in proc.stderr
    assert not (tmp_path / "ran").exists()  # the program never ran
    assert not (tmp_path / "out.parquet").exists()


def test_convert_without_pyarrow_says_what_to_install(tmp_path):
    proc = cli("convert", "x.json", "-o", "d", cwd=tmp_path, hide_pyarrow=True)
    assert proc.returncode == 2
    assert "pip install 'frametrace[data]'" in proc.stderr


def _table(root, name, order):
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (frametrace[data])")
    duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed")
    rel = duckdb.sql(f"SELECT * FROM read_parquet('{root}/{name}/**/*.parquet', "
                     f"hive_partitioning=true) ORDER BY {order}")
    return [dict(zip(rel.columns, row)) for row in rel.fetchall()]


def test_run_writes_a_dataset_and_convert_of_its_json_and_pftrace_are_equal(tmp_path):
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (frametrace[data])")
    (tmp_path / "prog.py").write_text(PROGRAM)
    proc = cli("run", "-o", "out.parquet", "prog.py", "ran", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Perfetto UI" not in proc.stderr and "a Parquet dataset" in proc.stderr
    events = _table(tmp_path / "out.parquet", "events", "id")
    assert sum(e["name"] == "fib" for e in events) > 100
    assert len({e["thread"] for e in events}) == 2
    # One recording in both file formats, converted: equal tables.
    tracer = frametrace.Tracer()
    with tracer:
        exec(compile(PROGRAM.replace("open(sys.argv[1], \"w\").close()", ""), "prog.py", "exec"),
             {"__name__": "prog"})
    trace = frametrace.as_trace(tracer)
    trace.cycle = 2
    trace.distributed = {"rank": 3}
    trace.save(tmp_path / "t.json")
    trace.save(tmp_path / "t.json.gz")
    trace.save(tmp_path / "t.pftrace")
    for name in ("t.json", "t.json.gz", "t.pftrace"):
        proc = cli("convert", name.replace("t.", "t.rank3."), "-o", name + ".parquet",
                   cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    for table, order in (("events", "id"), ("threads", "thread"), ("steps", "step"),
                         ("ranges", "start_ns")):
        from_json = _table(tmp_path / "t.json.parquet", table, order)
        assert from_json == _table(tmp_path / "t.pftrace.parquet", table, order), table
        assert from_json == _table(tmp_path / "t.json.gz.parquet", table, order), table
    assert len(from_json := _table(tmp_path / "t.json.parquet", "events", "id")) == \
        len(trace.events)
    assert {(e["rank"], e["cycle"]) for e in from_json} == {(3, 2)}


@pytest.mark.parametrize("content", [b"", b"{\"traceEvents\": [", b"\x00\xff garbage",
                                     b"[{\"ph\": \"X\", \"ts\": \"soon\"}]"])
def test_convert_of_a_file_that_is_no_trace_names_it(tmp_path, content):
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (frametrace[data])")
    (tmp_path / "bad.json").write_bytes(content)
    proc = cli("convert", "bad.json", "-o", "d.parquet", cwd=tmp_path)
    assert proc.returncode == 2
    assert "frametrace convert: bad.json" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_steps_writes_each_cycle_as_a_partition_of_the_dataset(tmp_path):
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (frametrace[data])")
    (tmp_path / "loop.py").write_text(
        "import frametrace\n"
        "def work(n):\n"
        "    return sum(range(n))\n"
        "for _ in range(6):\n"
        "    work(100)\n"
        "    frametrace.step()\n")
    proc = cli("run", "--steps", "wait=0,warmup=0,active=1,repeat=3", "-o", "loop.parquet",
               "loop.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path / "loop.parquet" / "steps" / "rank=0")) == [
        "cycle=0", "cycle=1", "cycle=2"]
    steps = _table(tmp_path / "loop.parquet", "steps", "cycle")
    assert [(s["cycle"], s["step"]) for s in steps] == [(0, 0), (1, 1), (2, 2)]
    assert not [p for p in os.listdir(tmp_path) if p.startswith("loop.") and p != "loop.py"
                and p != "loop.parquet"]  # no per-cycle names beside it
