"""frametrace.reports.compare on real traces: two runs of one program in
which one function was made slower, written as trace files (JSON and
.pftrace) and as datasets, and sessions' steps and cycles; the datasets'
outermost column against the summary's total time."""
import os
import threading

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


def needs_data_engines():
    pytest.importorskip("pyarrow", reason="the datasets are written with pyarrow")
    pytest.importorskip("duckdb", reason="datasets are read with DuckDB (frametrace[sql])")


def test_datasets_agree_with_trace_files(tmp_path):
    needs_data_engines()
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


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def is_even(n):
    return True if n == 0 else is_odd(n - 1)


def is_odd(n):
    return False if n == 0 else is_even(n - 1)


def recursive_program():
    """Direct and mutual recursion, on the main thread and on two threads
    at once (a function open on one thread is outermost on another)."""
    threads = [threading.Thread(target=lambda: [fib(9), is_even(12)], name=f"t{i}")
               for i in range(2)]
    for t in threads:
        t.start()
    fib(10)
    is_odd(15)
    for t in threads:
        t.join()


def totals_by_outermost(root):
    rows = frametrace.sql("select name, file, line, kind, sum(dur_ns) filter (where outermost) "
                          "from events group by all", root)
    return {tuple(r[:4]): r[4] or 0 for r in rows}


def summary_totals(trace):
    return {(r.name, r.filename, r.lineno, r.kind): r.total_ns
            for r in reports.summary(trace, limit=None)}


def test_outermost_column_sums_to_the_summarys_total(tmp_path):
    needs_data_engines()
    with frametrace.trace() as tracer:
        recursive_program()
    trace = frametrace.as_trace(tracer)
    assert len({e.thread_serial for e in trace.events if e.name.endswith("fib")}) == 3
    root = trace.save(str(tmp_path / "run.parquet"))
    want = summary_totals(trace)
    names = {k[0].rsplit(".", 1)[-1]: v for k, v in want.items()}
    # Recursion's inner calls are not counted twice: fib's total is less
    # than the sum of its calls' durations.
    (fib_durs,), = frametrace.sql("select sum(dur_ns) from events where name like '%fib'", root)
    assert names["fib"] < fib_durs
    assert totals_by_outermost(root) == want
    sets = reports.compare(root, root, limit=None)
    assert {(r.name, r.filename, r.lineno, r.kind): r.total_after for r in sets.rows} == want


def test_outermost_follows_parents_of_events_out_of_call_order(tmp_path):
    needs_data_engines()

    def ev(name, serial, start, end, depth, parent):
        return frametrace.Event((name, "m.py", 1, "py", serial, serial, start, end, depth,
                                 parent, False, False, serial, False))
    events = [ev("a", 1, 0, 100, 0, -1), ev("a", 1, 10, 50, 1, 0), ev("b", 1, 20, 30, 2, 1),
              ev("a", 2, 5, 60, 0, -1),  # another thread: outermost there
              ev("a", 1, 60, 90, 1, 0),
              ev("a", 1, 40, 45, 2, 1)]  # its parent no longer on the stack
    trace = frametrace.as_trace(events)
    root = trace.save(str(tmp_path / "odd.parquet"))
    got = frametrace.sql("select outermost from events order by id", root)
    assert [r[0] for r in got] == [True, False, True, True, False, False]
    assert totals_by_outermost(root) == summary_totals(trace)


def drop_outermost(root):
    """root's events files as a writer without the column wrote them."""
    import pyarrow.parquet as pq

    for folder, _, files in os.walk(os.path.join(root, "events")):
        for f in files:
            path = os.path.join(folder, f)
            pq.write_table(pq.read_table(path).drop_columns(["outermost"]), path)


def test_datasets_written_without_the_column_still_compare(tmp_path):
    needs_data_engines()
    with frametrace.trace() as tracer:
        recursive_program()
    trace = frametrace.as_trace(tracer)
    want = summary_totals(trace)
    new = trace.save(str(tmp_path / "new.parquet"))
    old = trace.save(str(tmp_path / "old.parquet"))
    drop_outermost(old)
    with pytest.raises(ValueError, match="outermost"):  # SQLError: no such column
        frametrace.sql("select outermost from events", old)
    report = reports.compare(old, new, limit=None)
    assert {(r.name, r.filename, r.lineno, r.kind): (r.total_before, r.total_after)
            for r in report.rows} == {k: (v, v) for k, v in want.items()}
    # Old and new files in one dataset (a writer only adds): each counted
    # by its own rule.
    trace.cycle = 1
    trace.save(old)
    report = reports.compare(old, new, limit=None)
    assert {(r.name, r.filename, r.lineno, r.kind): r.total_before
            for r in report.rows} == {k: 2 * v for k, v in want.items()}
    assert {r.total_before for r in reports.compare(old, new, cycle=0, limit=None).rows} \
        == set(want.values())
