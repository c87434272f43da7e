"""frametrace convert's reading in chunks: a Chrome JSON trace becomes the
dataset its whole-file load gives, with a bounded number of events held."""
import os
import threading
import tracemalloc

import pytest

import frametrace
from frametrace.loader import load, merge, python_reader
from support import assert_events_layout, needs_plain_allocator

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (frametrace[data])")
pads = pytest.importorskip("pyarrow.dataset", reason="pyarrow is not installed")

from frametrace._convert_stream import convert_file  # noqa: E402
from frametrace._dataset import write_dataset  # noqa: E402
from frametrace._tracer import _ChromeColumns  # noqa: E402

# Reading a file into Parquet: the same whatever clock or backend recorded
# the file.
pytestmark = pytest.mark.one_setup

TABLES = ("events", "steps", "threads", "ranges", "torch_ops", "metadata")
ORDER = {"events": "id", "steps": "step", "threads": "thread", "ranges": "start_ns",
         "torch_ops": "start_ns", "metadata": "key"}


def fib(n):
    return n if n < 2 else fib(n - 1) + abs(fib(n - 2))


def session_json(path, n=8):
    """A cycle of two steps, with a thread running while the main one
    recurses: threads and nesting interleave in the file.  n=8 gives some
    500 events, nested 9 deep, on three threads: every kind of chunk end
    that a bigger trace has (inside each thread's calls at every depth, at
    a change of thread, around the steps and ranges), with chunk=1 (a row
    group per event) still quick."""
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


def is_even(n):
    return True if n == 0 else is_odd(n - 1)


def is_odd(n):
    return False if n == 0 else is_even(n - 1)


def outermost_of(trace):
    """Per event: no call of its function (name, file, line, kind) is
    open below it on its thread's stack (the Python reference)."""
    events = trace.events
    out = []
    for e in events:
        key, p, inner = (e.name, e.filename, e.lineno, e.kind), e.parent, False
        while p >= 0 and not inner:
            q = events[p]
            inner = (q.name, q.filename, q.lineno, q.kind) == key
            p = q.parent
        out.append(not inner)
    return out


def same_tables(whole, chunked):
    for table in TABLES:
        want = read(whole, table)
        got = read(chunked, table)
        assert got == want, table


@pytest.mark.parametrize("reader", ["c", "python"])
@pytest.mark.parametrize("chunk", [1, 7, 100, 1 << 20])
def test_chunks_give_the_whole_file_tables(tmp_path, trace_file, chunk, reader):
    path, trace = trace_file
    whole, chunked = str(tmp_path / "whole.parquet"), str(tmp_path / "chunked.parquet")
    loaded = load(path)
    n = write_dataset(loaded, whole)
    assert n > 20 * 7 and n > 4 * 100  # several chunks of 7, and of 100
    # Open calls cross the chunks' ends, on both threads.
    assert max(e.depth for e in trace.events) >= 5
    assert len({e.thread_serial for e in trace.events}) >= 3
    if reader == "python":
        with python_reader():
            assert convert_file(path, chunked, chunk=chunk) == n
    else:
        assert convert_file(path, chunked, chunk=chunk) == n
    same_tables(whole, chunked)
    assert_events_layout(chunked)
    events = read(chunked, "events")
    assert [e["id"] for e in events] == list(range(n))
    assert any(e["self_ns"] < e["dur_ns"] for e in events)
    assert any(e["step"] is not None for e in events)


@pytest.mark.parametrize("chunk", [1, 3, 50])
def test_outermost_of_direct_and_mutual_recursion_across_chunks(tmp_path, chunk):
    tracer = frametrace.Tracer()
    with tracer:
        for _ in range(2):
            is_even(9)
            fib(6)
        t = threading.Thread(target=is_odd, args=(7,))
        t.start()
        t.join()
    path = tmp_path / "r.json"
    frametrace.as_trace(tracer).save(str(path))
    loaded = load(path)
    want = outermost_of(loaded)
    assert want.count(False) > 20 and want.count(True) > 20
    assert convert_file(path, str(tmp_path / "x.parquet"), chunk=chunk) == len(want)
    events = read(str(tmp_path / "x.parquet"), "events")
    assert [e["outermost"] for e in events] == want
    saved = str(tmp_path / "saved.parquet")
    write_dataset(loaded, saved)
    assert [e["outermost"] for e in read(saved, "events")] == want
    # A call of is_odd inside is_even inside is_odd is not outermost.
    names = {e["id"]: e["name"] for e in events}
    assert any(not e["outermost"] and names[e["parent"]] != e["name"] for e in events)


