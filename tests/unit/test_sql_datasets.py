"""frametrace.sql and the ranks report over datasets in frametrace's layout
(written by the tests' dataset_rows), on DuckDB; and the docs' ready
queries, each run on a dataset whose answer is known."""
import sys
import xml.etree.ElementTree as ET

import pytest

pytest.importorskip("pyarrow", reason="the datasets are written with pyarrow (frametrace[data])")
pytest.importorskip("duckdb", reason="SQL runs on DuckDB (frametrace[sql])")

import frametrace  # noqa: E402
from frametrace import reports  # noqa: E402
from frametrace._sql import SQLError  # noqa: E402
from dataset_rows import synthetic_ranks, write_table  # noqa: E402

MS = 1_000_000


@pytest.fixture
def four_ranks(tmp_path):
    return synthetic_ranks(str(tmp_path / "job.parquet"))


def test_views_answer_a_count_query_over_every_rank(four_ranks):
    rows = frametrace.sql("select rank, count(*) from events group by rank order by rank",
                          four_ranks)
    # 5 steps x (train_step, forward, backward), and slow_io once on rank 2.
    assert rows == [(0, 15), (1, 15), (2, 16), (3, 15)]
    assert frametrace.sql("select count(*) from steps", [four_ranks]) == [(20,)]
    assert frametrace.sql("select count(*), min(cycle) from metadata", four_ranks) == [(4, 0)]


def test_views_span_several_datasets_and_tables_without_files(tmp_path):
    a = synthetic_ranks(str(tmp_path / "a.parquet"), ranks=2)
    b = synthetic_ranks(str(tmp_path / "b.parquet"), ranks=1)
    assert frametrace.sql("select count(*) from steps", [a, b]) == [(15,)]
    # No dataset has torch ops or ranges: the views exist, empty, typed.
    assert frametrace.sql("select count(*), sum(dur_ns) from torch_ops", [a, b]) == [(0, None)]
    assert frametrace.sql("select rank, cycle, open_at_end from ranges", a) == []


def test_frame_is_a_dataframe_or_arrow_table(four_ranks):
    frame = frametrace.sql("select name, sum(self_ns) as s from events group by name order by name",
                           four_ranks, frame=True)
    try:
        import pandas
    except ImportError:
        import pyarrow
        assert isinstance(frame, pyarrow.Table)
        names = frame.column("name").to_pylist()
    else:
        assert isinstance(frame, pandas.DataFrame)
        names = frame["name"].tolist()
    assert names == ["backward", "forward", "slow_io", "train_step"]


def test_frame_without_pandas_is_an_arrow_table(four_ranks, monkeypatch):
    import pyarrow
    monkeypatch.setitem(sys.modules, "pandas", None)
    table = frametrace.sql("select count(*) as n from steps", four_ranks, frame=True)
    assert isinstance(table, pyarrow.Table) and table.to_pylist() == [{"n": 20}]


def test_bad_sql_raises_duckdbs_message(four_ranks):
    with pytest.raises(SQLError, match="no_such_table"):
        frametrace.sql("select * from no_such_table", four_ranks)
    with pytest.raises(SQLError, match="no such dataset"):
        frametrace.sql("select 1", four_ranks + "-missing")


def test_missing_duckdb_names_the_extra(four_ranks, monkeypatch):
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(ImportError, match=r"pip install 'frametrace\[sql\]'"):
        frametrace.sql("select 1", four_ranks)


def test_ranks_names_the_straggler_and_its_slow_function(four_ranks):
    report = reports.ranks(four_ranks)
    assert report.ranks == [0, 1, 2, 3]
    assert [s.step for s in report.steps] == [0, 1, 2, 3, 4]
    for s in report.steps:
        assert set(s.durations) == {0, 1, 2, 3}
        if s.step != 3:
            assert s.excess == 0 and not s.functions
    s3 = report.steps[3]
    assert s3.straggler == 2 and s3.straggler_ns == 300 * MS
    assert s3.median_ns == 100 * MS and s3.excess == pytest.approx(2.0)
    assert s3.median_rank != 2
    top = s3.functions[0]
    assert (top.name, top.straggler_ns, top.median_ns) == ("slow_io", 200 * MS, 0)
    text = str(report)
    assert "rank 2" in text and "+200.0%" in text and "slow_io (train.py:22)" in text


def test_ranks_cycle_and_function_limit(tmp_path):
    root = synthetic_ranks(str(tmp_path / "j.parquet"), ranks=3, steps=2, slow=(1, 1))
    assert reports.ranks(root, cycle=1).steps == []
    report = reports.ranks(root, functions=1, cycle=0)
    assert [len(s.functions) for s in report.steps] == [0, 1]


