"""frametrace.load() of the .pftrace frametrace writes: the Trace the
Chrome JSON of the same recording gives, to the nanosecond (events, open
flags, threads, names, ranges, steps, other tools' slices, metadata);
protobuf read as protobuf (unknown fields skipped); a file cut or damaged
anywhere, or not frametrace's, refused with a ValueError naming it."""
import dataclasses
import gzip
import threading

import pytest

import frametrace
from frametrace import export
from frametrace.export import Slice, write_chrome, write_perfetto
from frametrace.loader import load
from support import trace_of
from targets import calls
from test_load import assert_same_events, busy, traced_program


def assert_same_trace(got, want):
    """Every field of two Traces equal, events with their types."""
    assert type(got) is type(want)
    assert_same_events(got.events, want.events)
    for f in dataclasses.fields(want):
        if f.name != "events":
            assert getattr(got, f.name) == getattr(want, f.name), f.name


def both(tmp_path, tracer, suffix=".pftrace", **kwargs):
    """The Traces load() gives of tracer written as JSON and as .pftrace."""
    anchor = export.read_clock_anchor()
    write_chrome(trace_of(tracer, clock_anchor=anchor, **kwargs), tmp_path / "t.json")
    write_perfetto(trace_of(tracer, clock_anchor=anchor, **kwargs), tmp_path / f"t{suffix}")
    return load(tmp_path / "t.json"), load(tmp_path / f"t{suffix}")


@pytest.mark.parametrize("suffix", [".pftrace", ".pftrace.gz"])
def test_a_pftrace_loads_as_its_json_does(tmp_path, suffix):
    tracer, worker = traced_program(300)
    events = tracer.getEvents()
    from_json, from_pftrace = both(tmp_path, tracer, suffix, process_name="trainer",
                                   metadata={"run": [1, "x"]})
    assert_same_trace(from_pftrace, from_json)
    assert_same_events(from_pftrace.events, events)
    assert [t.name for t in from_pftrace.threads if t.thread_id == worker.ident] == ["load-worker"]
    assert (from_pftrace.tracer_start_ns, from_pftrace.tracer_stop_ns) == (tracer.start_ns,
                                                                          tracer.stop_ns)
    # What the reports make of it too.
    assert from_pftrace.summary(print=False, limit=None).rows == \
        from_json.summary(print=False, limit=None).rows


def test_open_flags_and_a_ring_that_overwrote(tmp_path):
    def deep(n, tracer):
        if n == 0:
            busy(3)
            tracer.stop()  # frames open at stop
            return
        deep(n - 1, tracer)

    for buffer_size in (1 << 20, 97):  # 97: the ring overwrites, open_at_start rebuilt
        with frametrace.trace(buffer_size=buffer_size) as tracer:
            busy(5)
            deep(6, tracer)
        events = tracer.getEvents()
        assert any(e.open_at_stop for e in events) and any(e.open_at_start for e in events)
        from_json, from_pftrace = both(tmp_path, tracer)
        assert_same_trace(from_pftrace, from_json)
        assert_same_events(from_pftrace.events, events)
        assert [t.dropped for t in from_pftrace.threads] == [t.dropped for t in tracer.threads]
        assert (buffer_size == 97) == (from_pftrace.stats.dropped > 0)


def test_a_session_trace_with_ranges_and_steps(tmp_path):
    def model(x):
        return sum(x)

    def other_thread():
        with frametrace.range("loader"):
            model([1])

    with frametrace.profile(python_steps=2) as prof:
        with frametrace.range("outer"):  # open when the window starts
            for i in range(4):
                with frametrace.range("forward"):
                    model([i])
                if i == 1:
                    t = threading.Thread(target=other_thread)
                    t.start()
                    t.join()
                prof.step()
    trace = prof.last_trace
    trace.to_chrome(tmp_path / "s.json")
    trace.to_perfetto(tmp_path / "s.pftrace")
    from_json, from_pftrace = load(tmp_path / "s.json"), load(tmp_path / "s.pftrace")
    assert_same_trace(from_pftrace, from_json)
    assert from_pftrace.ranges == trace.ranges and from_pftrace.steps == trace.steps
    assert from_pftrace.session_end_ns > from_pftrace.tracer_stop_ns


def test_threads_that_reused_an_ident_and_names_not_utf8(tmp_path):
    """Threads one after the other (idents reused, maybe native ids too),
    one named with a lone surrogate (a byte that is not UTF-8)."""
    def work():
        calls.branch(2)

    with frametrace.trace() as tracer:
        for name in ("one", "caf\udce9", "three"):
            t = threading.Thread(target=work, name=name)
            t.start()
            t.join()
    from_json, from_pftrace = both(tmp_path, tracer)
    assert_same_trace(from_pftrace, from_json)
    assert "caf\udce9" in {t.name for t in from_pftrace.threads}


def test_other_tools_slices(tmp_path):
    with frametrace.Tracer() as tracer:
        calls.branch(2)
        sorted(range(10))
    events = tracer.getEvents()
    top = next(e for e in events if e.name == "sorted")
    a, b = top.start_ns, top.end_ns
    ops = [Slice("op.same", "cpu_op", a, b), Slice("op.in", "cpu_op", a + 1, b - 1),
           Slice("op.after", "cpu_op", b + 1000, b + 2000)]
    from_json, from_pftrace = both(tmp_path, tracer, thread_slices={top.thread_serial: ops},
                                   slice_tracks=[("gpu 0", [Slice("kernel", "kernel", a, b)]),
                                                 ("steps", [Slice("k2", "kernel", b, b + 5)])])
    assert_same_trace(from_pftrace, from_json)
    assert from_pftrace.slices == {top.thread_serial: ops}
    assert [name for name, _ in from_pftrace.slice_tracks] == ["gpu 0", "steps"]


