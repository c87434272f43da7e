"""frametrace.reports.compare on real traces: two runs of one program in
which one function was made slower, written as trace files (JSON and
.pftrace) and as datasets, and sessions' steps and cycles."""
import pytest

import frametrace
from frametrace import reports


def spin(n):
    total = 0
    for i in range(n):
        total += i * i
    return total


def steady():
    return spin(20_000)


def changed(n):
    return spin(n)


def program(slow):
    for _ in range(3):
        steady()
        changed(200_000 if slow else 20_000)


def record(slow):
    with frametrace.trace() as tracer:
        program(slow)
    return tracer


@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".pftrace"])
def test_the_slowed_function_comes_first(tmp_path, suffix):
    before = frametrace.as_trace(record(False)).save(str(tmp_path / f"before{suffix}"))
    after = frametrace.as_trace(record(True)).save(str(tmp_path / f"after{suffix}"))
    report = reports.compare(before, after)
    # spin's own loop is what grows; changed() calls it, so its total grows.
    top = report.rows[0]
    assert top.name.endswith("spin") and top.self_change > 0
    assert (top.calls_before, top.calls_after) == (6, 6)
    row = next(r for r in report.rows if r.name.endswith("changed"))
    assert row.total_after > 2 * row.total_before
    assert "spin" in str(report).split("function\n", 1)[1].splitlines()[0]
    assert report.before_steps.steps == 0 and "-" in str(report)


def test_steps_and_cycles_of_sessions(tmp_path):
    runs = []
    for slow in (False, True):
        got = []
        with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=2,
                                                             repeat=1),
                                on_trace_ready=got.append) as prof:
            for _ in range(2):
                changed(200_000 if slow else 20_000)
                prof.step()
        assert len(got) == 1
        runs.append(got[0])
    before, after = runs
    report = reports.compare(before, after, cycle=before.cycle)
    assert report.before_steps.steps == report.after_steps.steps == 2
    assert report.after_steps.median > report.before_steps.median
    assert report.before_steps.min <= report.before_steps.p90 <= report.before_steps.max
    with pytest.raises(ValueError, match="cycle"):
        reports.compare(before, after, cycle=before.cycle + 1)


def test_datasets_agree_with_trace_files(tmp_path):
    pytest.importorskip("pyarrow", reason="the datasets are written with pyarrow")
    pytest.importorskip("duckdb", reason="datasets are read with DuckDB (frametrace[sql])")
    sides = []
    for slow in (False, True):
        trace = frametrace.as_trace(record(slow))
        path = str(tmp_path / f"{slow}")
        trace.save(path + ".json")
        trace.save(path + ".parquet")
        sides.append(path)
    files = reports.compare(sides[0] + ".json", sides[1] + ".json", limit=None)
    sets = reports.compare(sides[0] + ".parquet", sides[1] + ".parquet", limit=None)
    assert [r.function for r in sets.rows][:1] == [r.function for r in files.rows][:1]
    key = lambda r: (r.name, r.filename, r.lineno, r.kind)  # noqa: E731
    assert {key(r): r[4:] for r in sets.rows} == {key(r): r[4:] for r in files.rows}
