"""Perfetto's protobuf trace, decoded with Perfetto's own schema (tests/
pftrace.py: the perfetto package's perfetto_trace_pb2) and checked event by
event against getEvents(): slices, names, times, interning, clocks."""
import os
import threading

import pytest

import frametrace
from frametrace.export import write_chrome, write_perfetto
from support import trace_of
from pftrace import BOOTTIME, CLEARED, MONOTONIC, decode, named_tracks, thread_tracks
from targets import calls


def run_program():
    def worker():
        calls.branch(2)

    with frametrace.trace() as tracer:
        calls.program()
        calls.catcher()
        t = threading.Thread(target=worker, name="pf-worker")
        t.start()
        t.join()
    return tracer, t


def expected_slices(events, tid):
    """What a thread's track must hold, as decode() gives it."""
    return [(ev.name, "c" if ev.kind == "c" else None, ev.start_ns, ev.end_ns, ev.depth,
             None if ev.kind == "c" else (ev.filename, ev.name, max(ev.lineno or 0, 0)))
            for ev in events if ev.native_thread_id == tid]


def as_tuples(slices):
    return [(s.name, s.category, s.start, s.end, s.depth, s.location) for s in slices]


@pytest.mark.parametrize("suffix", [".pftrace", ".pftrace.gz"])
def test_events_round_trip(tmp_path, suffix):
    tracer, worker = run_program()
    events = tracer.getEvents()
    path = tmp_path / f"t{suffix}"
    assert write_perfetto(trace_of(tracer, process_name="trainer"), path) == len(events)
    trace = decode(path)
    assert trace.unknown == []
    # One process track and a thread track per thread, named.
    procs = [d.process for d in trace.tracks.values() if d.HasField("process")]
    assert [(p.pid, p.process_name) for p in procs] == [(os.getpid(), "trainer")]
    threads = thread_tracks(trace)
    assert threads[worker.native_id][1].thread_name == "pf-worker"
    assert threads[threading.main_thread().native_id][1].thread_name == "MainThread"
    assert {t.pid for _, t in threads.values()} == {os.getpid()}
    assert all(trace.tracks[uuid].parent_uuid == 1 for uuid, _ in threads.values())
    # Every event, in order, per thread: name, kind, times to the ns, depth,
    # source location.
    tids = {ev.native_thread_id for ev in events}
    assert tids == set(threads)
    for tid in tids:
        assert as_tuples(trace.slices[threads[tid][0]]) == expected_slices(events, tid)


def test_sequences_intern_what_they_use_when_first_used(tmp_path):
    tracer, worker = run_program()
    events = tracer.getEvents()
    write_perfetto(tracer, tmp_path / "t.pftrace")
    trace = decode(tmp_path / "t.pftrace")
    threads = thread_tracks(trace)
    by_track = {}
    for seq in trace.sequences.values():
        if seq.id == 1:
            continue
        first, rest = seq.packets[0], seq.packets[1:]
        # The first packet clears the state, sets the defaults and the
        # clock; no later one clears it again.
        assert first.sequence_flags == CLEARED and not first.HasField("track_event")
        assert all(not p.sequence_flags & CLEARED for p in rest)
        track = seq.defaults.track_event_defaults.track_uuid
        by_track[track] = seq
        # Exactly what the sequence uses, each once, in order of first use:
        # iid k is the k-th function the thread called.
        assert seq.reinterned == []
        assert set(seq.names) == seq.used_names
        assert set(seq.locations) == seq.used_locations <= seq.used_names
        assert set(seq.categories) == seq.used_categories
        order = []
        for p in rest:
            if p.HasField("interned_data"):
                iids = [e.iid for e in p.interned_data.event_names]
                # Interned in the packet of first use.
                assert iids == [p.track_event.name_iid]
                order += iids
        assert order == list(range(1, len(order) + 1))
    assert set(by_track) == {uuid for uuid, _ in threads.values()}
    for tid, (uuid, _) in threads.items():
        mine = [ev for ev in events if ev.native_thread_id == tid]
        seq = by_track[uuid]
        # One iid per function (names may repeat: functions of one name).
        functions = {(ev.name, ev.filename, ev.lineno, ev.kind) for ev in mine}
        assert sorted(seq.names.values()) == sorted(f[0] for f in functions)
        assert set(seq.categories.values()) == ({"c"} if any(ev.kind == "c" for ev in mine) else set())
        assert sorted(seq.locations.values()) == sorted({(ev.filename, ev.name, max(ev.lineno or 0, 0))
                                                         for ev in mine if ev.kind != "c"})


