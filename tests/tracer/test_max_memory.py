"""max_memory: the bound over all of a tracer's rings.  Past it, the rings
of threads that ended go first (oldest first, each whole); when live
threads alone fill it, a full ring stops growing and wraps at its size.
Every record lost counts in dropped_records, and the events lost entirely
in dropped, as under overflow."""
import subprocess
import sys
import threading

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from targets import calls

PAGE = 4096


def records(events):
    """Records the events were replayed from: a call and a return each,
    less the ends the tracer never saw."""
    return sum(2 - e.open_at_start - e.open_at_stop for e in events)


def leaves(n):
    for i in range(n):
        calls.leaf(i)


def run(max_memory, worker_calls, main_calls):
    """A thread that makes worker_calls calls and ends, then main_calls
    calls on this thread: the tracer, its events, the worker's ident."""
    tracer = frametrace.Tracer(c_calls=False, max_memory=max_memory)
    worker = threading.Thread(target=leaves, args=(worker_calls,))
    with tracer:
        worker.start()
        worker.join()
        leaves(main_calls)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert tracer.ring_bytes <= max(max_memory, 2 * PAGE)
    return tracer, events, worker.ident


def by_thread(events, ident):
    return [e for e in events if e.thread_id == ident]


def test_default_and_getters():
    assert frametrace.DEFAULT_MAX_MEMORY == 1 << 30
    tracer = frametrace.Tracer()
    assert tracer.max_memory == 1 << 30
    assert tracer.ring_bytes == 0
    assert frametrace.Tracer(max_memory=12345).max_memory == 12345


@pytest.mark.parametrize("value, error", [
    ("1", TypeError), (1.5, TypeError), (True, TypeError), (None, TypeError),
    (0, ValueError), (-1, ValueError), (1 << 70, ValueError),
])
def test_bad_max_memory_is_refused_naming_it(value, error):
    with pytest.raises(error, match="max_memory"):
        frametrace.Tracer(max_memory=value)
    with pytest.raises(error, match="max_memory"):
        frametrace.profile(max_memory=value)


