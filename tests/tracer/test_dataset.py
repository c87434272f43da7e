"""Traces written as Parquet datasets (Trace.save("x.parquet")), read back
with pyarrow.dataset and with DuckDB."""
import os
import threading

import pytest

import frametrace
from support import assert_events_layout

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (frametrace[data])")
pads = pytest.importorskip("pyarrow.dataset", reason="pyarrow is not installed")
duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed")


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def traced_session():
    """A session's one cycle: two steps, a thread, ranges."""
    out = []
    with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=2, repeat=1),
                            on_trace_ready=out.append) as prof:
        for _ in range(2):
            with frametrace.range("forward"):
                fib(6)
            t = threading.Thread(target=fib, args=(5,), name="helper")
            t.start()
            t.join()
            prof.step()
    (trace,) = out
    return trace


def expected_events(trace):
    events = trace.events
    children = [0] * len(events)
    for e in events:
        if e.parent >= 0:
            children[e.parent] += e.end_ns - e.start_ns
    names = {t.serial: t.name for t in trace.threads}

    def step_of(ns):
        inside = [s.step for s in trace.steps if s.start_ns <= ns < s.end_ns]
        return inside[-1] if inside else None

    def outermost(i):  # no ancestor is a call of its function
        key = lambda e: (e.name, e.filename, e.lineno, e.kind)  # noqa: E731
        j = events[i].parent
        while j >= 0:
            if key(events[j]) == key(events[i]):
                return False
            j = events[j].parent
        return True

    return [dict(pid=trace.pid, thread=e.thread_serial, tid=e.native_thread_id,
                 thread_name=names.get(e.thread_serial), id=i,
                 parent=None if e.parent < 0 else e.parent, depth=e.depth, name=e.name,
                 file=e.filename, line=e.lineno, kind=e.kind, start_ns=e.start_ns,
                 end_ns=e.end_ns, dur_ns=e.end_ns - e.start_ns,
                 self_ns=e.end_ns - e.start_ns - children[i], step=step_of(e.start_ns),
                 open_at_start=e.open_at_start, open_at_stop=e.open_at_stop,
                 outermost=outermost(i), rank=0, cycle=0)
            for i, e in enumerate(events)]


def read_pyarrow(root, table):
    ds = pads.dataset(os.path.join(root, table), format="parquet", partitioning="hive")
    return ds.to_table().to_pylist()


def read_duckdb(root, table, order):
    con = duckdb.connect()
    rel = con.sql(f"SELECT * FROM read_parquet('{root}/{table}/**/*.parquet', "
                  f"hive_partitioning=true, union_by_name=true) ORDER BY {order}")
    cols = rel.columns
    return [dict(zip(cols, row)) for row in rel.fetchall()]


def test_a_session_trace_as_a_dataset_reads_back_equal_with_pyarrow_and_duckdb(tmp_path):
    trace = traced_session()
    root = str(tmp_path / "run.parquet")
    assert trace.save(root) == root
    want = expected_events(trace)
    assert {e["thread_name"] for e in want} >= {"MainThread", "helper"}
    assert {e["step"] for e in want} >= {0, 1}
    assert {e["outermost"] for e in want if e["name"] == "fib"} == {False, True}
    got = sorted(read_pyarrow(root, "events"), key=lambda r: r["id"])
    assert got == want
    got = read_duckdb(root, "events", "id")
    assert got == want
    steps = [dict(pid=trace.pid, step=s.step, name=s.name, start_ns=s.start_ns,
                  end_ns=s.end_ns, dur_ns=s.end_ns - s.start_ns, rank=0, cycle=0)
             for s in trace.steps]
    assert len(steps) == 2
    assert read_duckdb(root, "steps", "step") == steps
    serial_of = {t.thread_id: t for t in trace.threads}
    ranges = [dict(pid=trace.pid, thread=serial_of[r.thread_id].serial,
                   tid=serial_of[r.thread_id].native_thread_id, name=r.name,
                   start_ns=r.start_ns, end_ns=r.end_ns, dur_ns=r.end_ns - r.start_ns,
                   open_at_start=r.open_at_start, open_at_end=r.open_at_end, rank=0, cycle=0)
              for r in trace.ranges]
    assert [r["name"] for r in ranges] == ["forward", "forward"]
    assert read_duckdb(root, "ranges", "start_ns") == ranges
    threads = read_duckdb(root, "threads", "thread")
    assert [(t["thread"], t["name"], t["events"]) for t in threads] == [
        (t.serial, t.name, sum(e["thread"] == t.serial for e in want)) for t in trace.threads]
    meta = {r["key"]: r["value"] for r in read_duckdb(root, "metadata", "key")}
    assert meta["cycle"] == "0" and meta["pid"] == str(trace.pid)
    assert_events_layout(root)


