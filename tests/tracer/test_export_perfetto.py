"""Perfetto's protobuf trace, decoded with a wire-format reader and checked
event by event against getEvents()."""
import gzip
import os
import threading

import pytest

import frametrace
from frametrace.export import write_chrome, write_perfetto
from pbwire import message, one
from targets import calls

# Field numbers of Perfetto's protos (protos/perfetto/trace).
PACKET, TIMESTAMP, SEQ, TRACK_EVENT, INTERNED, FLAGS, DEFAULTS, DESCRIPTOR = 1, 8, 10, 11, 12, 13, 59, 60
TE_CATS, TE_TYPE, TE_NAME_IID, TE_TRACK, TE_NAME, TE_LOC = 3, 9, 10, 11, 23, 34
BEGIN, END = 1, 2


def decode(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        trace = message(fh.read())
    return [message(p) for p in trace[PACKET]]


def slices(packets):
    """{track uuid: [(name, category, start, end, depth)]} in begin order,
    and the track descriptors, resolving interning per sequence."""
    names, cats, default_track = {}, {}, {}
    tracks, out, stacks = {}, {}, {}
    for pkt in packets:
        seq = one(pkt, SEQ)
        if one(pkt, FLAGS, 0) & 1:  # incremental state cleared
            names[seq], cats[seq] = {}, {}
        if INTERNED in pkt:
            data = message(one(pkt, INTERNED))
            for raw in data.get(1, []):
                m = message(raw)
                cats[seq][one(m, 1)] = one(m, 2).decode()
            for raw in data.get(2, []):
                m = message(raw)
                names[seq][one(m, 1)] = one(m, 2).decode()
        if DEFAULTS in pkt:
            default_track[seq] = one(message(one(message(one(pkt, DEFAULTS)), 11)), 11)
        if DESCRIPTOR in pkt:
            d = message(one(pkt, DESCRIPTOR))
            tracks[one(d, 1)] = d
        if TRACK_EVENT in pkt:
            ev = message(one(pkt, TRACK_EVENT))
            track = one(ev, TE_TRACK, default_track.get(seq))
            stack = stacks.setdefault(track, [])
            if one(ev, TE_TYPE) == BEGIN:
                name = names[seq][one(ev, TE_NAME_IID)] if TE_NAME_IID in ev else one(ev, TE_NAME).decode()
                cat = cats[seq].get(one(ev, TE_CATS)) if TE_CATS in ev else None
                rec = [name, cat, one(pkt, TIMESTAMP), None, len(stack)]
                out.setdefault(track, []).append(rec)
                stack.append(rec)
            else:
                assert one(ev, TE_TYPE) == END
                rec = stack.pop()
                rec[3] = one(pkt, TIMESTAMP)
                assert rec[2] <= rec[3]
    assert all(not s for s in stacks.values())
    return {k: [tuple(r) for r in v] for k, v in out.items()}, tracks


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


@pytest.mark.parametrize("suffix", [".pftrace", ".pftrace.gz"])
def test_events_round_trip(tmp_path, suffix):
    tracer, worker = run_program()
    events = tracer.getEvents()
    path = tmp_path / f"t{suffix}"
    assert write_perfetto(path, tracer, process_name="trainer") == len(events)
    by_track, tracks = slices(decode(path))
    # One process track and a thread track per thread, named.
    procs = [message(one(d, 3)) for d in tracks.values() if 3 in d]
    assert [(one(p, 1), one(p, 6).decode()) for p in procs] == [(os.getpid(), "trainer")]
    threads = {one(message(one(d, 4)), 2): (uuid, message(one(d, 4))) for uuid, d in tracks.items() if 4 in d}
    assert one(threads[worker.native_id][1], 5).decode() == "pf-worker"
    # Every event, in order, per thread: name, kind, times to the ns, depth.
    for tid in {ev.native_thread_id for ev in events}:
        uuid = threads[tid][0]
        expected = [(ev.name, "c" if ev.kind == "c" else None, ev.start_ns, ev.end_ns, ev.depth)
                    for ev in events if ev.native_thread_id == tid]
        assert by_track[uuid] == expected


def test_much_smaller_than_json(tmp_path):
    with frametrace.trace() as tracer:
        for _ in range(300):
            calls.program()
    write_perfetto(tmp_path / "t.pftrace", tracer)
    write_chrome(tmp_path / "t.json", tracer)
    ratio = os.path.getsize(tmp_path / "t.pftrace") / os.path.getsize(tmp_path / "t.json")
    assert ratio < 1 / 3, ratio


def test_session_steps_and_ranges(tmp_path):
    with frametrace.profile(python_steps=1) as prof:
        for i in range(3):
            with frametrace.range("forward"):
                calls.leaf(i)
            prof.step()
    trace = prof.last_trace
    by_track, tracks = slices(decode(trace.to_perfetto(tmp_path / "s.pftrace")))
    named = {one(d, 2).decode(): uuid for uuid, d in tracks.items() if 2 in d}
    steps = by_track[named["steps"]]
    assert [(s[0], s[2], s[3]) for s in steps] == [(s.name, s.start_ns, s.end_ns) for s in trace.steps]
    ranges = by_track[next(u for n, u in named.items() if n.startswith("ranges"))]
    assert [(r[0], r[2], r[3]) for r in ranges] == [(r.name, r.start_ns, r.end_ns) for r in trace.ranges]
    assert all(r[1] == "range" for r in ranges) and all(s[1] == "step" for s in steps)


def test_misuse(tmp_path):
    tracer = frametrace.Tracer()
    with pytest.raises(RuntimeError, match="stopped"):
        write_perfetto(tmp_path / "x.pftrace", tracer)
    with tracer:
        pass
    with pytest.raises(OSError):
        write_perfetto(tmp_path, tracer)
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
        writer(tmp_path / name, tracer, progress=lambda done, total: seen.append((done, total)))
        assert seen and seen[0][0] == 1 << 20 and seen[0][1] > 1_200_000

        def stop(done, total):
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            writer(tmp_path / name, tracer, progress=stop)
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