def test_cli_refuses_a_bad_max_memory(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("pass\n")
    proc = subprocess.run([sys.executable, "-m", "frametrace", "run", "--max-memory", "0",
                           "-o", str(tmp_path / "t.json"), str(script)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "max_memory" in proc.stderr


def test_cli_takes_max_memory(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("def f(i):\n    return i\nfor i in range(50000):\n    f(i)\n")
    out = tmp_path / "t.json"
    proc = subprocess.run([sys.executable, "-m", "frametrace", "run", "--max-memory", "65536",
                           "-o", str(out), str(script)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "lost entirely" in proc.stderr  # 100,000 records do not fit in 64 KiB
    assert out.exists()


def test_profile_passes_max_memory_to_its_tracers():
    seen = []
    with frametrace.profile(max_memory=1 << 20, on_trace_ready=seen.append) as prof:
        leaves(10)
        prof.step()
    assert seen


def test_an_ended_threads_records_go_first_whole():
    # Unbounded, the same program: what the worker recorded.
    free, free_events, free_ident = run(1 << 30, 2000, 3000)
    assert free.stats.dropped == 0 and free.stats.dropped_records == 0
    worker_events = by_thread(free_events, free_ident)
    worker_records = records(worker_events)
    assert len([e for e in worker_events if e.name == "leaf"]) == 2000
    # 64 KiB: the worker's ring (4,000-odd records: 32 KiB, trimmed to 5
    # pages when it is found ended) and this thread's growing one do not
    # both fit once this thread's needs 64 KiB for its 6,000-odd records.
    tracer, events, ident = run(64 << 10, 2000, 3000)
    assert by_thread(events, ident) == []
    assert tracer.stats.dropped_records == worker_records
    # Events lost entirely: all of the worker's, counted as under overflow.
    dropped = {t.thread_id: t.dropped for t in tracer.threads}
    assert dropped[ident] == len(worker_events)
    assert tracer.stats.dropped == len(worker_events)
    # This thread lost nothing.
    main = threading.get_ident()
    assert len([e for e in by_thread(events, main) if e.name == "leaf"]) == 3000
    assert dropped[main] == 0


def test_an_ended_threads_ring_is_packed_before_anything_is_dropped():
    free, free_events, free_ident = run(1 << 30, 2000, 3000)
    # 80 KiB: this thread's ring grows to 64 KiB for its 6,000-odd records;
    # the worker's 4,000-odd, 32 KiB in words, would not fit beside it, but
    # packed (3-4 bytes a record) they do: nothing is lost.
    tracer, events, ident = run(80 << 10, 2000, 3000)
    assert tracer.stats.dropped == 0 and tracer.stats.dropped_records == 0
    assert tracer.ring_bytes < 64 * 1024 + 4000 * 4
    shape = [(e.name, e.depth, e.kind) for e in by_thread(events, ident)]
    assert shape == [(e.name, e.depth, e.kind) for e in by_thread(free_events, free_ident)]
    assert len(events) == len(free_events)


def test_live_threads_at_the_bound_wrap_at_their_size():
    free, free_events, _ = run(1 << 30, 10, 20000)
    tracer, events, _ = run(16 << 10, 10, 20000)
    main = threading.get_ident()
    # This thread's ring grew to what the bound left and wrapped there: it
    # keeps its newest records, the oldest are counted.
    assert tracer.ring_bytes <= 16 << 10
    kept = records(by_thread(events, main))
    assert 0 < kept < records(by_thread(free_events, main))
    lost = tracer.stats.dropped_records
    assert lost > 0
    # Every record is either kept or counted, the worker's ring (discarded
    # or kept) included.
    assert records(events) + lost == records(free_events)
    # dropped: the events not shown at all.
    assert tracer.stats.dropped == len(free_events) - len(events)
    shown = [e for e in by_thread(events, main) if e.name == "leaf"]
    assert 0 < len(shown) < 20000


def test_ended_threads_rings_are_packed_and_replay_exactly():
    # 1,000 threads one after the other: each often gets the ident of the
    # one before, yet every ended one is found ended by a later thread's
    # sweep (every 64 new rings) and its ring packed, 3-4 bytes a record
    # instead of 8; the records read back exactly.
    sizes = [100 + k % 50 for k in range(1000)]
    tracer = frametrace.Tracer(c_calls=False)
    idents = []
    with tracer:
        for n in sizes:
            worker = threading.Thread(target=calls.branch, args=(n,))
            worker.start()
            worker.join()
            idents.append(worker.ident)
        ring_bytes = tracer.ring_bytes
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert tracer.stats.dropped == 0 and tracer.stats.dropped_records == 0
    assert len(set(idents)) < len(idents)  # the premise: idents reused
    by_serial = {}
    for e in events:
        by_serial.setdefault(e.thread_serial, []).append(e)
    main = threading.get_ident()
    workers = [evs for evs in by_serial.values() if evs[0].thread_id != main]
    assert len(workers) == len(sizes)
    for n, evs in zip(sizes, sorted(workers, key=lambda evs: evs[0].start_ns)):
        branch = [e for e in evs if e.name == "branch"]
        assert len(branch) == 1
        leaves = [e for e in evs if e.name == "leaf"]
        assert len(leaves) == n
        assert all(events[e.parent] is branch[0] for e in leaves)
        assert all(branch[0].start_ns <= e.start_ns <= e.end_ns <= branch[0].end_ns
                   for e in leaves)
    # Eight bytes a record unpacked (the workers' rings 2 MB); all but the
    # last sweep's 64-odd are packed.  This thread's ring is live: up to
    # twice its records' words, as it grows by doubling.
    worker_records = 2 * sum(len(evs) for evs in workers)
    main_records = 2 * sum(e.thread_id == main for e in events)
    packed_bound = 0.55 * 8 * worker_records + 2 * 8 * main_records + PAGE
    assert ring_bytes < packed_bound, (ring_bytes, worker_records, main_records)
