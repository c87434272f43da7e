"""The C writers replay one thread at a time straight into the file, with
the GIL released: the files are the bytes the
format defines (rendered here from getEvents(), independently of the C
code), an export's peak memory is bounded by the largest thread, other
threads run meanwhile, and clear() or dropping the tracer from another
thread during a write is safe."""
import gc
import gzip
import json
import os
import threading
import weakref

import pytest

import frametrace
from frametrace.export import _us_text, write_chrome, write_perfetto
from pbwire import message, one
from support import UNDER_ASAN, trace_of
from support import PROC_STATUS, needs_plain_allocator, run_json
from targets import calls

# ---- the files, byte for byte ------------------------------------------------


def deep(n, tracer):
    """Recursion in a small ring: the outer frames' calls are overwritten
    (their returns replay as frames open before the window), and the
    tracer stops at the bottom (frames open at stop, some known only from
    the stop stack)."""
    if n:
        deep(n - 1, tracer)
        calls.leaf(n)
    else:
        calls.branch(40)
        tracer.stop()


def known_traces():
    """Stopped tracers of known programs: several threads; and a ring that
    overflowed under a stop in the middle of a recursion."""
    def worker():
        calls.branch(3)
        calls.catcher()

    with frametrace.trace() as whole:
        calls.program()
        calls.catcher()
        t = threading.Thread(target=worker, name="golden-worker")
        t.start()
        t.join()
    small = frametrace.Tracer(buffer_size=64)
    small.start()
    deep(30, small)
    small.stop()
    return [whole, small]


def json_str(s):
    """A JSON string as the C writer renders it: UTF-8 (backslashreplace),
    only quote, backslash and control characters escaped."""
    out = ['"']
    for b in s.encode("utf-8", "backslashreplace"):
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif b < 0x20:
            out.append(f"\\u{b:04x}")
        else:
            out.append(c)
    return ("".join(out) + '"').encode("latin-1").decode("utf-8")


def chrome_lines(events, tracer, pid, origin):
    tids = tracer._export_tids
    lines = []
    for ev in events:
        cat = "c" if ev.kind == "c" else "python"
        flags = "".join(f',"{f}":true' for f in ("open_at_start", "open_at_stop", "open_at_loss")
                        if getattr(ev, f))
        lines.append(
            f'{{"ph":"X","cat":"{cat}","pid":{pid},"tid":{tids[ev.thread_serial - 1]},'
            f'"ts":{_us_text(ev.start_ns - origin)},"dur":{_us_text(ev.end_ns - ev.start_ns)},'
            f'"name":{json_str(ev.name)},"args":{{"file":{json_str(f"{ev.filename}:{ev.lineno}")}'
            f'{flags}}}}}')
    return lines


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_chrome_events_are_the_format_s_bytes(tmp_path, suffix):
    for tracer in known_traces():
        events = tracer.getEvents()
        assert any(ev.open_at_start for ev in events) or tracer.buffer_size > 64
        path = tmp_path / f"t{suffix}"
        assert write_chrome(trace_of(tracer, pid=4242), path) == len(events)
        opener = gzip.open if suffix.endswith(".gz") else open
        with opener(path, "rb") as fh:
            text = fh.read().decode("utf-8")
        # The metadata first, then the events.
        assert text.startswith('{"otherData":{"frametrace":') and text.endswith("]}\n")
        doc = json.loads(text)
        assert list(doc) == ["otherData", "displayTimeUnit", "traceEvents"]
        origin = doc["otherData"]["frametrace"]["origin_ns"]
        body = text[text.index('"traceEvents":[') + len('"traceEvents":['):-len("]}\n")]
        written = [line for line in body.split(",\n") if line.startswith('{"ph":"X","cat":')]
        assert written == chrome_lines(events, tracer, 4242, origin)


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def fv(field, v):
    return varint(field << 3) + varint(v)


def fb(field, data):
    return varint(field << 3 | 2) + varint(len(data)) + data


def packet(payload):
    return fb(1, payload)


