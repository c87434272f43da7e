"""Each OS thread that recorded is its own thread everywhere, although CPython reuses threading idents: a program starts and joins 50
named threads in turn (glibc reuses a joined thread's stack, so they share
one or two idents), and thread w<i> calls leaf() exactly i + 1 times.  And
where Linux reuses a native tid within one trace, the exports give the later
thread a synthetic tid."""
import json
import os
import threading

import pytest

import frametrace
import frametrace.testing
from frametrace import reports
from frametrace.export import write_chrome, write_perfetto
from pftrace import decode

N = 50
SYNTHETIC_TID_BASE = 1 << 30


def leaf():
    return 1


def work(i):
    for _ in range(i + 1):
        leaf()


def run_threads_in_turn():
    """The program, traced by a session (for Trace.threads); the trace and
    the ident of each worker."""
    idents = []
    with frametrace.profile() as prof:
        for i in range(N):
            t = threading.Thread(target=work, args=(i,), name=f"w{i}")
            t.start()
            t.join()
            idents.append(t.ident)
    return prof.last_trace, idents


@pytest.fixture
def traced():
    trace, idents = run_threads_in_turn()
    # What the test is about: CPython gave later threads earlier ones' idents.
    assert len(set(idents)) < N, "no ident was reused: the test shows nothing"
    return trace


def expected_names():
    return ["MainThread"] + [f"w{i}" for i in range(N)]


def leaf_calls_by_name(events, name_of_serial):
    out = {}
    for e in events:
        if e.name == "leaf":
            name = name_of_serial[e.thread_serial]
            out[name] = out.get(name, 0) + 1
    return out


def check_leaf_calls(counts):
    assert counts == {f"w{i}": i + 1 for i in range(N)}


def test_events_and_threads(traced):
    events = traced.events
    assert len({e.thread_serial for e in events}) == N + 1
    assert [t.serial for t in traced.threads] == list(range(1, N + 2))
    assert [t.name for t in traced.threads] == expected_names()
    # Each thread's ident and native id, as the events have them.
    for t in traced.threads:
        mine = [e for e in events if e.thread_serial == t.serial]
        assert mine, t
        assert {(e.thread_id, e.native_thread_id) for e in mine} == {(t.thread_id, t.native_thread_id)}
    names = {t.serial: t.name for t in traced.threads}
    check_leaf_calls(leaf_calls_by_name(events, names))
    # The tracer's own view is the same.
    assert list(traced.tracer.threads) == list(traced.threads)
    frametrace.testing.assert_well_nested(events)


def test_summary_per_thread(traced):
    table = reports.summary(traced, per_thread=True, limit=None)
    assert len(table.threads) == N + 1
    assert [t.thread_name for t in table.threads.values()] == expected_names()
    assert list(table.threads) == list(range(1, N + 2))  # keyed by serial
    counts = {}
    for serial, t in table.threads.items():
        assert t.thread_serial == serial
        for row in t.rows:
            assert row.thread_serial == serial
            if row.name == "leaf":
                counts[t.thread_name] = row.calls
    check_leaf_calls(counts)
    text = str(table)
    for i in range(N):
        assert f"(w{i})" in text


def test_flame_graph_keeps_threads_apart(traced, tmp_path):
    lines = reports.collapsed_stacks(traced, weight="calls")
    towers = {line.split(";", 1)[0] for line in lines}
    assert len(towers) == N + 1
    counts = {}
    for line in lines:
        path, weight = line.rsplit(" ", 1)
        frames = path.split(";")
        if frames[-1].startswith("leaf "):
            name = frames[0].split(" (thread ", 1)[0]
            counts[name] = counts.get(name, 0) + int(weight)
    check_leaf_calls(counts)
    # Wide enough that no thread's frame is too narrow to draw.
    svg = reports.write_flamegraph_svg(traced, tmp_path / "f.svg", width=10**8)
    text = open(svg, encoding="utf-8").read()
    for i in range(N):
        assert f"<title>w{i} (thread " in text


