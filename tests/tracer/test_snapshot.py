"""Tracer.snapshot(): the records so far, as a stopped
tracer, while the tracer goes on recording.  A snapshot reads like a tracer
stopped at the snapshot time: the frames running then end exactly there
(open_at_stop), no event ends after it, and every event that had ended is
the one the live tracer gives at its own stop."""
import threading
import time

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import UNDER_ASAN


def key(ev):
    return (ev.thread_id, ev.name, ev.depth, ev.start_ns)


def check_against_live(snap, live):
    """Every event of the snapshot is the live tracer's, cut at the
    snapshot time; every live event that began before it is there."""
    assert live.start_ns == snap.start_ns < snap.stop_ns < live.stop_ns
    snap_events = snap.getEvents()
    assert_valid_trace(snap_events, snap.start_ns, snap.stop_ns)
    live_events = {key(ev): ev for ev in live.getEvents()}
    for ev in snap_events:
        assert ev.end_ns <= snap.stop_ns
        whole = live_events[key(ev)]
        assert ev.open_at_start == whole.open_at_start
        if whole.end_ns <= snap.stop_ns:
            assert (ev.end_ns, ev.open_at_stop) == (whole.end_ns, whole.open_at_stop), ev
        else:
            assert ev.open_at_stop and ev.end_ns == snap.stop_ns, ev
    started = {k for k, ev in live_events.items() if ev.start_ns <= snap.stop_ns}
    assert started == {key(ev) for ev in snap_events}
    return snap_events


def leaf(n):
    return sum(range(n))


def work(i, take):
    leaf(i)
    if i == 3:
        take()
    leaf(i + 1)


def loop(take):
    for i in range(6):
        work(i, take)


def test_snapshot_mid_loop_is_the_live_trace_cut_there():
    snaps = []
    tracer = frametrace.Tracer()
    with tracer:
        loop(lambda: snaps.append(tracer.snapshot()))
    (snap,) = snaps
    events = check_against_live(snap, tracer)
    assert type(snap) is type(tracer)
    assert (snap.buffer_size, snap.c_calls, snap.backend) == (
        tracer.buffer_size, tracer.c_calls, tracer.backend)
    # The frames running at the snapshot, outermost first, cut there.
    # (snapshot() itself, a method of the tracer, is never recorded.)
    open_now = [ev.name.split(".")[-1] for ev in events if ev.open_at_stop]
    assert open_now[-4:] == ["test_snapshot_mid_loop_is_the_live_trace_cut_there", "loop",
                             "work", "<lambda>"]
    works = [ev for ev in events if ev.name == "work"]
    assert len(works) == 4 and works[-1].open_at_stop
    assert [ev.name for ev in events if ev.name == "leaf"] == ["leaf"] * 7


def test_tracing_goes_on_after_a_snapshot():
    tracer = frametrace.Tracer()
    snaps = []
    with tracer:
        loop(lambda: snaps.append(tracer.snapshot()))
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert [ev.name for ev in events if ev.name in ("work", "leaf")] == \
        ["work", "leaf", "leaf"] * 6
    assert not any(ev.open_at_stop for ev in events if ev.name in ("work", "leaf"))


def test_many_snapshots_each_cut_at_its_own_time():
    tracer = frametrace.Tracer()
    snaps = []
    with tracer:
        for i in range(20):
            leaf(i)
            snaps.append(tracer.snapshot())
    times = [s.stop_ns for s in snaps]
    assert times == sorted(times) and len(set(times)) == len(times)
    for i, snap in enumerate(snaps):
        events = check_against_live(snap, tracer)
        assert sum(ev.name == "leaf" for ev in events) == i + 1


def test_snapshot_while_other_threads_run():
    stop = threading.Event()
    started = threading.Barrier(4)  # every spinner runs before the snapshot

    def spin():
        started.wait()
        while not stop.is_set():
            leaf(50)

    tracer = frametrace.Tracer()
    with tracer:
        workers = [threading.Thread(target=spin, name=f"spinner-{i}") for i in range(3)]
        for w in workers:
            w.start()
        started.wait()
        for _ in range(50):
            leaf(100)  # let the spinners run
        snap = tracer.snapshot()
        stop.set()
        for w in workers:
            w.join()
    events = check_against_live(snap, tracer)
    names = {t.thread_id: t.name for t in snap.threads}
    spinning = {ev.thread_id for ev in events if ev.name.endswith("spin")}
    assert {names[t] for t in spinning} == {f"spinner-{i}" for i in range(3)}
    # Every spinner that had begun is open at the snapshot, its loop cut there.
    for ev in events:
        if ev.name.endswith("spin"):
            assert ev.open_at_stop and ev.end_ns == snap.stop_ns


