"""The public surface has one name per thing: getEvents() (no alias),
threads (no dicts keyed by the reusable ident), the loss counters in one
stats, trace_handler() apart from Trace.save(), and ConflictError for a
refused start."""
import cProfile
import threading

import pytest

import frametrace
from targets import calls


def test_one_name_for_each_thing():
    tracer = frametrace.Tracer()
    for gone in ("get_events", "thread_names", "dropped_by_thread", "dropped",
                 "dropped_records"):
        assert not hasattr(tracer, gone), gone
    trace = frametrace.Trace()
    for gone in ("thread_names", "dropped_by_thread", "dropped"):
        assert not hasattr(trace, gone), gone
    assert not hasattr(frametrace, "save")
    assert "trace_handler" in frametrace.__all__ and "save" not in frametrace.__all__


def test_stats_of_a_tracer_a_snapshot_and_a_session_trace():
    tracer = frametrace.Tracer(buffer_size=16, c_calls=False)
    assert tracer.stats == frametrace.Stats((0, 0))
    with tracer:
        for i in range(100):
            calls.leaf(i)
        live = tracer.stats
        snap = tracer.snapshot()
    assert type(live) is frametrace.Stats and live.dropped is None and live.dropped_records > 0
    assert snap.stats.dropped > 0 and snap.stats.dropped_records > 0
    stats = tracer.stats
    assert stats.dropped == sum(t.dropped for t in tracer.threads) > 0
    assert stats == (stats.dropped, stats.dropped_records)
    with pytest.warns(RuntimeWarning, match="were lost entirely"):
        with frametrace.profile(buffer_size=16) as prof:
            for i in range(100):
                calls.leaf(i)
    assert prof.last_trace.stats == prof.last_trace.tracer.stats
    assert frametrace.Trace().stats == (0, 0)


def test_trace_handler_writes_each_trace_to_a_directory(tmp_path):
    handler = frametrace.trace_handler(tmp_path)
    assert repr(handler) == f"frametrace.trace_handler({str(tmp_path)!r}, compress=False)"
    with frametrace.profile(on_trace_ready=handler) as prof:
        calls.leaf(1)
    (written,) = tmp_path.iterdir()
    assert written.name == f"frametrace.{prof.last_trace.pid}.0.json"
    assert [e.name for e in frametrace.load(written).events].count("leaf") == 1


def test_conflict_error_for_another_profiler_or_tracer():
    assert issubclass(frametrace.ConflictError, RuntimeError)
    with frametrace.Tracer():
        with pytest.raises(frametrace.ConflictError, match="another frametrace Tracer"):
            frametrace.Tracer().start()
    profiler = cProfile.Profile()  # refused on either backend
    profiler.enable()
    try:
        with pytest.raises(frametrace.ConflictError, match="another profiler"):
            frametrace.Tracer().start()
    finally:
        profiler.disable()
    # Misuse of one tracer is no conflict: a plain RuntimeError.
    with frametrace.Tracer() as tracer:
        with pytest.raises(RuntimeError) as info:
            tracer.start()
    assert type(info.value) is RuntimeError


def test_threads_tell_apart_threads_that_had_one_ident():
    """Two threads, one after the other, often get one ident: threads keeps
    each one's name and loss where an ident-keyed dict kept one of them."""
    def work():
        calls.leaf(1)

    with frametrace.Tracer() as tracer:
        for name in ("first", "second"):
            t = threading.Thread(target=work, name=name)
            t.start()
            t.join()
    names = [t.name for t in tracer.threads]
    assert names[1:] == ["first", "second"]
    assert all(t.dropped == 0 for t in tracer.threads)
