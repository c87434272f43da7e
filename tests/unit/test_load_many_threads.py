"""A trace of very many threads (a thread per request): the file, whose
otherData maps every thread, loads, is summarised and merges."""
import json

import pytest

import frametrace
from frametrace.loader import load, merge, read_other_data
from support import UNDER_ASAN

N = 120_000  # (otherData then holds more than the reader's 8 MiB bound on a value)


def handle_request():
    return None


def requests_trace(n):
    """What a tracer records of a server whose every request runs on a
    thread of its own: the main thread, then n threads of one call each.
    Made here, not traced: what is tested is the file, and starting
    120,000 threads takes CPython some 12 s."""
    code = handle_request.__code__
    threads = [frametrace.ThreadInfo((1, 1, 100, "MainThread", 0))]
    events = []
    for i in range(n):
        # Idents as pthread_self() gives them, native ids as Linux does.
        serial, thread_id, native = i + 2, 140_000_000_000_000 + 8_392_704 * i, 2_000_000 + i
        threads.append(frametrace.ThreadInfo((serial, thread_id, native, f"Thread-{i + 1}", 0)))
        start = 1_000 + 100 * i
        events.append(frametrace.Event(("handle_request", code.co_filename, code.co_firstlineno,
                                        "py", thread_id, native, start, start + 40, 0, -1,
                                        False, False, serial, False)))
    stop = 1_000 + 100 * n
    return frametrace.Trace(events=events, threads=threads, session_end_ns=stop,
                            tracer_start_ns=0, tracer_stop_ns=stop)


@pytest.mark.skipif(UNDER_ASAN, reason="a test of scale (minutes under ASan): the writers and "
                                       "readers it runs are checked there by the smaller tests")
def test_a_trace_of_120000_threads_loads_summarises_and_merges(tmp_path):
    """otherData is some 9 MiB, more than the fixed bound on a value the
    reader held before it scaled the bound with the file."""
    path = tmp_path / "requests.json.gz"
    requests_trace(N).save(str(path))
    assert len(json.dumps(read_other_data(path))) > 8 << 20
    trace = load(path)
    assert len(trace.threads) == N + 1
    assert sum(e.name == "handle_request" for e in trace.events) == N
    table = trace.summary(print=False)
    assert [(r.name, r.calls) for r in table.rows if r.name == "handle_request"] == [
        ("handle_request", N)]
    merge([path], tmp_path / "merged.json.gz")
    merged = load(tmp_path / "merged.json.gz")
    assert len(merged.threads) == N + 1
    assert sum(e.name == "handle_request" for e in merged.events) == N