def test_heat_map_has_one_cell_per_rank_and_step(tmp_path):
    root = synthetic_ranks(str(tmp_path / "j.parquet"), ranks=4, steps=6)
    # Rank 3 did not run step 5: its cell is still drawn, grey.
    write_table(root, "steps", 3, 1, [])
    report = reports.ranks(root)
    path = report.write_svg(str(tmp_path / "heat.svg"))
    tree = ET.parse(path)
    cells = [e for e in tree.iter("{http://www.w3.org/2000/svg}rect") if e.get("class") == "cell"]
    assert len(cells) == 4 * 6
    titles = [c.find("{http://www.w3.org/2000/svg}title").text for c in cells]
    assert len(set(titles)) == 24
    slow = [c for c, t in zip(cells, titles) if t.startswith("rank 2, step 3:")]
    assert slow[0].get("fill") == "rgb(255,0,0)"  # 3x the median: full red
    assert "3.00x the median" in slow[0].find("{http://www.w3.org/2000/svg}title").text


def test_dataset_compare_names_the_slower_function(tmp_path):
    before = synthetic_ranks(str(tmp_path / "before.parquet"), ranks=2, slow=(9, 9))
    after = synthetic_ranks(str(tmp_path / "after.parquet"), ranks=2, slow=(1, 2),
                            slow_name="forward")
    report = reports.compare(before, after)
    top = report.rows[0]
    assert (top.name, top.self_change) == ("forward", 200 * MS)
    assert (top.lineno, top.calls_before, top.calls_after) == (22, 0, 1)
    step = next(r for r in report.rows if r.name == "train_step")
    assert (step.calls_before, step.total_before, step.total_after) == (10, 1000 * MS, 1200 * MS)
    assert report.before_steps.steps == 10 and report.after_steps.max == 300 * MS
    assert report.before_steps.p90 == 100 * MS
    assert reports.compare(before, after, cycle=0).rows == report.rows
    with pytest.raises(ValueError, match="no cycle 4"):
        reports.compare(before, after, cycle=4)


def recursion_rows(marked):
    """f calling itself once, 100 ms then 40 ms inside; g once, outside."""
    rows = [dict(id=0, parent=None, depth=0, name="f", start_ns=0, end_ns=100 * MS,
                 outermost=True),
            dict(id=1, parent=0, depth=1, name="f", start_ns=10 * MS, end_ns=50 * MS,
                 outermost=False),
            dict(id=2, parent=None, depth=0, name="g", start_ns=200 * MS, end_ns=210 * MS,
                 outermost=True)]
    for r in rows:
        r.update(pid=1, thread=1, tid=1, file="m.py", line=1, kind="py",
                 dur_ns=r["end_ns"] - r["start_ns"], self_ns=0)
        if not marked:
            del r["outermost"]
    return rows


@pytest.mark.parametrize("marked", [True, False])
def test_dataset_compare_counts_a_recursive_function_once(tmp_path, marked):
    before = str(tmp_path / "before.parquet")
    write_table(before, "events", 0, 0, recursion_rows(marked))
    after = str(tmp_path / "after.parquet")
    write_table(after, "events", 0, 0, recursion_rows(True))
    rows = {r.name: r for r in reports.compare(before, after).rows}
    assert (rows["f"].calls_before, rows["f"].total_before, rows["f"].total_after) == (
        2, 100 * MS, 100 * MS)
    assert (rows["g"].total_before, rows["g"].total_after) == (10 * MS, 10 * MS)


def test_many_ranks_print_the_spread_and_the_map_stays_bounded(tmp_path):
    root = synthetic_ranks(str(tmp_path / "wide.parquet"), ranks=20, steps=2, slow=(17, 1))
    report = reports.ranks(root)
    lines = str(report).splitlines()
    assert lines[1].split() == ["step", "ranks", "fastest", "median", "straggler", "above",
                                "median"]
    assert lines[3].split() == ["1", "20", "100.000", "100.000", "rank", "17", "+200.0%"]
    assert "rank 19" not in lines[1]
    svg = reports.ranks(root).write_svg(str(tmp_path / "wide.svg"))
    root_el = ET.parse(svg).getroot()
    assert len([e for e in root_el.iter("{http://www.w3.org/2000/svg}rect")]) == 40
    many = synthetic_ranks(str(tmp_path / "long.parquet"), ranks=2, steps=400, slow=(1, 7))
    svg = reports.ranks(many, functions=0).write_svg(str(tmp_path / "long.svg"))
    assert int(ET.parse(svg).getroot().get("width")) <= 1400 + 100
