"""frametrace.loader: Chrome traces read back into
a frametrace.Trace, event by event equal to getEvents(), to the nanosecond;
merged traces; every kind of bad file rejected with a ValueError naming it."""
import decimal
import gzip
import json
import os
import re
import threading

import pytest

import frametrace
from frametrace import reports
from frametrace.export import write_chrome
from frametrace.loader import MergedTrace, load, merge, read_other_data
from frametrace.testing import assert_valid_trace
from support import UNDER_ASAN, trace_of
from targets import calls


def assert_same_events(loaded, events):
    assert len(loaded) == len(events)
    for i, (a, b) in enumerate(zip(loaded, events)):
        assert type(a) is frametrace.Event, i
        assert tuple(a) == tuple(b), (i, a, b)
        for f in frametrace.Event.__match_args__:
            assert type(getattr(a, f)) is type(getattr(b, f)), (i, f)


def names_of(trace):
    """{thread_id: name} of a trace's threads (of threads that had one ident,
    the latest's)."""
    return {t.thread_id: t.name for t in trace.threads if t.name is not None}


def busy(n):
    for _ in range(n):
        calls.program()


def traced_program(n=700):
    """Known code on two threads alive together (idents stay distinct), with
    generators, an exception, recursion and enough events to span several
    read chunks of the file."""
    barrier = threading.Barrier(2)

    def worker():
        barrier.wait()
        calls.branch(3)
        busy(n // 3)

    with frametrace.trace() as tracer:
        t = threading.Thread(target=worker, name="load-worker")
        t.start()
        barrier.wait()
        calls.program()
        calls.catcher()
        calls.recurse(20)
        busy(n)
        t.join()
    return tracer, t


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_round_trip_is_exact(tmp_path, suffix):
    tracer, worker = traced_program()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    path = tmp_path / f"trace{suffix}"
    write_chrome(trace_of(tracer, process_name="trainer"), path)
    if suffix == ".json":
        assert os.path.getsize(path) > 3 << 19  # crosses the reader's 1 MiB chunks
    trace = load(path)
    assert type(trace) is frametrace.Trace
    assert_same_events(trace.events, events)
    assert (trace.tracer_start_ns, trace.tracer_stop_ns) == (tracer.start_ns, tracer.stop_ns)
    assert trace.session_start_ns == tracer.start_ns
    assert trace.session_end_ns == tracer.stop_ns
    assert trace.pid == os.getpid()
    assert trace.stats.dropped == tracer.stats.dropped == 0
    assert trace.threads == tracer.threads
    assert names_of(trace)[worker.ident] == "load-worker"
    assert names_of(trace)[threading.get_ident()] == threading.current_thread().name
    assert trace.ranges == [] and trace.steps == [] and trace.cycle == 0
    assert_valid_trace(trace.events, tracer.start_ns, tracer.stop_ns)


def test_open_at_start_and_stop_and_overflow(tmp_path):
    def deep(n, tracer):
        if n == 0:
            busy(3)
            tracer.stop()  # frames open at stop: all end at stop_ns
            return
        deep(n - 1, tracer)

    for buffer_size in (1 << 20, 97):  # 97: the ring overwrites, open_at_start rebuilt
        with frametrace.trace(buffer_size=buffer_size) as tracer:
            busy(5)
            deep(6, tracer)
        events = tracer.getEvents()
        assert any(e.open_at_stop for e in events) and any(e.open_at_start for e in events)
        write_chrome(tracer, tmp_path / "t.json")
        trace = load(tmp_path / "t.json")
        assert_same_events(trace.events, events)
        assert trace.stats.dropped == tracer.stats.dropped
        assert trace.stats == tracer.stats
        assert [t.dropped for t in trace.threads] == [t.dropped for t in tracer.threads]
        assert (buffer_size == 97) == (trace.stats.dropped > 0)


def test_each_threads_dropped_survives_the_file_and_a_merge(tmp_path):
    both_alive = threading.Barrier(2)  # distinct idents: none ends before the other starts

    def work(n, barrier=None):
        for _ in range(n):
            busy(1)
        if barrier is not None:
            barrier.wait()

    with frametrace.trace(buffer_size=64) as tracer:
        threads = [threading.Thread(target=work, args=(n, both_alive)) for n in (50, 200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        work(120)
    by_thread = [t.dropped for t in tracer.threads]
    assert len([n for n in by_thread if n > 0]) == 3  # each thread overflowed
    assert len(set(by_thread)) == 3  # and by different amounts
    write_chrome(tracer, tmp_path / "t.json")
    trace = load(tmp_path / "t.json")
    assert [t.dropped for t in trace.threads] == by_thread
    assert sum(by_thread) == trace.stats.dropped == tracer.stats.dropped
    assert trace.stats == tracer.stats
    merged = frametrace.loader.merge([tmp_path / "t.json"], tmp_path / "all.json")
    assert merged["inputs"][0]["dropped_by_thread"]
    again = load(tmp_path / "all.json")
    assert again.stats == tracer.stats
    assert [t.dropped for t in again.threads] == by_thread
    assert again.processes[0]["stats"] == tracer.stats


def test_names_and_files_needing_escapes(tmp_path):
    namespace = {}
    exec("def f():\n    return len('x')\n", namespace)
    f = namespace["f"]
    weird = 'we"ird\\name\n\u00e9\u2603\t:x'
    replace = {"co_name": weird, "co_filename": 'C:\\dir/"x":y.py'}
    if hasattr(f.__code__, "co_qualname"):
        replace["co_qualname"] = weird
    f.__code__ = f.__code__.replace(**replace)
    with frametrace.trace() as tracer:
        for _ in range(3):
            f()
    write_chrome(tracer, tmp_path / "t.json")
    trace = load(tmp_path / "t.json")
    assert_same_events(trace.events, tracer.getEvents())
    found = [e for e in trace.events if e.name == weird]
    assert len(found) == 3
    assert {(e.filename, e.lineno) for e in found} == {('C:\\dir/"x":y.py', 1)}


def test_file_names_that_are_not_utf8_survive_every_writer(tmp_path):
    """A source file whose path has a byte that is not UTF-8 (its str, as
    Python decodes file names, has a lone surrogate), a thread and a
    process of such names: every writer keeps them, each reader gives the
    same str back.  JSON stays UTF-8 (the surrogate as its \\u escape);
    .pftrace, pstats and collapsed stacks have the byte itself."""
    import importlib.util
    import pstats

    pftrace = pytest.importorskip("pftrace")
    folder = tmp_path / os.fsdecode(b"caf\xe9")
    folder.mkdir()
    (folder / "prog.py").write_text("def work():\n    return len('x')\n")
    spec = importlib.util.spec_from_file_location("prog_not_utf8", folder / "prog.py")
    prog = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prog)
    filename = prog.work.__code__.co_filename
    assert filename == f"{tmp_path}/caf\udce9/prog.py"
    name = "caf\udce9"
    with frametrace.trace() as tracer:
        # Three calls: the loader's and merge's C paths take the later ones.
        t = threading.Thread(target=lambda: [prog.work() for _ in range(3)], name=name)
        t.start()
        t.join()

    def works(trace):
        found = [(e.filename, e.lineno) for e in trace.events if e.name == "work"]
        assert len(found) == 3
        return set(found)

    for suffix in (".json", ".json.gz"):
        path = tmp_path / f"t{suffix}"
        write_chrome(trace_of(tracer, process_name=name), path)
        doc = json.loads((gzip.open if suffix.endswith(".gz") else open)(path, "rb").read()
                         .decode("utf-8"))
        assert {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"} == {name}
        trace = load(path)
        assert works(trace) == {(filename, 1)}, suffix
        assert names_of(trace)[t.ident] == name
        # A loaded trace written again (the Python writer), and merged.
        trace.save(tmp_path / "again.json")
        assert works(load(tmp_path / "again.json")) == {(filename, 1)}
        merge([path], tmp_path / "merged.json")
        merged = load(tmp_path / "merged.json")
        assert works(merged) == {(filename, 1)}
        assert merged.processes[0]["process_name"] == name
        assert names_of(merged)[t.ident] == f"{name} [pid {os.getpid()}]"
    path = tmp_path / "t.pftrace"
    frametrace.export.write_perfetto(trace_of(tracer, process_name=name), path)
    decoded = pftrace.decode(path)
    assert b"caf\xe9/prog.py" in path.read_bytes()
    assert [d.process.process_name for d in decoded.tracks.values()
            if d.HasField("process")] == [name]
    uuid, thread = pftrace.thread_tracks(decoded)[t.native_id]
    assert thread.thread_name == name
    assert {s.location for s in decoded.slices[uuid] if s.name == "work"} == {(filename, "work", 1)}
    trace = load(tmp_path / "t.json")
    trace.to_pstats(tmp_path / "t.pstats")
    stats = pstats.Stats(str(tmp_path / "t.pstats")).stats
    assert (filename, 1, "work") in stats
    reports.write_collapsed(trace, tmp_path / "t.folded", weight="calls")
    assert b"caf\xe9 (thread " in (tmp_path / "t.folded").read_bytes()
    assert b"caf\xe9/prog.py" in (tmp_path / "t.folded").read_bytes()


def dump_like_another_tool(doc):
    """JSON with the keys sorted, indented, numbers kept exact: the file
    another tool might write from the same data."""
    def dump(v, indent):
        pad = "\n" + "  " * (indent + 1)
        if isinstance(v, decimal.Decimal):
            return str(v)
        if isinstance(v, dict):
            if not v:
                return "{}"
            return "{" + ",".join(pad + json.dumps(k) + ": " + dump(v[k], indent + 1)
                                 for k in sorted(v)) + "\n" + "  " * indent + "}"
        if isinstance(v, list):
            return "[" + ",".join(pad + dump(x, indent + 1) for x in v) + "]"
        return json.dumps(v)
    return dump(doc, 0)


def test_reformatted_file_loads_the_same(tmp_path):
    tracer, _ = traced_program(30)
    write_chrome(tracer, tmp_path / "t.json")
    with open(tmp_path / "t.json", encoding="utf-8") as fh:
        doc = json.load(fh, parse_float=decimal.Decimal)
    (tmp_path / "r.json").write_text(dump_like_another_tool(doc), encoding="utf-8")
    assert_same_events(load(tmp_path / "r.json").events, tracer.getEvents())


def test_session_trace_with_ranges_and_steps(tmp_path):
    def model(x):
        return sum(x)

    def other_thread():
        with frametrace.range("loader"):
            model([1])

    with frametrace.profile(python_steps=2) as prof:
        with frametrace.range("outer"):  # entered before the window's steps
            for i in range(4):
                with frametrace.range("forward"):
                    model([i])
                if i == 1:
                    t = threading.Thread(target=other_thread)
                    t.start()
                    t.join()
                prof.step()
    trace = prof.last_trace
    path = trace.to_chrome(tmp_path / "session.json.gz")
    loaded = load(path)
    assert_same_events(loaded.events, trace.events)
    assert loaded.ranges == trace.ranges
    assert loaded.steps == trace.steps
    assert all(type(r) is frametrace.RangeRecord for r in loaded.ranges)
    assert all(type(s) is frametrace.StepRecord for s in loaded.steps)
    assert [s.name for s in loaded.steps] == ["step#0", "step#1", "step#2", "step#3", "step#4"]
    for f in ("session_start_ns", "session_end_ns", "tracer_start_ns", "tracer_stop_ns",
              "pid", "cycle", "stats", "threads"):
        assert getattr(loaded, f) == getattr(trace, f), f
    assert loaded.session_end_ns > loaded.tracer_stop_ns  # Python tracing stopped at step 2


def test_summary_and_reports_of_a_loaded_trace(tmp_path):
    tracer, _ = traced_program(20)
    events = tracer.getEvents()
    write_chrome(tracer, tmp_path / "t.json")
    trace = load(tmp_path / "t.json")
    table = trace.summary(print=False, limit=None)
    assert table.rows == reports.summary(events, limit=None).rows
    assert any(r.name == "leaf" for r in table.rows)
    per = reports.summary(trace, per_thread=True, limit=None)
    assert set(per.threads) == {e.thread_serial for e in events}  # keyed by serial
    assert {per.threads[e.thread_id].thread_id for e in events} == {e.thread_id for e in events}
    trace.to_flamegraph_svg(tmp_path / "t.svg")
    assert (tmp_path / "t.svg").read_text().startswith("<?xml")


def test_trace_save_round_trip(tmp_path):
    with frametrace.profile() as prof:
        with frametrace.range("r"):
            calls.program()
        prof.step()
    trace = prof.last_trace
    for name in ("p.json", "p.json.gz"):
        loaded = load(trace.save(tmp_path / name))
        assert_same_events(loaded.events, trace.events)
        assert loaded.ranges == trace.ranges and loaded.steps == trace.steps
        for f in ("session_start_ns", "session_end_ns", "tracer_start_ns", "tracer_stop_ns",
                  "pid", "cycle", "stats", "threads"):
            assert getattr(loaded, f) == getattr(trace, f), f


def test_a_document_of_no_chrome_trace_is_refused(tmp_path):
    """A JSON object without traceEvents (such as the "format": "frametrace"
    documents no released version wrote) is no trace: load() and merge()
    say so, naming the file."""
    path = tmp_path / "doc.json"
    path.write_text(json.dumps({"format": "frametrace", "version": 1, "metadata": {},
                                "event_fields": list(frametrace.Event.__match_args__),
                                "events": [], "ranges": [], "steps": []}))
    with pytest.raises(ValueError, match=re.escape(f"{path}: not a trace: no traceEvents")):
        load(path)
    with pytest.raises(ValueError, match=re.escape(f"{path}: not a trace: no traceEvents")):
        merge([path], tmp_path / "out.json")


def test_merged_traces_load_on_one_timeline(tmp_path):
    tracer_a, _ = traced_program(5)
    tracer_b, _ = traced_program(5)
    pid = os.getpid()
    # The same pid twice (and the same thread idents): both made distinct.
    write_chrome(tracer_a, tmp_path / "a.json")
    write_chrome(tracer_b, tmp_path / "b.json.gz")
    other = merge([tmp_path / "b.json.gz", tmp_path / "a.json"], tmp_path / "ab.json")
    assert [d["original_pid"] for d in other["inputs"]] == [pid, pid]
    pids = [d["pid"] for d in other["inputs"]]
    assert pids[0] == pid and pids[1] != pid
    merged = load(tmp_path / "ab.json")
    assert isinstance(merged, MergedTrace) and len(merged.processes) == 2
    events_a, events_b = tracer_a.getEvents(), tracer_b.getEvents()
    assert len(merged.events) == len(events_a) + len(events_b)
    # File order (b then a); a started first, so its clock is the merged one.
    got_b, got_a = merged.events[:len(events_b)], merged.events[len(events_b):]
    assert [tuple(e)[6:8] for e in got_a] == [tuple(e)[6:8] for e in events_a]
    shift = got_b[0].start_ns - events_b[0].start_ns
    assert abs(shift) < 1_000_000  # one clock here: only the anchors' jitter
    assert [(e.start_ns - shift, e.end_ns - shift) for e in got_b] == \
        [(e.start_ns, e.end_ns) for e in events_b]
    proc_b, proc_a = merged.processes
    assert proc_b["shift_ns"] == shift and proc_a["shift_ns"] == 0
    assert merged.tracer_start_ns == tracer_a.start_ns
    assert merged.tracer_stop_ns == max(tracer_a.stop_ns, tracer_b.stop_ns + shift)
    # Thread ids: b's kept, a's replaced by their native ids where b has the
    # same idents (the main thread's always; a worker's when it was reused).
    taken = {e.thread_id for e in events_b}
    assert {e.thread_id for e in got_b} == taken
    assert {e.thread_id for e in got_a} == {
        e.native_thread_id if e.thread_id in taken else e.thread_id for e in events_a}
    # Parents index the merged list: a's come after b's events.
    for got, want, offset in ((got_a, events_a, len(events_b)), (got_b, events_b, 0)):
        assert [tuple(e)[:4] + tuple(e)[5:6] + (e.depth, e.parent) + tuple(e)[10:12] + (e.open_at_loss,)
                for e in got] == \
            [tuple(e)[:4] + tuple(e)[5:6] + (e.depth, e.parent + offset if e.parent >= 0 else -1)
             + tuple(e)[10:12] + (e.open_at_loss,) for e in want]
    # thread_serial tells the threads of the merged file apart, across processes.
    threads = {(e.thread_serial, e.native_thread_id) for e in merged.events}
    assert len({serial for serial, _ in threads}) == len(threads) == \
        len({e.thread_serial for e in events_a}) + len({e.thread_serial for e in events_b})
    assert any(t.name.endswith(f"[pid {pids[1]}]") for t in merged.threads if t.name)
    assert merged.summary(print=False).calls == len(merged.events)
    # Read another way (otherData not at the end: the events are kept until it is known).
    with open(tmp_path / "ab.json", encoding="utf-8") as fh:
        doc = json.load(fh, parse_float=decimal.Decimal)
    (tmp_path / "ab-sorted.json").write_text(dump_like_another_tool(doc), encoding="utf-8")
    assert load(tmp_path / "ab-sorted.json") == merged
    # A merge of merges keeps every process.
    merge([tmp_path / "ab.json", tmp_path / "a.json"], tmp_path / "aba.json.gz")
    again = load(tmp_path / "aba.json.gz")
    assert len(again.processes) == 3 and len({p["pid"] for p in again.processes}) == 3
    assert len(again.events) == 2 * len(events_a) + len(events_b)
    assert read_other_data(tmp_path / "aba.json.gz")["merged"] is True


# ---- bad files ------------------------------------------------------------------------
# The loader's parsing, whatever recorded the file: one setup.


@pytest.fixture(scope="module")
def good_file(tmp_path_factory):
    with frametrace.trace() as tracer:
        calls.program()
    path = tmp_path_factory.mktemp("good") / "good.json"
    write_chrome(tracer, path)
    return path.read_bytes()


def first_x(doc):
    return next(e for e in doc["traceEvents"] if e["ph"] == "X")


def edit(good, change):
    doc = json.loads(good)
    change(doc)
    return json.dumps(doc).encode()


def _early_stop(good):
    """The file as write_chrome wrote it, its tracer's stop moved before the
    end of its last events (which stay in the compact layout)."""
    doc = json.loads(good)
    ft = doc["otherData"]["frametrace"]
    stop = str(ft["stop_ns"]).encode()
    assert good.count(b'"stop_ns":' + stop) == 1
    return good.replace(b'"stop_ns":' + stop, b'"stop_ns":' + str(ft["start_ns"] + 1).encode())


def _other_in_the_middle(good):
    """The file with otherData after the events and more than a MiB before
    the end: found by neither end, load() reads the file twice."""
    doc = json.loads(good)
    events = doc.pop("traceEvents")
    return json.dumps({"traceEvents": events, "otherData": doc.pop("otherData"), **doc,
                       "padding": "x" * (2 << 20)}).encode()


BAD = {
    "not-json": (lambda g: b"hello, world", "not JSON"),
    "empty": (lambda g: b"", "empty file"),
    "truncated-json": (lambda g: g[: len(g) // 2], "truncated"),
    "truncated-gzip": (lambda g: gzip.compress(g)[:-40], "truncated or corrupted gzip"),
    "corrupted-gzip": (lambda g: (lambda z: z[:60] + bytes(b ^ 0x5A for b in z[60:200]) + z[200:])(
        gzip.compress(g)), "gzip"),
    "array": (lambda g: b'[{"ph": "X", "name": "a", "ts": 1, "dur": 1}]', "array, not an object"),
    "string": (lambda g: b'"trace"', "not an object"),
    "no-traceEvents": (lambda g: b'{"displayTimeUnit": "ns"}', "no traceEvents"),
    "traceEvents-not-a-list": (lambda g: b'{"traceEvents": {}}', "traceEvents is not a list"),
    "foreign-chrome": (lambda g: b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1.5, "dur": 2, '
                                 b'"pid": 1, "tid": 1}], "otherData": {"version": "x"}}',
                       "not written by frametrace"),
    "extra-data": (lambda g: g + b"{}", "extra data"),
    "not-utf8": (lambda g: g.replace(b"program", b"progr\xe9m", 1), "not UTF-8"),
    "event-not-object": (lambda g: edit(g, lambda d: d["traceEvents"].append(3)),
                         "an object expected"),
    "no-ph": (lambda g: edit(g, lambda d: d["traceEvents"].append({"name": "x"})), "no \"ph\""),
    "ts-string": (lambda g: edit(g, lambda d: first_x(d).update(ts="12.5")), ".ts"),
    "ts-missing": (lambda g: edit(g, lambda d: first_x(d).pop("ts")), "no 'ts'"),
    "dur-negative": (lambda g: edit(g, lambda d: first_x(d).update(dur=-1)), "negative"),
    "sub-nanosecond": (lambda g: g.replace(b'"dur":', b'"dur":0.0005,"x":', 1),
                       "whole number of nanoseconds"),
    "name-not-string": (lambda g: edit(g, lambda d: first_x(d).update(name=7)), ".name"),
    "tid-not-int": (lambda g: edit(g, lambda d: first_x(d).update(tid="1")), ".tid"),
    "file-without-line": (lambda g: edit(g, lambda d: first_x(d)["args"].update(file="x.py")),
                          "path:line"),
    "flag-not-bool": (lambda g: edit(g, lambda d: first_x(d)["args"].update(open_at_stop=1)),
                      "open_at_stop"),
    "no-thread-ids": (lambda g: edit(g, lambda d: d["otherData"]["frametrace"].pop("thread_ids")),
                      "thread_ids"),
    "origin-not-int": (lambda g: edit(g, lambda d: d["otherData"]["frametrace"].update(origin_ns=1.5)),
                       "origin_ns"),
    "no-trace-events": (lambda g: b'{"format": "frametrace", "version": 1, "events": []}',
                        "not a trace: no traceEvents"),
    "5000-digit-ts": (lambda g: g.replace(b'"ts":', b'"ts":' + b"1" * 5000 + b',"x":', 1),
                      "an integer of 5000 digits in the value at character"),
    "5000-digit-other": (lambda g: g.replace(b'"origin_ns":', b'"origin_ns":' + b"9" * 5000
                                             + b',"x":', 1), "an integer of 5000 digits"),
    "ts-negative": (lambda g: edit(g, lambda d: first_x(d).update(ts=-1)), ".ts: negative"),
    "ts-negative-compact": (lambda g: re.sub(rb'"ts":[0-9]+[.][0-9]{3}', b'"ts":-5.000', g, count=1),
                            ".ts: negative"),
    "ends-after-stop": (lambda g: edit(g, lambda d: first_x(d).update(
        # One integer division: its float prints as a whole number of ns.
        dur=(d["otherData"]["frametrace"]["stop_ns"] - d["otherData"]["frametrace"]["origin_ns"]
             + 1000) / 1000)), "after the tracer's stop"),
    "ends-after-stop-compact": (lambda g: _early_stop(g), "after the tracer's stop"),
    "ends-after-stop-other-in-the-middle": (lambda g: _other_in_the_middle(_early_stop(g)),
                                            "after the tracer's stop"),
    "bad-event-other-in-the-middle": (lambda g: _other_in_the_middle(
        edit(g, lambda d: first_x(d).update(tid="1"))), ".tid: an integer expected"),
    # Compressed 1000 times: more than 64 times the file, and than 8 MiB.
    "huge-value": (lambda g: gzip.compress(b'{"otherData": "' + b"a" * (9 << 20) + b'"}'),
                   "a JSON value of more than 8388608 characters at character 14 (64 times "
                   "the compressed file's"),
}


@pytest.mark.one_setup
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_raise_value_error_naming_file_and_problem(tmp_path, good_file, case):
    make, words = BAD[case]
    path = tmp_path / f"{case}.json"
    path.write_bytes(make(good_file))
    with pytest.raises(ValueError) as info:
        load(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    assert words in message, message


@pytest.mark.one_setup
def test_merge_rejects_what_it_cannot_align(tmp_path, good_file):
    (tmp_path / "good.json").write_bytes(good_file)
    (tmp_path / "bad.json").write_bytes(good_file[:100])
    with pytest.raises(ValueError, match="bad.json: .*truncated"):
        merge([tmp_path / "good.json", tmp_path / "bad.json"], tmp_path / "out.json")
    assert not os.path.exists(tmp_path / "out.json")
    assert not any(name.startswith("out.json") for name in os.listdir(tmp_path))


def test_merge_takes_every_file_frametrace_writes(tmp_path, good_file):
    """Trace.save()'s Chrome JSON; a file without a clock anchor, placed by
    its CLOCK_MONOTONIC times as if of the anchored file's machine (said in
    inputs[].aligned_by)."""
    (tmp_path / "good.json").write_bytes(good_file)
    with frametrace.profile() as prof:
        calls.leaf(1)
    trace = prof.last_trace
    trace.save(tmp_path / "saved.json")
    merge([tmp_path / "saved.json"], tmp_path / "saved-merged.json")
    assert frametrace.load(tmp_path / "saved-merged.json").events == trace.events
    (tmp_path / "noanchor.json").write_bytes(
        edit((tmp_path / "saved.json").read_bytes(),
             lambda d: d["otherData"]["frametrace"].pop("clock_anchor")))
    other = merge([tmp_path / "saved.json", tmp_path / "noanchor.json", tmp_path / "good.json"],
                  tmp_path / "all.json")
    assert [d["source"] for d in other["inputs"]] == [
        str(tmp_path / n) for n in ("saved.json", "noanchor.json", "good.json")]
    assert ["aligned_by" in d for d in other["inputs"]] == [False, True, False]
    merged = frametrace.load(tmp_path / "all.json")
    first, second = merged.processes[:2]
    # The unanchored file's events are the saved one's, at the same times:
    # both on this machine's CLOCK_MONOTONIC.
    assert first["shift_ns"] == second["shift_ns"]
    leaves = [e.start_ns for e in merged.events if e.name == "leaf"]
    good = [e.name for e in frametrace.load(tmp_path / "good.json").events].count("leaf")
    assert len(leaves) == 2 * [e.name for e in trace.events].count("leaf") + good
    assert leaves[0] == leaves[1]  # the saved file's and the unanchored one's, at one time


def test_thread_ident_reused_by_a_later_thread(tmp_path):
    """A thread started after another ended often gets its ident.  Where the
    file's thread_ids cannot tell them apart, the later thread's events keep
    their Chrome tid (its native id) as thread_id; nothing else changes."""
    def work():
        calls.branch(2)

    with frametrace.trace() as tracer:
        for _ in range(3):
            t = threading.Thread(target=work)
            t.start()
            t.join()
    events = tracer.getEvents()
    write_chrome(tracer, tmp_path / "t.json")
    known = {int(k): v for k, v in read_other_data(tmp_path / "t.json")["thread_ids"].items()}
    loaded = load(tmp_path / "t.json").events
    assert len(loaded) == len(events)
    for a, b in zip(loaded, events):
        assert tuple(a)[:4] + tuple(a)[5:] == tuple(b)[:4] + tuple(b)[5:]
        if b.native_thread_id in known:
            assert a.thread_id == known[b.native_thread_id]
        else:
            assert a.thread_id == b.native_thread_id


@pytest.mark.one_setup
def test_cut_anywhere_is_truncated(tmp_path, good_file):
    # Whatever the cut falls on: a string, a number, true, an escape, a separator.
    cuts = sorted(set(range(1, len(good_file) - 1, 23)) | {good_file.index(b"true") + 2,
                                                          len(good_file) - 2})
    path = tmp_path / "cut.json"
    for n in cuts:
        path.write_bytes(good_file[:n])
        with pytest.raises(ValueError, match="truncated") as info:
            load(path)
        assert str(info.value).startswith(f"{path}: not JSON: truncated"), (n, str(info.value))


@pytest.mark.one_setup
def test_the_place_of_an_event_ending_after_stop_is_named(tmp_path, good_file):
    path = tmp_path / "late.json"
    path.write_bytes(_early_stop(good_file))
    with pytest.raises(ValueError, match=r"late.json: traceEvents\[\d+\]: ends \d+ ns after"):
        load(path)


BOMB_CHILD = r"""
import gzip, os, sys
from frametrace.loader import load
def hwm():
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith("VmHWM:"))
path, head, fill = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()
block = (fill or b"\0") * (1 << 20)
with gzip.open(path, "wb", compresslevel=6) as fh:
    fh.write(head)
    for _ in range(96):  # 96 MiB inflated, a few hundred KiB on disk
        fh.write(block)
print(os.path.getsize(path))
before = hwm()
try:
    load(path)
except ValueError as exc:
    print(before, hwm(), str(exc))
"""


@pytest.mark.one_setup
@pytest.mark.parametrize("head, fill, words", [
    ("", "", "not JSON: Expecting value at character 0"),
    ('{"traceEvents":[', "0", "traceEvents[0]: an object expected"),
    ('{"otherData":"', "a", "a JSON value of more than"),
    ('{"events":[', "[],", "more than 1000 elements in the top-level array 'events'"),
])
def test_gzip_bomb_is_refused_within_bounded_memory(tmp_path, head, fill, words):
    """A small gzip file of 96 MiB inflated: ValueError, the loader's peak
    memory below what it inflates to (2 to 48 MiB here, the same at 256 MiB
    inflated: bounded by the longest value read, not by the file)."""
    import subprocess
    import sys
    path = tmp_path / "bomb.json.gz"
    out = subprocess.run([sys.executable, "-c", BOMB_CHILD, str(path), head, fill],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert int(out[0]) < 1 << 20
    before, peak, message = out[1].split(" ", 2)
    assert message.startswith(f"{path}: ") and words in message, message
    if not UNDER_ASAN:  # ASan's quarantine keeps freed chunks resident
        assert int(peak) - int(before) < 64 << 20


@pytest.mark.one_setup
def test_non_json_is_refused_from_its_first_bytes(tmp_path):
    # Not read through: the error is at the start whatever follows.
    path = tmp_path / "zeros.json"
    path.write_bytes(b"  \n" + bytes(64 << 20))
    with pytest.raises(ValueError, match="zeros.json: not JSON: Expecting value at character 3"):
        load(path)


@pytest.mark.one_setup
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_the_metadata_is_read_from_the_end_of_the_file(tmp_path, good_file, suffix):
    # load() and merge read otherData.frametrace from the end first, so the
    # events become Events as they stream past (else kept as tuples first).
    from frametrace import loader
    path = tmp_path / f"t{suffix}"
    path.write_bytes(gzip.compress(good_file) if suffix.endswith(".gz") else good_file)
    assert loader._tail_other(str(path)) == json.loads(good_file)["otherData"]["frametrace"]


@pytest.mark.one_setup
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_the_metadata_neither_first_nor_last(tmp_path, good_file, suffix):
    # A first pass finds otherData.frametrace (and checks the events), a
    # second reads the events: the same trace, progress through the file once.
    from frametrace import loader
    (tmp_path / "good.json").write_bytes(good_file)
    path = tmp_path / f"middle{suffix}"
    text = _other_in_the_middle(good_file)
    path.write_bytes(gzip.compress(text) if suffix.endswith(".gz") else text)
    assert loader._tail_other(str(path)) is None
    seen = []
    loaded = load(path, progress=lambda done, total: seen.append((done, total)))
    assert loaded.chrome_top_level.pop("padding") == "x" * (2 << 20)  # a member of the file's
    assert loaded == load(tmp_path / "good.json")
    assert seen == sorted(seen) and seen[-1] == (os.path.getsize(path),) * 2
    assert read_other_data(path) == read_other_data(tmp_path / "good.json")