def test_clocks(tmp_path):
    """Timestamps on CLOCK_MONOTONIC, declared: sequence 1's snapshots tie
    it to BOOTTIME (the trace clock, as in system traces), read at start and
    at stop; each thread's clock is incremental, tied to MONOTONIC."""
    tracer, _ = run_program()
    events = tracer.getEvents()
    write_perfetto(tracer, tmp_path / "t.pftrace")
    trace = decode(tmp_path / "t.pftrace")
    first = trace.packets[0]
    assert first.trusted_packet_sequence_id == 1 and first.HasField("clock_snapshot")
    assert trace.primary_clock == BOOTTIME == first.clock_snapshot.primary_trace_clock
    assert first.trace_packet_defaults.timestamp_clock_id == MONOTONIC
    assert len(trace.snapshots) == 2
    start, stop = trace.snapshots
    for snap in trace.snapshots:
        assert set(snap) == {MONOTONIC, BOOTTIME}
        assert snap[BOOTTIME] >= snap[MONOTONIC]  # BOOTTIME counts suspends too
    # Their difference only grows (by the time suspended); the same unless
    # it moved by more than the reads can tell.
    assert stop[BOOTTIME] - stop[MONOTONIC] >= start[BOOTTIME] - start[MONOTONIC]
    # Read at start (about the first events) and right after the stop.
    earliest = min(ev.start_ns for ev in events)
    assert earliest - 10**9 < start[MONOTONIC] <= earliest + 10**9
    assert tracer.stop_ns <= stop[MONOTONIC] < tracer.stop_ns + 10**9
    for seq in trace.sequences.values():
        if seq.id == 1:
            continue
        assert seq.defaults.timestamp_clock_id == 64
        (clock_id, (own, mono, incremental, _)), = seq.clocks.items()
        assert clock_id == 64 and incremental and own == mono
        # Every later packet's timestamp is a delta: small.
        assert all(p.timestamp < 1 << 40 for p in seq.packets[1:])
        assert all(not p.HasField("timestamp_clock_id") for p in seq.packets)


def test_odd_names_and_files(tmp_path):
    """An empty file name, non-ASCII names, a lone surrogate (written as the
    byte it stands for): interned as they are, the file still decodes."""
    namespace = {}
    exec(compile("def f():\n    return 1\ndef \u00e9t\u00e9():\n    return f()\n", "", "exec"), namespace)
    odd = namespace["\u00e9t\u00e9"]
    names = {"co_name": "x\udc80"}
    if hasattr(odd.__code__, "co_qualname"):  # 3.11+: what names a function
        names["co_qualname"] = "x\udc80"
    odd.__code__ = odd.__code__.replace(**names)
    with frametrace.trace() as tracer:
        namespace["f"]()
        odd()
    events = tracer.getEvents()
    write_perfetto(tracer, tmp_path / "t.pftrace")
    trace = decode(tmp_path / "t.pftrace")
    assert trace.unknown == []
    uuid, _ = thread_tracks(trace)[threading.main_thread().native_id]
    got = {(s.name, s.location) for s in trace.slices[uuid]}
    assert ("f", ("", "f", 1)) in got
    assert ("x\udc80", ("", "x\udc80", 3)) in got
    assert len(trace.slices[uuid]) == len(events)