def test_ranks_and_cycles_are_partitions_of_one_dataset(tmp_path):
    tracer = frametrace.Tracer()
    with tracer:
        fib(4)
    root = str(tmp_path / "job.parquet")
    for rank, cycle in ((0, 0), (1, 0), (1, 3)):
        trace = frametrace.as_trace(tracer)
        trace.distributed = {"rank": rank, "world_size": 2}
        trace.cycle = cycle
        assert trace.save(root) == root  # no .rankN: the ranks share the dataset
    parts = sorted(os.path.relpath(d, root) for d, _, files in os.walk(root) if files)
    assert [p for p in parts if p.startswith("events")] == [
        "events/rank=0/cycle=0", "events/rank=1/cycle=0", "events/rank=1/cycle=3"]
    rows = duckdb.sql(f"SELECT rank, cycle, count(*) FROM read_parquet('{root}/events/**/*.parquet',"
                      f" hive_partitioning=true) GROUP BY ALL ORDER BY ALL").fetchall()
    n = len(tracer.getEvents())
    assert rows == [(0, 0, n), (1, 0, n), (1, 3, n)]
    # Nothing half-written is left behind: only complete part files.
    names = [f for _, _, files in os.walk(root) for f in files]
    assert names and all(f.startswith("part-") and f.endswith(".parquet") for f in names)


def test_a_name_that_is_not_utf8_is_written_escaped(tmp_path):
    ev = frametrace.Event(("f", "/tmp/caf\udce9.py", 1, "py", 1, 1, 10, 20, 0, -1,
                           False, False, 1, False))
    trace = frametrace.as_trace([ev])
    root = str(tmp_path / "x.parquet")
    trace.save(root)
    (row,) = read_pyarrow(root, "events")
    assert row["file"] == "/tmp/caf\\udce9.py"


def test_the_trace_handler_writes_each_cycle_into_one_dataset(tmp_path):
    root = str(tmp_path / "cycles.parquet")
    handler = frametrace.trace_handler(root)
    with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=1, repeat=2),
                            on_trace_ready=handler) as prof:
        for _ in range(2):
            fib(3)
            prof.step()
    rows = duckdb.sql(f"SELECT cycle, count(*) FROM read_parquet('{root}/steps/**/*.parquet', "
                      f"hive_partitioning=true) GROUP BY ALL ORDER BY ALL").fetchall()
    assert rows == [(0, 1), (1, 1)]
    with pytest.raises(ValueError, match="format must be one of"):
        frametrace.trace_handler(root, format="csv")


def test_a_flight_recorder_dumps_a_dataset(tmp_path):
    with frametrace.flight_recorder(tmp_path, format="parquet", slow_ms=None,
                                    slow_factor=3.0, signal=None) as rec:
        for _ in range(3):
            fib(3)
            rec.step()
        rec.dump("asked")
    (dump,) = rec.dumps
    assert dump.endswith(".parquet") and os.path.isdir(dump)
    (count,), = duckdb.sql(f"SELECT count(*) FROM read_parquet('{dump}/steps/**/*.parquet')"
                          ).fetchall()
    assert count >= 1


def test_events_that_are_not_events_are_refused_naming_the_index(tmp_path):
    ok = frametrace.Event(("f", "a.py", 1, "py", 1, 1, 10, 20, 0, -1, False, False, 1, False))
    with pytest.raises(TypeError, match=r"events\[1\] is no frametrace.Event"):
        frametrace.as_trace([ok, ("f",)]).save(str(tmp_path / "x.parquet"))
    # A parent index that names no earlier event (a hand-made list) is no
    # child of anything: its own self time, nothing else touched.
    odd = frametrace.Event(("g", "a.py", 2, "py", 1, 1, 12, 15, 1, 5, False, False, 1, False))
    root = str(tmp_path / "y.parquet")
    frametrace.as_trace([ok, odd]).save(root)
    rows = sorted(read_pyarrow(root, "events"), key=lambda r: r["id"])
    assert [(r["self_ns"], r["parent"]) for r in rows] == [(10, None), (3, 5)]


@pytest.mark.parametrize("suffix", [".json", ".pftrace", ".parquet"])
def test_hand_made_events_are_checked_alike_by_every_writer(tmp_path, suffix):
    def event(name="g", lineno=2, thread_id=5, native=5, serial=3):
        return frametrace.Event((name, "b.py", lineno, "py", thread_id, native, 10, 20, 0, -1,
                                 False, False, serial, False))
    named = frametrace.Event(("f", "a.py", 1, "py", 1, 1, 12, 15, 1, 0, False, False, 1, False))
    path = str(tmp_path / f"x{suffix}")
    with pytest.raises(TypeError, match=r"^events\[1\]: name, filename and kind must be str"):
        frametrace.as_trace([named, event(name=None)]).save(path)
    with pytest.raises(ValueError, match=r"^events\[1\]: lineno must be an int from"):
        frametrace.as_trace([named, event(lineno=1 << 40)]).save(path)
    with pytest.raises(ValueError, match=r"^events\[1\]: .*serial must be an int"):
        frametrace.as_trace([named, event(serial=None)]).save(path)
    # Ids a hand-made list does not know are no error: the file reads back.
    frametrace.as_trace([named, event(thread_id=None, native=None)]).save(path)
    if suffix == ".parquet":
        rows = sorted(read_pyarrow(path, "events"), key=lambda r: r["id"])
        assert [(r["name"], r["thread"], r["tid"]) for r in rows] == [("f", 1, 1), ("g", 3, None)]
        assert_events_layout(path)
    else:
        loaded = frametrace.load(path).events
        assert [(e.name, e.start_ns, e.end_ns, e.thread_serial) for e in loaded] == [
            ("f", 12, 15, 1), ("g", 10, 20, 3)]
