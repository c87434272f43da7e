"""Reading a .json.gz: the text is inflated on a thread of its own ahead of
the parser, by ISA-L where isal is installed, else by zlib; what is read,
and every error, is the same either way, and the thread never outlives
the read."""
import gzip
import os
import threading
import zlib

import pytest

import frametrace
from frametrace import _reader

N = 60_000  # several MiB of text: many of the reader's chunks


@pytest.fixture(autouse=True, params=["zlib", "isal"])
def inflater(request, monkeypatch):
    if request.param == "zlib":
        monkeypatch.setattr(_reader, "_inflater", lambda: (gzip, zlib.error))
    else:
        pytest.importorskip("isal", reason="isal is not installed (frametrace[data])")
        assert _reader._inflater()[0].__name__ == "isal.igzip"
    return request.param


def inflating():
    return [t for t in threading.enumerate() if t.name == "frametrace-inflate"]


def synthetic_trace():
    """N calls: roots, each with two calls inside it."""
    events = []
    for i in range(N):
        group, place = divmod(i, 3)
        start = 30 * group + (0, 5, 15)[place]
        end = start + (29, 5, 5)[place]
        events.append(frametrace.Event((f"f{i % 97}", "m.py", i % 97, "py", 1, 1, start, end,
                                        min(place, 1), -1 if place == 0 else 3 * group,
                                        False, False, 1, False)))
    return frametrace.Trace(events=events, session_end_ns=30 * N,
                            tracer_start_ns=0, tracer_stop_ns=30 * N)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gz")
    trace = synthetic_trace()
    plain, packed = str(folder / "t.json"), str(folder / "t.json.gz")
    trace.save(plain)
    with open(plain, "rb") as src:
        text = src.read()
    assert len(text) > 4 * (1 << 20)
    with open(packed, "wb") as out:
        out.write(gzip.compress(text, 1))
    return plain, packed, text


def test_a_gzip_file_loads_as_its_text_does(files):
    plain, packed, _ = files
    assert frametrace.load(packed).events == frametrace.load(plain).events
    assert not inflating()


def test_a_reader_that_stops_at_the_head_ends_the_thread(files):
    _, packed, _ = files
    with _reader._Reader(packed) as r:
        r.fill()
        assert inflating()
    assert not inflating()


@pytest.mark.parametrize("at", [0.1, 0.6])
def test_corruption_deep_in_the_file_is_raised_and_ends_the_thread(tmp_path, files, at):
    _, _, text = files
    z = bytearray(gzip.compress(text, 1))
    cut = int(len(z) * at)
    z[cut:cut + 64] = bytes(b ^ 0x5A for b in z[cut:cut + 64])
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(bytes(z))
    # What the damage reads as depends on where it falls: text that is no
    # JSON, or data zlib or the checksum refuses; a ValueError naming the
    # file either way.
    with pytest.raises(ValueError, match="bad.json.gz: (not JSON|.*gzip)"):
        frametrace.load(str(bad))
    assert not inflating()


def test_a_file_cut_short_says_so(tmp_path, files):
    _, _, text = files
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(gzip.compress(text, 1)[: -1000])
    with pytest.raises(ValueError, match="truncated or corrupted gzip data"):
        frametrace.load(str(bad))
    assert not inflating()


def test_an_interrupted_load_ends_the_thread(files):
    _, packed, _ = files
    calls = []

    def progress(done, total):
        calls.append(done)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        frametrace.load(packed, progress=progress)
    assert not inflating()


def test_characters_cut_by_the_inflated_chunks_read_whole(tmp_path):
    # Names of three-byte characters: the inflated chunks (a power of two
    # of bytes) end inside one, again and again.
    events = [frametrace.Event(("\u20ac" * 200 + str(i % 7), "m.py", 1, "py", 1, 1, 10 * i,
                                10 * i + 5, 0, -1, False, False, 1, False))
              for i in range(8_000)]
    trace = frametrace.Trace(events=events, session_end_ns=80_000, tracer_start_ns=0,
                             tracer_stop_ns=80_000)
    plain, packed = str(tmp_path / "t.json"), str(tmp_path / "t.json.gz")
    trace.save(plain)
    trace.save(packed)
    assert os.path.getsize(plain) > 4 * (1 << 20)
    assert frametrace.load(packed).events == frametrace.load(plain).events == events


def test_text_that_is_not_utf8_says_so(tmp_path, files):
    _, _, text = files
    at = text.index(b'"name":"f', len(text) // 2) + 8
    bad = tmp_path / "latin.json.gz"
    bad.write_bytes(gzip.compress(text[:at] + b"\xe9" + text[at:], 1))
    with pytest.raises(ValueError, match=r"latin.json.gz: not UTF-8 text \(invalid"):
        frametrace.load(str(bad))
    assert not inflating()
