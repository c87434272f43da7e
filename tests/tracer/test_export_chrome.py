"""Chrome trace JSON, parsed back and checked event by event against
getEvents(): counts, names, nesting, times to the nanosecond, threads."""
import decimal
import gzip
import json
import os
import threading

import pytest

import frametrace
from frametrace.export import write_chrome
from frametrace.testing import assert_valid_trace
from support import trace_of
from targets import calls


def load(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        # Decimals: the file's microseconds must give back exact nanoseconds.
        return json.load(fh, parse_float=decimal.Decimal)


def ns(origin, us):
    value = decimal.Decimal(us) * 1000
    assert value == value.to_integral_value(), us
    return origin + int(value)


def traced_program():
    def worker():
        calls.branch(3)

    with frametrace.trace() as tracer:
        calls.program()
        calls.catcher()
        t = threading.Thread(target=worker, name="chrome-worker")
        t.start()
        t.join()
        tracer.stop()
    return tracer, t


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_events_round_trip_exactly(tmp_path, suffix):
    tracer, worker = traced_program()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    path = tmp_path / f"trace{suffix}"
    assert write_chrome(trace_of(tracer, process_name="trainer"), path) == len(events)
    if suffix == ".json.gz":
        with open(path, "rb") as fh:
            assert fh.read(2) == b"\x1f\x8b"
    doc = load(path)
    other = doc["otherData"]["frametrace"]
    origin = other["origin_ns"]
    assert (other["start_ns"], other["stop_ns"]) == (tracer.start_ns, tracer.stop_ns)
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(events)
    tid_of = {int(k): v for k, v in other["thread_ids"].items()}
    for ev, ce in zip(events, complete):
        assert ce["name"] == ev.name
        assert ce["cat"] == ("c" if ev.kind == "c" else "python")
        assert tid_of[ce["tid"]] == ev.thread_id
        assert ce["tid"] == ev.native_thread_id
        assert ce["pid"] == os.getpid()
        start = ns(origin, ce["ts"])
        assert start == ev.start_ns
        assert start + int(decimal.Decimal(ce["dur"]) * 1000) == ev.end_ns
        assert ce["args"]["file"] == f"{ev.filename}:{ev.lineno}"
        assert ce["args"].get("open_at_start", False) == ev.open_at_start
        assert ce["args"].get("open_at_stop", False) == ev.open_at_stop
    meta = {(e["name"], e["tid"]): e["args"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert meta[("process_name", 0)]["name"] == "trainer"
    assert meta[("thread_name", worker.native_id)]["name"] == "chrome-worker"
    assert meta[("thread_name", threading.get_native_id())]["name"] == threading.current_thread().name


def test_nesting_survives_in_the_file(tmp_path):
    tracer, _ = traced_program()
    write_chrome(tracer, tmp_path / "t.json")
    doc = load(tmp_path / "t.json")
    by_tid = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            by_tid.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_tid.values():
        # Complete events of one thread either nest or follow each other.
        stack = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start and stack[-1] != start:
                stack.pop()
            while stack and stack[-1] < end and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], (start, end, stack[-1])
            stack.append(end)


def test_names_needing_escapes(tmp_path):
    namespace = {}
    exec('def f():\n    return 1\n', namespace)
    f = namespace["f"]
    f.__code__ = f.__code__.replace(co_name='we"ird\\name\n\u00e9\u2603',
                                    co_qualname='we"ird\\name\n\u00e9\u2603',
                                    co_filename='dir/"x".py') if hasattr(f.__code__, "co_qualname") else \
        f.__code__.replace(co_name='we"ird\\name\n\u00e9\u2603', co_filename='dir/"x".py')
    with frametrace.trace() as tracer:
        f()
    write_chrome(tracer, tmp_path / "t.json")
    doc = load(tmp_path / "t.json")
    names = [e["name"] for e in doc["traceEvents"] if e["ph"] == "X"]
    assert 'we"ird\\name\n\u00e9\u2603' in names
    files = [e["args"]["file"] for e in doc["traceEvents"] if e["ph"] == "X"]
    assert 'dir/"x".py:1' in files


def test_session_trace_with_ranges_and_steps(tmp_path):
    def model(x):
        return sum(x)

    with frametrace.profile(python_steps=1) as prof:
        for i in range(3):
            with frametrace.range("forward"):
                model([i])
            prof.step()
    trace = prof.last_trace
    path = trace.to_chrome(tmp_path / "session.json")
    doc = load(path)
    cats = [e["cat"] for e in doc["traceEvents"] if e["ph"] == "X"]
    assert cats.count("step") == len(trace.steps) == 4
    assert cats.count("range") == 3
    assert cats.count("python") + cats.count("c") == len(trace.events)
    other = doc["otherData"]["frametrace"]
    assert other["origin_ns"] == trace.session_start_ns
    assert other["stop_ns"] == trace.tracer_stop_ns
    steps = [e for e in doc["traceEvents"] if e.get("cat") == "step"]
    assert [e["name"] for e in steps] == [s.name for s in trace.steps]
    assert ns(other["origin_ns"], steps[-1]["ts"]) == trace.steps[-1].start_ns


def test_misuse(tmp_path):
    tracer = frametrace.Tracer()
    with pytest.raises(ValueError, match="never started"):
        write_chrome(tracer, tmp_path / "x.json")
    with tracer:
        pass
    with pytest.raises(OSError):
        write_chrome(tracer, tmp_path)  # a directory, not a file
    with pytest.raises(TypeError):
        tracer._write_chrome(str(tmp_path / "x.json"))
    tracer.clear()
    with pytest.raises(RuntimeError):
        tracer._write_chrome(str(tmp_path / "x.json"), pid=1, origin_ns=0, head="", prelude="")