def thread_sequence(events, parents, seq, track, iids):
    """A thread's sequence as the format defines it: its first packet (the
    default track, and the thread's incremental clock, equal to
    CLOCK_MONOTONIC at the first event's start), then a SLICE_BEGIN per
    event in order, each slice ended when the next event is not its
    descendant; each timestamp the ns since the previous packet's; a
    function's name and source location (or the "c" category) interned in
    the packet of its first use, its iid its rank among the thread's
    functions; a call's open flags as debug annotations of its begin."""
    t0 = max(events[0].start_ns, 0) if events else 0
    snapshot = fb(1, fv(1, 64) + fv(2, t0) + fv(3, 1)) + fb(1, fv(1, 3) + fv(2, t0))
    out = [packet(fb(6, snapshot) + fv(10, seq) + fv(13, 1) + fb(59, fb(11, fv(11, track)) + fv(58, 64)))]
    clock = [t0]
    seen, c_seen = set(), [False]

    def delta(ts):
        d = (ts - clock[0]) % (1 << 64)
        clock[0] = ts
        return fv(8, d)

    def end(ev):
        out.append(packet(delta(ev.end_ns) + fv(10, seq) + fb(11, fv(9, 2))))

    stack = []  # (index, event)
    for i, ev in enumerate(events):
        while stack and stack[-1][0] != parents[i]:
            end(stack.pop()[1])
        iid = iids[i]
        c = ev.kind == "c"
        te = fv(9, 1) + (fv(3, 1) if c else b"") + fv(10, iid) + (b"" if c else fv(34, iid))
        # A call open at start, stop or loss: a debug annotation per flag.
        for flag in ("open_at_start", "open_at_stop", "open_at_loss"):
            if getattr(ev, flag):
                te += fb(4, fb(10, flag.encode()) + fv(2, 1))
        interned = b""
        if iid not in seen:
            seen.add(iid)
            interned = fb(2, fv(1, iid) + fb(2, ev.name.encode()))
            if c and not c_seen[0]:
                c_seen[0] = True
                interned += fb(1, fv(1, 1) + fb(2, b"c"))
            if not c:
                interned += fb(4, fv(1, iid) + fb(2, ev.filename.encode()) + fb(3, ev.name.encode())
                               + fv(4, max(ev.lineno or 0, 0)))
            interned = fb(12, interned)
        out.append(packet(delta(ev.start_ns) + fv(10, seq) + fb(11, te) + interned))
        stack.append((i, ev))
    while stack:
        end(stack.pop()[1])
    return b"".join(out)


def parents_of(events):
    """Index of each event's parent among its thread's events (in call
    order, parents first), or None."""
    found, stack = [], []
    for i, ev in enumerate(events):
        while stack and not (ev.depth > events[stack[-1]].depth):
            stack.pop()
        found.append(stack[-1] if stack else None)
        stack.append(i)
    return found


@pytest.mark.parametrize("suffix", [".pftrace", ".pftrace.gz"])
def test_perfetto_thread_sequences_are_the_format_s_bytes(tmp_path, suffix):
    for tracer in known_traces():
        events = tracer.getEvents()
        path = tmp_path / f"t{suffix}"
        assert write_perfetto(trace_of(tracer, pid=4242), path) == len(events)
        opener = gzip.open if suffix.endswith(".gz") else open
        with opener(path, "rb") as fh:
            raw = fh.read()
        packets = message(raw)[1]
        # Where the threads' sequences start: after sequence 1's packets.
        start = next(i for i, p in enumerate(packets) if one(message(p), 10) != 1)
        # After them one packet of sequence 1: the count of calls, last.
        assert one(message(packets[-1]), 10) == 1
        assert all(one(message(p), 10) != 1 for p in packets[start:-1])
        tail = b"".join(packet(p) for p in packets[start:-1])
        assert raw.endswith(tail + packet(packets[-1]))
        expected = []
        for serial in range(1, len(tracer.threads) + 1):
            mine = [ev for ev in events if ev.thread_serial == serial]
            parents = parents_of(mine)
            # The name iids the file gives: one per function, numbered in
            # order of first use (checked here), so the same for the same
            # function.
            begins = [message(one(message(p), 11)) for p in packets[start:]
                      if one(message(p), 10) == serial + 1 and 11 in message(p)]
            iids = [one(te, 10) for te in begins if one(te, 9) == 1]
            assert len(iids) == len(mine)
            first_use = {}
            for ev, iid in zip(mine, iids):
                key = (ev.name, ev.filename, ev.lineno, ev.kind)
                assert first_use.setdefault(iid, key) == key
            assert list(first_use) == list(range(1, len(first_use) + 1))
            expected.append(thread_sequence(mine, parents, serial + 1, 15 + serial, iids))
        assert tail == b"".join(expected)


