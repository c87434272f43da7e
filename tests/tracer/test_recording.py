"""A Trace made of a stopped tracer or a snapshot keeps what was recorded:
a later clear() of the tracer, or a new tracer, leaves it whole, also
while it is being written from another thread; the records go with the
last reference to them."""
import gc
import os
import threading

import pytest

import frametrace
from frametrace.export import write_chrome, write_perfetto
from support import needs_plain_allocator, trace_of
from targets import calls


def record():
    with frametrace.Tracer() as tracer:
        calls.branch(2000)
        calls.program()
    return tracer


def kept(tracer):
    # One clock anchor: read at each write, it would differ.
    anchor = {"monotonic_ns": tracer.start_ns, "wall_ns": tracer.start_ns + 10**18}
    return trace_of(tracer, pid=1, clock_anchor=anchor)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def run_another_tracer():
    with frametrace.Tracer() as other:
        calls.branch(100)
    other.clear()


@pytest.mark.parametrize("name", ["t.json", "t.pftrace"])
@pytest.mark.parametrize("source", ["stopped", "snapshot"])
def test_a_trace_kept_across_clear_and_a_new_tracer_writes_the_same_file(
        tmp_path, name, source):
    if source == "stopped":
        tracer = record()
    else:
        with frametrace.Tracer() as live:
            calls.branch(2000)
            calls.program()
            tracer = live.snapshot()
        live.clear()
    trace = kept(tracer)
    events = len(trace.events)
    trace.save(tmp_path / ("before-" + name))
    trace.events = None  # built again from the records
    tracer.clear()
    with pytest.raises(RuntimeError, match="clear"):
        tracer.getEvents()
    with pytest.raises(RuntimeError):
        tracer.start()  # a tracer records once
    run_another_tracer()
    assert trace.tracer is tracer
    assert len(trace.events) == events
    trace.save(tmp_path / ("after-" + name))
    assert read(tmp_path / ("after-" + name)) == read(tmp_path / ("before-" + name))


def big():
    """More than 2**20 events: the writers call progress once."""
    with frametrace.Tracer(buffer_size=1 << 22, c_calls=False) as tracer:
        for i in range(1_100_000):
            calls.leaf(i)
    return tracer


@pytest.mark.one_setup
@pytest.mark.parametrize("writer, name", [(write_chrome, "t.json"), (write_perfetto, "t.pftrace")])
@pytest.mark.parametrize("given", ["trace", "tracer"])
def test_a_write_in_another_thread_while_the_tracer_clears_and_a_new_one_runs(
        tmp_path, writer, name, given):
    """The write, with the GIL released, holds the records: clear(), a
    new tracer and the collector meanwhile change nothing in its file;
    a Trace then writes the same file again."""
    tracer = big()
    trace = kept(tracer)
    events = writer(trace, tmp_path / ("ref-" + name))
    in_write, cleared = threading.Event(), threading.Event()
    result = []

    def progress(done, total):
        if not in_write.is_set():
            in_write.set()
            assert cleared.wait(60)

    def write():
        try:
            source = trace if given == "trace" else tracer
            result.append(writer(source, tmp_path / name, progress=progress))
            if given == "trace":
                result.append(writer(trace, tmp_path / ("again-" + name)))
        except BaseException as exc:
            result.append(exc)
            in_write.set()

    w = threading.Thread(target=write)
    w.start()
    assert in_write.wait(60)
    tracer.clear()
    run_another_tracer()
    gc.collect()
    cleared.set()
    w.join()
    if given == "trace":
        assert result == [events, events]
        assert read(tmp_path / name) == read(tmp_path / ("ref-" + name))
        assert read(tmp_path / ("again-" + name)) == read(tmp_path / ("ref-" + name))
    else:
        # Given the tracer itself, the write reads it as it was at the call
        # (its file has a clock anchor of its own): every event.
        assert result == [events]
        assert os.path.getsize(tmp_path / name) > events


def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@needs_plain_allocator
@pytest.mark.one_setup
@pytest.mark.parametrize("cycle", [False, True])
def test_the_records_go_with_the_last_reference(cycle):
    """tracer.clear() leaves a Trace's records; dropping the Trace (or
    collecting the cycle it is in) frees them."""
    tracer = big()
    trace = kept(tracer)
    if cycle:
        trace.extra_metadata = {"self": trace}
    before = rss()
    tracer.clear()
    assert before - rss() < 8 << 20  # 17 MB of records kept
    del trace
    gc.collect()
    assert before - rss() > 8 << 20
