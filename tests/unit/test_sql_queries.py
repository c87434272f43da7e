"""The ready queries of the SQL docs page, each run on a dataset whose
answer is known (four ranks, rank 2 slow at step 3 in slow_io; a few
torch ops)."""
import pytest

pytest.importorskip("pyarrow", reason="the datasets are written with pyarrow (frametrace[data])")
pytest.importorskip("duckdb", reason="SQL runs on DuckDB (frametrace[sql])")

import frametrace  # noqa: E402
from dataset_rows import synthetic_ranks, write_table  # noqa: E402

TOP_SELF_PER_RANK = """
select rank, name, file, line, count(*) as calls, sum(self_ns) / 1e6 as self_ms
from events
group by rank, name, file, line
qualify row_number() over (partition by rank order by sum(self_ns) desc) <= 20
order by rank, self_ms desc
"""

TOTAL_PER_FUNCTION = """
select name, file, line, count(*) as calls,
       sum(dur_ns) filter (where outermost) / 1e6 as total_ms
from events group by name, file, line order by total_ms desc limit 10
"""

STEP_PER_RANK = """
select step, rank, (max(end_ns) - min(start_ns)) / 1e6 as ms
from steps
group by step, rank
order by step, rank
"""

STRAGGLERS = """
with d as (select step, rank, max(end_ns) - min(start_ns) as dur
           from steps group by step, rank)
select step, arg_max(rank, dur) as straggler, max(dur) / median(dur) as times_median
from d
group by step
order by step
"""

SLOWEST_CALLS = """
select rank, cycle, step, thread_name, dur_ns / 1e6 as ms, file, line
from events
where name = 'forward'
order by dur_ns desc
limit 10
"""

TORCH_OPS = """
select name, count(*) as calls, sum(dur_ns) / 1e6 as total_ms, avg(dur_ns) / 1e3 as mean_us
from torch_ops
group by name
order by total_ms desc
limit 20
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = synthetic_ranks(str(tmp_path_factory.mktemp("q") / "job.parquet"),
                           slow_name="forward")
    ops = [dict(pid=1000, thread=1, tid=1000, name=name, track=None, start_ns=i * 10,
                end_ns=i * 10 + d, dur_ns=d, args='{"Input Dims": [[8, 4]]}')
           for i, (name, d) in enumerate([("aten::mm", 5_000_000), ("aten::add", 1_000_000),
                                          ("aten::mm", 3_000_000)])]
    write_table(root, "torch_ops", 0, 0, ops)
    return root


def test_top_self_time_per_rank(job):
    rows = frametrace.sql(TOP_SELF_PER_RANK, job)
    assert [r[:2] for r in rows if r[0] == 0] == [(0, "forward"), (0, "backward"),
                                                  (0, "train_step")]
    top2 = [r for r in rows if r[0] == 2][0]
    assert top2[1:] == ("forward", "train.py", 20, 5, 300.0)  # line 20's five calls
    assert len(rows) == 13  # rank 2 also has the slow forward (line 22)


def test_step_duration_per_rank(job):
    rows = frametrace.sql(STEP_PER_RANK, job)
    assert len(rows) == 20
    assert [r for r in rows if r[2] != 100.0] == [(3, 2, 300.0)]


def test_stragglers(job):
    rows = frametrace.sql(STRAGGLERS, job)
    assert rows[3] == (3, 2, 3.0)
    assert [r[2] for r in rows] == [1.0, 1.0, 1.0, 3.0, 1.0]


def test_slowest_calls_of_one_function(job):
    rows = frametrace.sql(SLOWEST_CALLS, job)
    assert rows[0] == (2, 0, 3, "MainThread", 200.0, "train.py", 22)
    assert len(rows) == 10 and all(r[4] == 60.0 for r in rows[1:])


def test_torch_ops_by_total_time(job):
    assert frametrace.sql(TORCH_OPS, job) == [("aten::mm", 2, 8.0, 4000.0),
                                              ("aten::add", 1, 1.0, 1000.0)]


def test_total_time_per_function_counts_recursion_once(tmp_path):
    root = synthetic_ranks(str(tmp_path / "one.parquet"), ranks=1, slow=(9, 9))
    ms = 1_000_000
    calls = [(0, 0, 400), (1, 100, 350), (2, 200, 300)]  # f inside f inside f
    write_table(root, "events", 0, 0, [
        dict(pid=1000, thread=2, tid=2000, id=i, parent=None if i == 0 else i - 1, depth=i,
             name="f", file="rec.py", line=1, kind="py", start_ns=s * ms, end_ns=e * ms,
             dur_ns=(e - s) * ms, self_ns=100 * ms, outermost=i == 0) for i, s, e in calls],
        part="1")
    rows = frametrace.sql(TOTAL_PER_FUNCTION, root)
    assert rows[:4] == [("train_step", "train.py", 10, 5, 500.0), ("f", "rec.py", 1, 3, 400.0),
                        ("forward", "train.py", 20, 5, 300.0),
                        ("backward", "train.py", 21, 5, 150.0)]