# ---- memory: the largest thread, not all of them -----------------------------


@pytest.mark.one_setup
@needs_plain_allocator
def test_peak_memory_of_an_export_is_the_largest_thread_s(tmp_path, monkeypatch):
    # glibc's mmap threshold fixed: otherwise it rises after a large free
    # and later blocks stay resident once freed, which hides what is
    # measured here.
    env_threshold = "65536"
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", env_threshold)
    result = run_json(PROC_STATUS + f"""
    import json, os, threading
    assert os.environ.get("MALLOC_MMAP_THRESHOLD_") == {env_threshold!r}
    import frametrace
    from frametrace.export import write_chrome, write_perfetto

    def leaf(i):
        return i

    def work(n):
        for i in range(n):
            leaf(i)

    with frametrace.Tracer(buffer_size=1 << 20, c_calls=False) as tracer:
        threads = [threading.Thread(target=work, args=(200_000,)) for _ in range(3)]
        for t in threads:
            t.start()
        work(200_000)
        for t in threads:
            t.join()
    peaks = []
    for writer, name in ((write_chrome, "t.json"), (write_perfetto, "t.pftrace")):
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # the peak RSS starts again from the RSS now
        before = status("VmRSS")
        writer(tracer, os.path.join({str(tmp_path)!r}, name))
        peaks.append(status("VmHWM") - before)
    per_thread = {{}}
    for ev in tracer.getEvents():
        per_thread[ev.thread_serial] = per_thread.get(ev.thread_serial, 0) + 1
    records = [2 * n for n in per_thread.values()]
    print(json.dumps({{"peaks": peaks, "largest": max(per_thread.values()),
                      "threads": len(per_thread), "records": records}}))
    """)
    assert result["threads"] == 4 and result["largest"] >= 200_000
    largest_ring = 8 * max(result["records"])  # bytes of the largest thread's records
    all_rings = 8 * sum(result["records"])
    for peak in result["peaks"]:
        # One thread's events (40 bytes each, 5 per 2 records) and the
        # Perfetto writer's stack (8 each), the output buffer, some slack;
        # all the threads' events twice (the writers before) is 10x that.
        assert peak <= 3 * largest_ring + (8 << 20), (peak, result)
        assert peak < all_rings, (peak, result)

# ---- the GIL: other threads run, clear() and dropping the tracer are safe ----
# The writers' locking, whatever recorded the trace: one setup.


def leaf(i):
    return i


@pytest.fixture(scope="module")
def big():
    """More than 2**20 events (the writers call progress once), recorded
    once per module: tests that clear it record their own."""
    return record_big()


def record_big():
    with frametrace.Tracer(buffer_size=1 << 22, c_calls=False) as tracer:
        for i in range(1_100_000):
            leaf(i)
    return tracer


@pytest.mark.one_setup
@pytest.mark.parametrize("writer, name", [(write_chrome, "t.json"), (write_perfetto, "t.pftrace")])
def test_other_threads_run_while_a_write_runs(tmp_path, writer, name, big):
    tracer = big
    done = threading.Event()
    result = []

    def write():
        try:
            result.append(writer(tracer, tmp_path / name))
        finally:
            done.set()

    w = threading.Thread(target=write)
    iterations = 0
    w.start()
    while not done.is_set():
        iterations += 1
        sum(range(100))
    w.join()
    assert result and result[0] > 1 << 20
    # A write holding the GIL throughout would let this loop run a few
    # times at most (at its Python prologue and epilogue).
    assert iterations >= 200, iterations


@pytest.mark.one_setup
@pytest.mark.parametrize("writer, name", [(write_chrome, "t.json"), (write_perfetto, "t.pftrace")])
def test_clear_from_another_thread_during_a_write(tmp_path, writer, name):
    """clear() from another thread while a write runs returns at once: the
    tracer is cleared for everyone, and the write, which pinned the
    records, writes them all; the records go when it ends."""
    tracer = record_big()
    events = len(tracer.getEvents())
    in_write, cleared = threading.Event(), threading.Event()
    result = []

    def progress(done, total):
        if not in_write.is_set():
            in_write.set()
            assert cleared.wait(60)

    def write():
        try:
            result.append(writer(tracer, tmp_path / name, progress=progress))
        except BaseException as exc:
            result.append(exc)
            in_write.set()

    w = threading.Thread(target=write)
    w.start()
    assert in_write.wait(60)
    tracer.clear()
    assert tracer.threads == [] and tracer.stats.dropped_records == 0
    with pytest.raises(RuntimeError, match="clear"):
        tracer.getEvents()
    with pytest.raises(RuntimeError):
        writer(tracer, tmp_path / ("again-" + name))
    cleared.set()
    w.join()
    assert result == [events]
    assert os.path.getsize(tmp_path / name) > events