# ---- files that are not whole, or not frametrace's ------------------------------------------


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A small .pftrace of two threads: its bytes."""
    d = tmp_path_factory.mktemp("good")
    tracer, _ = traced_program(3)
    write_perfetto(tracer, d / "t.pftrace")
    return (d / "t.pftrace").read_bytes()


def key(field, wire):
    return varint(field << 3 | wire)


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def packets(data):
    """The top-level packets' bytes (each with its key and length)."""
    from pbwire import varint as read
    out, pos = [], 0
    while pos < len(data):
        start = pos
        _, pos = read(data, pos)
        n, pos = read(data, pos)
        pos += n
        out.append(data[start:pos])
    return out


def sorted_pair():
    return sorted([2, 1])


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A .pftrace with each kind of packet good has, but few of each (two
    threads, a Python and a C call on each): its bytes, a few KB."""
    d = tmp_path_factory.mktemp("small")
    with frametrace.trace(include=[__name__, "builtins"]) as tracer:
        worker = threading.Thread(target=sorted_pair, name="cut-worker")
        worker.start()
        worker.join()
        sorted_pair()
    assert {e.kind for e in tracer.getEvents()} == {"py", "c"}
    write_perfetto(tracer, d / "t.pftrace")
    return (d / "t.pftrace").read_bytes()


# From here on, the reader's handling of the bytes it is given (cut,
# damaged, unknown): the same whatever clock or backend recorded them.
@pytest.mark.one_setup
def test_cut_anywhere_is_refused(tmp_path, small):
    path = tmp_path / "cut.pftrace"
    for n in range(1, len(small)):
        path.write_bytes(small[:n])
        with pytest.raises(ValueError) as info:
            load(path)
        message = str(info.value)
        assert message.startswith(f"{path}: "), message
        assert "truncated" in message or "not written by frametrace" in message, (n, message)


@pytest.mark.one_setup
def test_a_cut_between_packets_says_truncated(tmp_path, good):
    path = tmp_path / "cut.pftrace"
    parts = packets(good)
    for k in range(3, len(parts)):
        path.write_bytes(b"".join(parts[:k]))
        with pytest.raises(ValueError, match=r"cut.pftrace: packet \d+ \(byte \d+\): truncated"):
            load(path)


@pytest.mark.one_setup
def test_unknown_fields_are_skipped(tmp_path, good):
    """Protobuf's rule: a field the reader does not know is skipped, of any
    wire type but groups (which no frametrace file has)."""
    parts = packets(good)
    unknown = (key(900, 0) + varint(1 << 62) + key(901, 1) + bytes(8) + key(902, 5) + bytes(4)
               + key(903, 2) + varint(3) + b"abc")
    from pbwire import varint as read
    _, pos = read(parts[1], 0)
    n, pos = read(parts[1], pos)
    body = parts[1][pos:] + unknown
    assert len(body) == n + len(unknown)
    parts[1] = key(1, 2) + varint(len(body)) + body
    path = tmp_path / "more.pftrace"
    path.write_bytes(parts[0] + unknown + b"".join(parts[1:]) + unknown)
    (tmp_path / "good.pftrace").write_bytes(good)
    assert_same_trace(load(path), load(tmp_path / "good.pftrace"))


@pytest.mark.one_setup
@pytest.mark.parametrize("mutate, words", [
    (lambda d: key(1, 2) + varint(12) + key(8, 0) + b"\xff" * 10 + b"\x01" + d,
     "a varint longer than 64 bits"),
    (lambda d: key(1, 2) + varint(2) + key(5, 3) + d, "group"),
    (lambda d: key(1, 2) + varint(1 << 40) + d, "a length past the end"),
    (lambda d: d + key(1, 0) + varint(5), "field 1 has wire type 0, not 2"),
    (lambda d: d + key(1, 2) + varint(2) + key(10, 0) + varint(1),
     "a packet after the end of the trace"),
    (lambda d: b"".join(packets(d)[:-1]) + key(1, 2) + varint(4) + key(10, 0) + varint(99)
     + key(11, 2) + varint(0) + packets(d)[-1], "a thread's sequence that does not begin"),
])
def test_damaged_files_say_what_is_wrong(tmp_path, good, mutate, words):
    path = tmp_path / "bad.pftrace"
    path.write_bytes(mutate(good))
    with pytest.raises(ValueError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}: ") and words in str(info.value), str(info.value)


@pytest.mark.one_setup
def test_a_perfetto_trace_not_written_by_frametrace(tmp_path, good):
    """Perfetto's own traces (here: frametrace's packets but its metadata)
    are refused by name, not misread."""
    parts = [p for p in packets(good) if b"frametrace" not in p]
    path = tmp_path / "other.pftrace"
    path.write_bytes(b"".join(parts))
    with pytest.raises(ValueError, match="other.pftrace: a Perfetto trace not written by "
                                         "frametrace"):
        load(path)


@pytest.mark.one_setup
def test_a_gzip_bomb_is_refused(tmp_path):
    path = tmp_path / "bomb.pftrace.gz"
    with gzip.open(path, "wb") as fh:
        fh.write(b"\x0a")
        for _ in range(32):
            fh.write(bytes(1 << 20))
    assert path.stat().st_size < 1 << 20
    with pytest.raises(ValueError, match=r"bomb.pftrace.gz: decompresses to more than 8388608 "
                                         r"bytes"):
        load(path)


@pytest.mark.one_setup
def test_truncated_gzip_is_refused(tmp_path, good):
    data = gzip.compress(good)
    path = tmp_path / "t.pftrace.gz"
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match="t.pftrace.gz: truncated or corrupted gzip data"):
        load(path)