def test_much_smaller_than_json(tmp_path):
    with frametrace.trace() as tracer:
        for _ in range(300):
            calls.program()
    write_perfetto(tracer, tmp_path / "t.pftrace")
    write_chrome(tracer, tmp_path / "t.json")
    ratio = os.path.getsize(tmp_path / "t.pftrace") / os.path.getsize(tmp_path / "t.json")
    assert ratio < 1 / 3, ratio


def test_session_steps_and_ranges(tmp_path):
    with frametrace.profile(python_steps=1) as prof:
        for i in range(3):
            with frametrace.range("forward"):
                calls.leaf(i)
            prof.step()
    trace = prof.last_trace
    decoded = decode(trace.to_perfetto(tmp_path / "s.pftrace"))
    assert decoded.unknown == []
    named = named_tracks(decoded)
    steps = decoded.slices[named["steps"]]
    assert [(s.name, s.start, s.end) for s in steps] == [(s.name, s.start_ns, s.end_ns) for s in trace.steps]
    ranges = decoded.slices[next(u for n, u in named.items() if n.startswith("ranges"))]
    assert [(r.name, r.start, r.end) for r in ranges] == [(r.name, r.start_ns, r.end_ns) for r in trace.ranges]
    assert all(r.category == "range" for r in ranges) and all(s.category == "step" for s in steps)
    assert all(decoded.tracks[u].parent_uuid == 1 for u in named.values())
    # Sequence 1 interns the two categories it uses, once each.
    seq1 = decoded.sequences[1]
    assert sorted(seq1.categories.values()) == ["range", "step"] and seq1.reinterned == []
    # The Python frames are all there too.
    events = trace.events
    threads = thread_tracks(decoded)
    for tid in {ev.native_thread_id for ev in events}:
        assert as_tuples(decoded.slices[threads[tid][0]]) == expected_slices(events, tid)


def test_misuse(tmp_path):
    tracer = frametrace.Tracer()
    with pytest.raises(ValueError, match="never started"):
        write_perfetto(tracer, tmp_path / "x.pftrace")
    with tracer:
        pass
    with pytest.raises(OSError):
        write_perfetto(tracer, tmp_path)
    with pytest.raises(TypeError):
        tracer._write_perfetto(str(tmp_path / "x"), pid=1, process_name="p",
                               thread_names={}, tracks=[("bad", 0, [("x", "no", 1)])])
    tracer.clear()
    with pytest.raises(RuntimeError):
        tracer._write_perfetto(str(tmp_path / "x"), pid=1, process_name="p", thread_names=[], tracks=[])


@pytest.mark.one_setup  # the writer's progress, whatever recorded the trace
def test_progress_of_long_exports(tmp_path):
    import io

    from frametrace.export import TerminalProgress

    def loop(n):
        for i in range(n):
            calls.leaf(i)

    with frametrace.Tracer(buffer_size=1 << 22, c_calls=False) as tracer:
        loop(1_200_000)
    for writer, name in ((write_chrome, "t.json"), (write_perfetto, "t.pftrace")):
        seen = []
        writer(tracer, tmp_path / name, progress=lambda done, total: seen.append((done, total)))
        assert seen and seen[0][0] == 1 << 20 and seen[0][1] > 1_200_000

        def stop(done, total):
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            writer(tracer, tmp_path / name, progress=stop)
    # A pipe or a log gets no progress; a terminal gets a percentage.
    piped = io.StringIO()
    quiet = TerminalProgress("x", piped, delay=0)
    quiet(1 << 20, 1 << 21)
    quiet.close()
    assert piped.getvalue() == ""

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty = Tty()
    shown = TerminalProgress("writing", tty, delay=0)
    shown(1 << 20, 1 << 21)
    shown.close()
    assert "writing: 50%" in tty.getvalue() and tty.getvalue().endswith("writing: 100%\n")