def test_snapshot_of_a_wrapped_ring_keeps_the_frames_running():
    """Calls overwritten by the ring: the frames still running come from
    the threads' stacks at the snapshot (as at a stop), open at start."""
    tracer = frametrace.Tracer(buffer_size=64)
    snaps = []

    def deep(n):
        if n:
            return deep(n - 1)
        for i in range(200):
            leaf(i % 5)
        snaps.append(tracer.snapshot())

    with tracer:
        deep(5)
    (snap,) = snaps
    events = snap.getEvents()
    assert_valid_trace(events, snap.start_ns, snap.stop_ns)
    deeps = [ev for ev in events if ev.name.endswith("deep")]
    assert len(deeps) == 6
    assert all(ev.open_at_start and ev.open_at_stop for ev in deeps)
    assert snap.stats.dropped > 0 and snap.stats.dropped <= tracer.stats.dropped


def test_snapshot_inside_generator_and_exception_handler():
    tracer = frametrace.Tracer()
    snaps = []

    def gen():
        yield 1
        try:
            raise ValueError("x")
        except ValueError:
            snaps.append(tracer.snapshot())
        yield 2

    with tracer:
        assert list(gen()) == [1, 2]
    (snap,) = snaps
    events = check_against_live(snap, tracer)
    gens = [ev for ev in events if ev.name.endswith("gen")]
    assert [ev.open_at_stop for ev in gens] == [False, True]


def test_writers_and_clear_on_a_snapshot(tmp_path):
    tracer = frametrace.Tracer()
    with tracer:
        loop(lambda: None)
        snap = tracer.snapshot()
        loop(lambda: None)
    trace = frametrace.Trace(tracer=snap, tracer_start_ns=snap.start_ns,
                             tracer_stop_ns=snap.stop_ns,
                             session_start_ns=snap.start_ns, session_end_ns=snap.stop_ns)
    for name in ("snap.json", "snap.pftrace"):
        trace.save(str(tmp_path / name))
    loaded = frametrace.load(str(tmp_path / "snap.json"))
    assert len(loaded.events) == len(snap.getEvents())
    assert max(ev.end_ns for ev in loaded.events) <= snap.stop_ns
    snap.clear()
    with pytest.raises(RuntimeError):
        snap.getEvents()
    # The live tracer's records are its own.
    assert sum(ev.name == "work" for ev in tracer.getEvents()) == 12


def test_snapshot_needs_a_recording_tracer():
    tracer = frametrace.Tracer()
    with pytest.raises(RuntimeError, match="needs a tracer that is recording"):
        tracer.snapshot()
    with tracer:
        pass
    with pytest.raises(RuntimeError, match="of a stopped tracer"):
        tracer.snapshot()


def test_snapshot_of_a_snapshot_is_refused():
    tracer = frametrace.Tracer()
    with tracer:
        snap = tracer.snapshot()
    with pytest.raises(RuntimeError, match="of a stopped tracer"):
        snap.snapshot()
    with pytest.raises(RuntimeError):
        snap.start()


def test_ended_threads_packed_rings_in_a_snapshot():
    tracer = frametrace.Tracer()
    with tracer:
        for i in range(100):  # ended threads: swept, their rings packed
            t = threading.Thread(target=leaf, args=(i,))
            t.start()
            t.join()
        snap = tracer.snapshot()
    events = check_against_live(snap, tracer)
    assert sum(ev.name == "leaf" for ev in events) == 100


@pytest.mark.parametrize("buffer_size", [1 << 16, 256])
def test_running_threads_frames_at_snapshots_and_stop(buffer_size):
    """Threads caught anywhere, between a frame's push and its call event
    too (3.12+), with and without their rings overwritten: each spinner's
    frames open at a snapshot, and at the stop, are exactly its stack."""
    stop = threading.Event()

    def nop():
        pass

    def spin():
        while not stop.is_set():
            nop()
            nop()
            nop()

    tracer = frametrace.Tracer(buffer_size=buffer_size)
    snaps = []
    with tracer:
        workers = [threading.Thread(target=spin) for _ in range(2)]
        for w in workers:
            w.start()
        for _ in range(8 if UNDER_ASAN else 30):  # each snapshot is read in full
            time.sleep(0.001)  # the spinners run, and are stopped anywhere
            snaps.append(tracer.snapshot())
        stop.set()
        for w in workers:
            w.join()
    tracer_spinners = {w.ident for w in workers}
    for snap in snaps:
        events = snap.getEvents()
        assert_valid_trace(events, snap.start_ns, snap.stop_ns)
        for ident in tracer_spinners:
            # Python frames (3.14's threading runs the target inside the C
            # method Context.run).
            chain = [ev.name.split(".")[-1] for ev in events
                     if ev.thread_id == ident and ev.open_at_stop and ev.kind == "py"
                     and not ev.name.startswith("<")]
            if chain:  # a spinner that had begun
                assert chain[:4] == ["_bootstrap", "_bootstrap_inner", "run", "spin"], chain
                assert chain[4:] in ([], ["nop"], ["is_set"]), chain