# tracemalloc stopped while the writer thread's pyarrow allocates leaves
# CPython 3.11's tracebacks behind, which LeakSanitizer reports.
@needs_plain_allocator
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


def test_a_merged_trace_is_refused(tmp_path, trace_file):
    path, _ = trace_file
    merged = tmp_path / "m.json"
    merge([path, path], merged)
    with pytest.raises(ValueError, match="merged trace"):
        convert_file(merged, str(tmp_path / "x.parquet"))
    assert not os.path.exists(tmp_path / "x.parquet" / "events")


def test_a_file_cut_after_some_chunks_leaves_no_part_file(tmp_path, trace_file):
    path, _ = trace_file
    text = path.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[:len(text) * 3 // 4])
    root = tmp_path / "x.parquet"
    with pytest.raises(ValueError, match="cut.json: not JSON: truncated"):
        convert_file(cut, str(root), chunk=7)
    assert [f for _, _, files in os.walk(root) for f in files] == []


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


def edits(text):
    """Ways a trace's text can be wrong, each where the C line parser
    meets it: (what, the edited text)."""
    lines = text.split("\n")
    calls = [i for i, line in enumerate(lines) if line.startswith('{"ph":"X","cat":"python"')]
    i = calls[len(calls) // 2]
    line = lines[i]

    def at(new):
        return "\n".join(lines[:i] + [new] + lines[i + 1:])
    ts = line.index('"ts":') + 5
    return [
        ("a time past int64", at(line[:ts] + "99999999999999999.000" + line[line.index(",", ts):])),
        ("ending after the stop", at(line.replace('"dur":', '"dur":9999999999', 1))),
        ("a negative duration", at(line.replace('"dur":', '"dur":-', 1))),
        ("a bad escape in the name", at(line.replace('"name":"', '"name":"\\q', 1))),
        ("a raw control character", at(line.replace('"name":"', '"name":"\x01', 1))),
        ("no separator", at(line[:-1])),
        ("cut in a line", "\n".join(lines[:i]) + "\n" + line[:len(line) // 2]),
        ("a thread of letters", at(line.replace('"tid":', '"tid":"x', 1))),
    ]


def test_bad_lines_are_what_load_says_they_are(tmp_path, trace_file):
    path, _ = trace_file
    for what, text in edits(path.read_text()):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        try:
            load(bad)
        except ValueError as exc:
            with pytest.raises(ValueError) as got:
                convert_file(bad, str(tmp_path / "x.parquet"), chunk=7)
            assert str(got.value) == str(exc), what
            assert str(bad) in str(got.value)
            assert [f for _, _, files in os.walk(tmp_path / "x.parquet") for f in files
                    if f.startswith("part")] == [], what
        else:  # read as the loader reads it
            whole, chunked = tmp_path / "w.parquet", tmp_path / "c.parquet"
            write_dataset(load(bad), str(whole))
            convert_file(bad, str(chunked), chunk=7)
            same_tables(str(whole), str(chunked))
            for d in (whole, chunked):
                import shutil
                shutil.rmtree(d)


def test_the_columns_refuse_what_they_were_not_given():
    cols = _ChromeColumns()
    with pytest.raises(ValueError, match="unknown function or thread"):
        cols.add(0, 0, 1, 2, False, False, False)
    cols.function("x", False, 0)
    assert cols.thread(1, 2) == 0 and cols.thread(1, 2) == 0
    with pytest.raises(ValueError, match="end before the start"):
        cols.add(0, 0, 5, 4, False, False, False)
    with pytest.raises(ValueError):
        cols.function("y", False, 5)  # not the next number
    with pytest.raises(TypeError):
        cols.parse(b"bytes", 0, 5, 0, 10, 100)
    # Positions out of the text take nothing.
    assert cols.parse("{}", 7, 100, 0, 10, 100) == (7, -1, -1, 0, False)
    assert cols.parse("{}", -1, 100, 0, 10, 100) == (-1, -1, -1, 0, False)
    cols.add(0, 0, 1, 5, False, False, False)
    cols.add(0, 0, 2, 3, False, False, False)
    assert cols.counts() == (2, 2)
    n, *columns = cols.flush(False)
    assert n == 0 and cols.counts() == (2, 2)  # both open
    n, *columns = cols.flush(True)
    assert n == 2 and cols.counts() == (0, 2)