@pytest.mark.one_setup
@pytest.mark.parametrize("writer, name", [(write_chrome, "t.json"), (write_perfetto, "t.pftrace")])
def test_tracer_dropped_during_a_write(tmp_path, writer, name):
    """The write holds the tracer: dropping every other reference (and
    collecting) meanwhile frees nothing until it ends."""
    tracer = record_big()
    events = len(tracer.getEvents())
    ref = weakref.ref(tracer)
    in_write, dropped = threading.Event(), threading.Event()
    result = []

    def progress(done, total):
        if not in_write.is_set():
            in_write.set()
            assert dropped.wait(60)

    def write(t):
        result.append(writer(t, tmp_path / name, progress=progress))

    w = threading.Thread(target=write, args=(tracer,))
    del tracer
    w.start()
    assert in_write.wait(60)
    gc.collect()
    assert ref() is not None
    dropped.set()
    w.join()
    assert result == [events]
    del w
    gc.collect()
    assert ref() is None


@pytest.mark.one_setup
def test_concurrent_writes_of_one_tracer(tmp_path, big):
    """Two threads writing the same tracer at once, and getEvents() beside
    them: the same files as one at a time."""
    # One clock anchor for all: read at each write, it would differ.
    anchor = {"monotonic_ns": big.start_ns, "wall_ns": big.start_ns + 10**18}
    write_chrome(trace_of(big, pid=1, origin_ns=big.start_ns, clock_anchor=anchor), tmp_path / "one.json")
    write_perfetto(trace_of(big, pid=1, clock_anchor=anchor), tmp_path / "one.pftrace")
    results = []
    threads = [threading.Thread(target=lambda w=w, p=p: results.append(
                   w(trace_of(big, pid=1, clock_anchor=anchor), tmp_path / p)))
               for w, p in ((write_chrome, "two.json"), (write_perfetto, "two.pftrace"))]
    for t in threads:
        t.start()
    n = len(big.getEvents())
    for t in threads:
        t.join()
    assert results == [n, n]
    with open(tmp_path / "one.pftrace", "rb") as a, open(tmp_path / "two.pftrace", "rb") as b:
        assert a.read() == b.read()

    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "two.json").read_bytes()


@pytest.mark.one_setup
def test_clear_in_a_forked_child_of_a_write(tmp_path, big):
    """A child forked while a write runs has the pin but not the writer:
    its clear() frees the records at once, and its tracer is cleared."""
    forked = []

    def rss():
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))

    def progress(done, total):
        if forked:
            return
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                before = rss()
                big.clear()
                code = 0 if big.threads == [] else 2
                # Its ring (17 MB of records) unmapped; under ASan the ring
                # is a heap chunk its quarantine may keep resident.
                if not UNDER_ASAN and before - rss() < 8 << 20:
                    code = 4
                try:
                    big.getEvents()
                    code = 3
                except RuntimeError:
                    pass
            finally:
                os._exit(code)
        forked.append(pid)

    assert write_chrome(big, tmp_path / "t.json", progress=progress) > 1 << 20
    _, status = os.waitpid(forked[0], 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert big.threads  # the parent's records are its own


@pytest.mark.one_setup
@pytest.mark.parametrize("writer", [write_chrome, write_perfetto])
def test_a_child_forked_by_progress_does_not_go_on_writing(big, writer):
    """progress forks, and the child clears the tracer and returns: the
    child's copy of the write stops there (RuntimeError) instead of reading
    the records it freed; the parent's write is whole."""
    parent = os.getpid()

    def progress(done, total):
        if os.getpid() == parent and os.fork() == 0:
            big.clear()

    try:
        count = writer(big, "/dev/null", progress=progress)
    except BaseException as exc:
        if os.getpid() != parent:
            os._exit(0 if isinstance(exc, RuntimeError) and "forked" in str(exc) else 5)
        raise
    if os.getpid() != parent:
        os._exit(6)
    assert count > 1 << 20
    _, status = os.wait()
    assert os.waitstatus_to_exitcode(status) == 0