def check_window(snap, live):
    """A snapshot since a mark: the live trace between the mark (the
    snapshot's start_ns) and the snapshot time, every frame running at
    either end cut there."""
    lo, hi = snap.start_ns, snap.stop_ns
    assert live.start_ns < lo < hi < live.stop_ns
    events = snap.getEvents()
    assert_valid_trace(events, lo, hi)
    # A C function running across the whole window is not in it: the
    # threads' stacks give the Python frames running at both ends, not the
    # C ones (3.14's threading runs a thread's target inside Context.run).
    # The frames below it are one level less deep then.
    live_events = live.getEvents()
    spanning = [ev for ev in live_events if ev.kind == "c" and ev.start_ns < lo and ev.end_ns > hi]
    got = sorted((ev.thread_id, ev.name, ev.start_ns, ev.end_ns, ev.open_at_start,
                  ev.open_at_stop) for ev in events)
    want = sorted((ev.thread_id, ev.name, max(ev.start_ns, lo), min(ev.end_ns, hi),
                   ev.open_at_start or ev.start_ns < lo, ev.open_at_stop or ev.end_ns > hi)
                  for ev in live_events
                  if ev.end_ns >= lo and ev.start_ns <= hi and ev not in spanning)
    assert got == want
    if not spanning:
        assert sorted((ev.thread_id, ev.start_ns, ev.depth) for ev in events) == sorted(
            (ev.thread_id, max(ev.start_ns, lo), ev.depth) for ev in live_events
            if ev.end_ns >= lo and ev.start_ns <= hi)
    return events


@pytest.mark.parametrize("buffer_size", [1 << 16, 4096])
def test_snapshot_since_a_mark_is_the_window(buffer_size):
    tracer = frametrace.Tracer(buffer_size=buffer_size)
    marks, snaps = [], []

    def step(i):
        marks.append(tracer.mark())
        for j in range(30):
            leaf(j)
        if i >= 3:
            snaps.append(tracer.snapshot(since=marks[i - 2]))

    with tracer:
        for i in range(8):
            step(i)
    assert len(snaps) == 5
    for snap in snaps:
        events = check_window(snap, tracer)
        steps = [ev for ev in events if ev.name.endswith("step")]
        # Two whole steps, and the one running, cut at the snapshot.
        assert [(ev.open_at_start, ev.open_at_stop) for ev in steps] == [
            (True, False), (False, False), (False, True)]
        assert sum(ev.name == "leaf" for ev in events) == 90


def test_window_copies_only_the_records_since_the_mark():
    """The snapshot's rings hold the window, not the whole ring: measured
    through the snapshot's memory (its threads' retained records)."""
    tracer = frametrace.Tracer(buffer_size=1 << 20)
    with tracer:
        for j in range(20000):
            leaf(1)
        mark = tracer.mark()
        leaf(2)
        whole = tracer.snapshot()
        window = tracer.snapshot(since=mark)
    assert len(whole.getEvents()) > 40000
    events = check_window(window, tracer)
    assert [ev.name for ev in events if ev.name in ("leaf", "sum")] == ["leaf", "sum"]
    assert window.ring_bytes < 4096 < (1 << 18) < whole.ring_bytes


def test_window_with_threads_started_and_ended_around_the_mark():
    tracer = frametrace.Tracer()
    with tracer:
        before = threading.Thread(target=leaf, args=(5,))
        before.start()
        before.join()
        go, parked, stop = threading.Event(), threading.Event(), threading.Event()

        def spin():
            # Calls on both sides of the mark, then parked in C for the
            # snapshot (a thread caught runnable between a frame's push and
            # its call event is test_running_threads_... 's case).
            for _ in range(50):
                leaf(3)
            go.wait()
            for _ in range(50):
                leaf(3)
            parked.set()
            stop.wait()

        spinner = threading.Thread(target=spin)
        spinner.start()
        time.sleep(0.01)
        mark = tracer.mark()
        go.set()
        after = threading.Thread(target=leaf, args=(7,))
        after.start()
        after.join()
        parked.wait()
        time.sleep(0.01)
        snap = tracer.snapshot(since=mark)
        stop.set()
        spinner.join()
    events = check_window(snap, tracer)
    # Serials in registration order (idents are reused): the thread that
    # ended before the mark has no event in the window, the one started
    # after has its one leaf().
    spinner_serial = next(ev.thread_serial for ev in events if ev.name.endswith("spin"))
    leaves = [ev.thread_serial for ev in events
              if ev.name == "leaf" and ev.thread_serial != spinner_serial]
    assert leaves == [max(t.serial for t in snap.threads)]


def test_mark_and_since_errors():
    tracer = frametrace.Tracer()
    other = frametrace.Tracer()
    with pytest.raises(RuntimeError, match="mark\\(\\) needs a tracer that is recording"):
        tracer.mark()
    with tracer:
        mark = tracer.mark()
        with pytest.raises(TypeError, match="since must be a mark"):
            tracer.snapshot(since="x")
        with pytest.raises(ValueError, match="not a mark of this tracer"):
            tracer.snapshot(since=b"12345")
        with pytest.raises(ValueError, match="not a mark of this tracer"):
            tracer.snapshot(since=mark[:-1])
    with other:
        with pytest.raises(ValueError, match="not a mark of this tracer"):
            other.snapshot(since=mark)
        assert other.snapshot(since=None).stop_ns is not None
