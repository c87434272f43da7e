"""frametrace convert's reading in chunks: a Chrome JSON trace becomes the
dataset its whole-file load gives, with a bounded number of events held."""
import os
import threading
import tracemalloc

import pytest

import frametrace
from frametrace.loader import load, merge
from support import needs_plain_allocator

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (frametrace[data])")
pads = pytest.importorskip("pyarrow.dataset", reason="pyarrow is not installed")

from frametrace._convert_stream import convert_file  # noqa: E402
from frametrace._dataset import write_dataset  # noqa: E402

TABLES = ("events", "steps", "threads", "ranges", "torch_ops", "metadata")
ORDER = {"events": "id", "steps": "step", "threads": "thread", "ranges": "start_ns",
         "torch_ops": "start_ns", "metadata": "key"}


def fib(n):
    return n if n < 2 else fib(n - 1) + abs(fib(n - 2))


def session_json(path, n=12):
    """A cycle of two steps, with a thread running while the main one
    recurses: threads and nesting interleave in the file."""
    out = []
    with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=2, repeat=1),
                            on_trace_ready=out.append) as prof:
        for _ in range(2):
            with frametrace.range("forward"):
                fib(n)
            t = threading.Thread(target=fib, args=(n - 2,), name="helper")
            t.start()
            fib(n - 3)
            t.join()
            prof.step()
    (trace,) = out
    trace.save(str(path))
    return trace


def read(root, table):
    ds = pads.dataset(os.path.join(root, table), format="parquet", partitioning="hive")
    rows = ds.to_table().to_pylist()
    return sorted(rows, key=lambda r: (r[ORDER[table]] is None, r[ORDER[table]]))


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("convert") / "t.json"
    trace = session_json(path)
    return path, trace


@pytest.mark.parametrize("chunk", [1, 7, 100, 1 << 20])
def test_chunks_give_the_whole_file_tables(tmp_path, trace_file, chunk):
    path, trace = trace_file
    whole, chunked = str(tmp_path / "whole.parquet"), str(tmp_path / "chunked.parquet")
    n = write_dataset(load(path), whole)
    assert n > 20 * 7  # several chunks of 7
    # Open calls cross the chunks' ends, on both threads.
    assert max(e.depth for e in trace.events) >= 5
    assert len({e.thread_serial for e in trace.events}) >= 3
    assert convert_file(path, chunked, chunk=chunk) == n
    for table in TABLES:
        want = read(whole, table)
        got = read(chunked, table)
        assert got == want, table
    events = read(chunked, "events")
    assert [e["id"] for e in events] == list(range(n))
    assert any(e["self_ns"] < e["dur_ns"] for e in events)
    assert any(e["step"] is not None for e in events)


# tracemalloc stopped while the writer thread's pyarrow allocates leaves
# CPython 3.11's tracebacks behind, which LeakSanitizer reports.
@needs_plain_allocator
@pytest.mark.one_setup
def test_a_file_of_many_chunks_holds_one_chunk_of_events(tmp_path):
    path = tmp_path / "big.json"
    tracer = frametrace.Tracer(buffer_size=1 << 22)
    with tracer:
        fib(22)  # some 100,000 events
    frametrace.as_trace(tracer).save(str(path))
    del tracer

    def peak(convert):
        tracemalloc.start()
        try:
            count = convert()
            return count, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    n, whole = peak(lambda: write_dataset(load(path), str(tmp_path / "whole.parquet")))
    assert n > 80_000
    count, chunked = peak(lambda: convert_file(path, str(tmp_path / "c.parquet"), chunk=2000))
    assert count == n
    # Whole, the file's Events are held at once; in chunks, a chunk's and
    # the reader's buffer of text (1M characters).
    bound = 9 << 20
    assert whole > bound > chunked, (whole, chunked)


@pytest.mark.one_setup
def test_a_merged_trace_is_refused(tmp_path, trace_file):
    path, _ = trace_file
    merged = tmp_path / "m.json"
    merge([path, path], merged)
    with pytest.raises(ValueError, match="merged trace"):
        convert_file(merged, str(tmp_path / "x.parquet"))
    assert not os.path.exists(tmp_path / "x.parquet" / "events")


@pytest.mark.one_setup
def test_a_file_cut_after_some_chunks_leaves_no_part_file(tmp_path, trace_file):
    path, _ = trace_file
    text = path.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[:len(text) * 3 // 4])
    root = tmp_path / "x.parquet"
    with pytest.raises(ValueError, match="cut.json: not JSON: truncated"):
        convert_file(cut, str(root), chunk=7)
    assert [f for _, _, files in os.walk(root) for f in files] == []


@pytest.mark.one_setup
def test_steps_and_thread_names_after_the_calls_give_the_whole_file_tables(tmp_path,
                                                                           trace_file):
    path, _ = trace_file
    lines = path.read_text().split("\n")
    late = [line for line in lines
            if line.startswith(('{"ph":"M","name":"thread_name"', '{"ph":"X","name":"step#'))]
    assert len(late) >= 4 and all(line.endswith(",") for line in late)
    lines = [line for line in lines if line not in late]
    last = max(i for i, line in enumerate(lines) if line.endswith("]}"))
    lines[last:last] = late  # before the last event, which ends the array
    moved = tmp_path / "late.json"
    moved.write_text("\n".join(lines))
    whole, chunked = str(tmp_path / "whole.parquet"), str(tmp_path / "chunked.parquet")
    n = write_dataset(load(moved), whole)
    assert convert_file(moved, chunked, chunk=7) == n
    for table in TABLES:
        assert read(chunked, table) == read(whole, table), table
    assert {e["thread_name"] for e in read(chunked, "events")} >= {"MainThread", "helper"}