def test_chrome_export_and_load(traced, tmp_path):
    path = tmp_path / "t.json"
    traced.to_chrome(path)
    with open(path) as fh:
        doc = json.load(fh)
    named = {e["tid"]: e["args"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name" and "thread_serial" in e["args"]}
    assert len(named) == N + 1
    assert sorted(a["name"] for a in named.values()) == sorted(expected_names())
    by_tid = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["name"] == "leaf":
            by_tid[e["tid"]] = by_tid.get(e["tid"], 0) + 1
    check_leaf_calls({named[tid]["name"]: n for tid, n in by_tid.items()})
    assert sorted(a["thread_serial"] for a in named.values()) == list(range(1, N + 2))

    loaded = frametrace.load(path)
    assert [tuple(t)[:4] for t in loaded.threads] == [tuple(t)[:4] for t in traced.threads]
    key = lambda e: (e.thread_serial, e.thread_id, e.native_thread_id, e.name, e.start_ns)  # noqa: E731
    assert sorted(map(key, loaded.events)) == sorted(map(key, traced.events))
    table = reports.summary(loaded, per_thread=True)
    assert [t.thread_name for t in table.threads.values()] == expected_names()


def test_save_round_trip(traced, tmp_path):
    loaded = frametrace.load(traced.save(tmp_path / "t.json"))
    assert list(map(tuple, loaded.threads)) == list(map(tuple, traced.threads))
    assert [t.thread_name for t in reports.summary(loaded, per_thread=True).threads.values()] \
        == expected_names()


def perfetto_threads(path):
    """[(tid, name, [slice names])] of the thread tracks of a .pftrace."""
    trace = decode(path)
    assert trace.unknown == []
    return [(d.thread.tid, d.thread.thread_name, [s.name for s in trace.slices.get(uuid, [])])
            for uuid, d in trace.tracks.items() if d.HasField("thread")]


def test_perfetto_export(traced, tmp_path):
    path = tmp_path / "t.pftrace"
    traced.to_perfetto(path)
    threads = perfetto_threads(path)
    assert len({tid for tid, _, _ in threads}) == N + 1
    assert sorted(name for _, name, _ in threads) == sorted(expected_names())
    check_leaf_calls({name: names.count("leaf") for _, name, names in threads if name != "MainThread"})


def chrome_tid_of_serial(path):
    with open(path) as fh:
        doc = json.load(fh)
    return {e["args"]["thread_serial"]: e["tid"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name" and "thread_serial" in e["args"]}


def test_loaded_trace_writes_the_recordings_tids(traced, tmp_path):
    """A trace read back writes each thread on the tid its recording gave
    it, in both formats."""
    recorded, again = tmp_path / "recorded.json", tmp_path / "again.json"
    traced.to_chrome(recorded)
    loaded = frametrace.load(recorded)
    loaded.to_chrome(again)
    assert chrome_tid_of_serial(again) == chrome_tid_of_serial(recorded)
    assert len(chrome_tid_of_serial(again)) == N + 1
    traced.to_perfetto(tmp_path / "recorded.pftrace")
    loaded.to_perfetto(tmp_path / "again.pftrace")
    tracks = lambda p: sorted((tid, name) for tid, name, _ in perfetto_threads(p))  # noqa: E731
    assert tracks(tmp_path / "again.pftrace") == tracks(tmp_path / "recorded.pftrace")


def test_export_tids_rule():
    """The one rule for a recording's threads and a loaded trace's: the
    native id, else the ident; a tid an earlier thread had gets a
    synthetic one (base + serial)."""
    from frametrace import _tracer
    threads = [(1, 11, 100), (2, 12, 100), (3, 13, 0), (4, 13, 0), (5, 14, 200),
               (6, 15, SYNTHETIC_TID_BASE + 2)]
    assert _tracer._export_tids(threads) == [
        100, SYNTHETIC_TID_BASE + 2, 13, SYNTHETIC_TID_BASE + 4, 200, SYNTHETIC_TID_BASE + 6]
    with frametrace.trace() as tracer:
        _native_id_of_new_thread(leaf, "other")
    assert _tracer._export_tids(tracer.threads) == tracer._export_tids
    with pytest.raises(TypeError, match="serial, thread_id, native_thread_id"):
        _tracer._export_tids([[1, 2, 3]])
    with pytest.raises(TypeError):
        _tracer._export_tids([(1, "x", 3)])


def test_names_given_by_thread_id_do_not_name_reused_idents(traced, tmp_path):
    """A name given by thread_id where several threads had that ident
    renames none of them: each keeps its own."""
    idents = [t.thread_id for t in traced.threads]
    # An ident several threads had (which one depends on the allocator:
    # under ASan not the first worker's).
    shared = next(i for i in idents if idents.count(i) > 1)
    path = tmp_path / "t.json"
    write_chrome(traced, path)
    assert [t.name for t in frametrace.load(path).threads] == expected_names()
    table = reports.summary(traced.events, per_thread=True, thread_names={shared: "impostor"})
    assert "impostor" not in [t.thread_name for t in table.threads.values()]


def test_ended_thread_keeps_its_name_when_a_live_one_has_its_ident():
    """stop() reads the names again (threads may be renamed), but only of
    threads still running: an ended thread whose ident a live thread has
    now keeps its own name."""
    release = threading.Event()
    with frametrace.trace() as tracer:
        ended = threading.Thread(target=leaf, name="ended")
        ended.start()
        ended.join()
        live = threading.Thread(target=release.wait, name="live")
        live.start()
        while not any(t.name == "live" for t in tracer.threads):
            release.wait(0.001)
    release.set()
    live.join()
    if live.ident != ended.ident:
        pytest.skip("the live thread did not get the ended one's ident")
    assert [t.name for t in tracer.threads] == ["MainThread", "ended", "live"]


# ---- native tid reuse -------------------------------------------------------------

def _native_id_of_new_thread(target, name):
    out = []

    def run():
        out.append(threading.get_native_id())
        target()

    t = threading.Thread(target=run, name=name)
    t.start()
    t.join()
    return out[0]


def test_native_tid_reused_within_a_trace(tmp_path):
    """Linux gives a later thread the tid of an exited one; made to happen
    here by setting the pid namespace's last pid (as root), a few tries."""
    last_pid = "/proc/sys/kernel/ns_last_pid"
    if not os.access(last_pid, os.W_OK):
        pytest.skip(f"{last_pid} is not writable here: cannot make Linux reuse a tid")
    with frametrace.trace() as tracer:
        first = _native_id_of_new_thread(leaf, "first")
        for attempt in range(50):
            try:
                with open(last_pid, "w") as fh:
                    fh.write(str(first - 1))
            except OSError as exc:
                pytest.skip(f"cannot write {last_pid}: {exc}")
            again = _native_id_of_new_thread(leaf, f"again-{attempt}")
            if again == first:
                break
    if again != first:
        pytest.skip("other processes took the tid each time: no reuse in 50 tries")
    threads = [t for t in tracer.threads if t.native_thread_id == first]
    assert len(threads) == 2
    earlier, later = threads
    synthetic = SYNTHETIC_TID_BASE + later.serial

    path = tmp_path / "t.json"
    write_chrome(tracer, path)
    with open(path) as fh:
        doc = json.load(fh)
    named = {e["tid"]: e["args"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name" and "thread_serial" in e["args"]}
    assert named[first]["thread_serial"] == earlier.serial
    assert named[synthetic]["thread_serial"] == later.serial
    assert named[synthetic]["native_thread_id"] == first
    leaf_tids = [e["tid"] for e in doc["traceEvents"] if e["ph"] == "X" and e["name"] == "leaf"]
    assert leaf_tids.count(first) == 1 and leaf_tids.count(synthetic) == 1
    # Read back: both threads with the real native id, each its own serial.
    loaded = frametrace.load(path)
    leaves = sorted((e.thread_serial, e.native_thread_id) for e in loaded.events if e.name == "leaf")
    assert (earlier.serial, first) in leaves and (later.serial, first) in leaves
    assert [tuple(t)[:4] for t in loaded.threads] == [tuple(t)[:4] for t in tracer.threads]

    again = tmp_path / "again.json"
    write_chrome(loaded, again)
    assert chrome_tid_of_serial(again) == chrome_tid_of_serial(path)

    pf = tmp_path / "t.pftrace"
    write_perfetto(tracer, pf)
    threads = perfetto_threads(pf)
    tracks = {tid: names for tid, _, names in threads}
    assert len(tracks) == len(tracer.threads)
    assert tracks[first].count("leaf") == 1 and tracks[synthetic].count("leaf") == 1
    # The real tid of the synthetic one is in its name (a descriptor has no args).
    named = {tid: name for tid, name, _ in threads}
    assert named[synthetic] == f"{later.name} [tid {first}]"
    assert named[first] == earlier.name
