"""A trace file that exists is complete: every writer
writes a temporary next to the target and renames it over the target only
once complete; an interruption or a write error leaves the target as it
was, no temporary behind, and an error that says why.  Targets that are not
regular files are written in place.  Write errors under a file-size limit,
the CLI and the pytest plugin: tests/system/test_write_errors.py."""
import errno
import json
import os
import stat
import threading

import pytest

import frametrace
from frametrace import reports
from frametrace.export import write_chrome, write_perfetto
from frametrace.loader import merge, read_other_data
from targets import calls

# How the writers handle their files: the same whatever clock or backend
# recorded the trace.
pytestmark = pytest.mark.one_setup

PREVIOUS = b"the previous trace\n"
C_WRITERS = [(write_chrome, "t.json"), (write_chrome, "t.json.gz"),
             (write_perfetto, "t.pftrace"), (write_perfetto, "t.pftrace.gz")]


@pytest.fixture(scope="module")
def long_trace():
    """A stopped tracer with more than 2**20 events: the C writers call
    their progress callback once.  Recorded once: the tests only write it."""
    def loop(n):
        for i in range(n):
            calls.leaf(i)

    with frametrace.Tracer(buffer_size=1 << 22, c_calls=False) as tracer:
        loop(1_100_000)
    return tracer


@pytest.fixture
def short_trace(tmp_path_factory):
    """(tracer, Trace, chrome trace file) of a small program."""
    with frametrace.Tracer(c_calls=False) as tracer:
        calls.branch(5)
    source = tmp_path_factory.mktemp("source") / "source.json"
    write_chrome(tracer, source)
    return tracer, frametrace.load(source), source


def every_writer(tracer, trace, source, compressed=True):
    """name -> write(path) for each writer of a file; " gz": to path + ".gz"."""
    writers = {
        "write_chrome": lambda p: write_chrome(tracer, p),
        "write_chrome gz": lambda p: write_chrome(tracer, str(p) + ".gz"),
        "write_perfetto": lambda p: write_perfetto(tracer, p),
        "write_perfetto gz": lambda p: write_perfetto(tracer, str(p) + ".gz"),
        # A loaded trace: written from its Events in Python (Trace.save
        # picks it by extension, and refuses a path without one).
        "Trace.to_chrome": lambda p: trace.to_chrome(p),
        "Trace.to_chrome gz": lambda p: trace.to_chrome(str(p) + ".gz"),
        "write_pstats": lambda p: reports.write_pstats(trace, p),
        "write_collapsed": lambda p: reports.write_collapsed(trace, p),
        "write_flamegraph_svg": lambda p: reports.write_flamegraph_svg(trace, p),
        "merge": lambda p: merge([source], p),
    }
    return {k: v for k, v in writers.items() if compressed or not k.endswith(" gz")}


def leftovers(directory):
    """Temporary files of frametrace._output left in directory."""
    return [n for n in os.listdir(directory) if n.startswith(".") and n.endswith(".tmp")]


@pytest.mark.parametrize("writer,name", C_WRITERS, ids=[n for _, n in C_WRITERS])
def test_interrupted_export_leaves_the_target_as_it_was(long_trace, tmp_path, writer, name):
    target = tmp_path / name
    seen = []

    def interrupt(done, total):
        seen.append(done)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        writer(long_trace, target, progress=interrupt)
    assert seen == [1 << 20]
    assert os.listdir(tmp_path) == []  # no part of a trace, no temporary
    target.write_bytes(PREVIOUS)
    with pytest.raises(KeyboardInterrupt):
        writer(long_trace, target, progress=interrupt)
    assert os.listdir(tmp_path) == [name]
    assert target.read_bytes() == PREVIOUS
    if name == "t.json":
        # The same export, not interrupted, replaces it.
        assert writer(long_trace, target) > 1 << 20
        assert os.listdir(tmp_path) == [name]
        assert read_other_data(target)["stop_ns"] == long_trace.stop_ns


def test_an_interrupted_export_to_a_fifo_does_not_end_like_a_trace(long_trace, tmp_path):
    # Written in place: the reader gets what was written up to the
    # interruption, without the closing part that would make it valid.
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    tail = bytearray()

    def read():
        with open(fifo, "rb") as f:
            while chunk := f.read(1 << 20):
                tail[:] = (bytes(tail) + chunk)[-4096:]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def interrupt(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_chrome(long_trace, fifo, progress=interrupt)
    reader.join(timeout=120)  # not a timing check: the writer has closed the FIFO
    assert not reader.is_alive()
    assert b'"ph":"X"' in tail  # events came through
    # A whole trace ends with the events' array closed, "]}\n" (otherData
    # is at its start now).
    assert not tail.endswith(b"}\n")


class _Unwritable:
    """Not an Event, though it has an Event's fields: the writer refuses it."""

    def __init__(self, event):
        self.event = event

    def __getattr__(self, field):
        if field == "name":
            raise TypeError("no name")
        return getattr(self.event, field)


def test_a_failure_while_writing_json_leaves_the_target_as_it_was(long_trace, tmp_path):
    # A trace without records (a loaded one) is written from its Events:
    # one that is no Event is refused, the target left as it was.
    target = tmp_path / "doc.json"
    target.write_bytes(PREVIOUS)
    events = long_trace.getEvents()[:100_000]
    trace = frametrace.Trace(events=events + [_Unwritable(events[0])], threads=long_trace.threads,
                             session_start_ns=long_trace.start_ns,
                             session_end_ns=long_trace.stop_ns, tracer_start_ns=long_trace.start_ns,
                             tracer_stop_ns=long_trace.stop_ns, pid=os.getpid())
    with pytest.raises(TypeError, match=r"events\[100000\] is not a frametrace.Event"):
        trace.save(target)
    assert os.listdir(tmp_path) == ["doc.json"]
    assert target.read_bytes() == PREVIOUS


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_files_get_the_mode_the_umask_gives(short_trace, tmp_path, umask):
    old = os.umask(umask)
    try:
        for name, write in every_writer(*short_trace).items():
            directory = tmp_path / name.replace(" ", "_")
            directory.mkdir()
            write(directory / "out")
            (written,) = os.listdir(directory)
            mode = stat.S_IMODE(os.stat(directory / written).st_mode)
            assert mode == 0o666 & ~umask, (name, oct(mode))
    finally:
        os.umask(old)


def test_write_errors_say_why_and_name_the_file(short_trace):
    # /dev/full: a character device, written in place; every write fails
    # with ENOSPC.
    for name, write in every_writer(*short_trace, compressed=False).items():
        path = "/dev/full"
        with pytest.raises(OSError) as info:
            write(path)
        assert info.value.errno == errno.ENOSPC, name
        message = str(info.value)
        assert "No space left on device" in message and path in message, (name, message)


def test_devices_and_fifos_are_written_in_place(short_trace, tmp_path):
    tracer, trace, source = short_trace
    for name, write in every_writer(*short_trace, compressed=False).items():
        assert write("/dev/null") is not None, name
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for name, write in {"write_chrome": lambda p: write_chrome(tracer, p),
                        "Trace.to_chrome": lambda p: trace.to_chrome(p),
                        "merge": lambda p: merge([source], p)}.items():
        got = []
        reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
        reader.start()
        try:
            write(fifo)
        except BaseException:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # lets the reader end
            raise
        assert stat.S_ISFIFO(os.stat(fifo).st_mode), name  # not replaced by a file
        reader.join(timeout=120)  # not a timing check: the writer has closed the FIFO
        assert got and json.loads(got[0]), name  # the whole document came through
    assert os.listdir(tmp_path) == ["pipe.json"]


def test_a_symbolic_link_keeps_pointing_at_the_new_file(short_trace, tmp_path):
    tracer, _, _ = short_trace
    real = tmp_path / "real.json"
    real.write_bytes(PREVIOUS)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_chrome(tracer, link)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert len(frametrace.load(real).events) == len(tracer.getEvents())
    assert sorted(os.listdir(tmp_path)) == ["link.json", "real.json"]


def test_a_loop_of_links_is_refused_and_left_as_it_was(short_trace, tmp_path):
    # open() fails on it (ELOOP); a rename over it would replace the link.
    loop = tmp_path / "loop.json"
    loop.symlink_to("loop.json")
    for name, write in every_writer(*short_trace, compressed=False).items():
        with pytest.raises(OSError, match="loop.json: Too many levels of symbolic links") as info:
            write(loop)
        assert info.value.errno == errno.ELOOP, name
        assert loop.is_symlink() and os.readlink(loop) == "loop.json", name
        assert os.listdir(tmp_path) == ["loop.json"], name


def test_no_temporary_left_after_success_or_failure(short_trace, tmp_path):
    writers = every_writer(*short_trace)
    for name, write in writers.items():
        write(tmp_path / "ok" / name.replace(" ", "_"))
    assert leftovers(tmp_path / "ok") == []
    # A directory where the file should be: opening it fails.
    for name, write in writers.items():
        path = tmp_path / "bad" / name.replace(" ", "_")
        target = path.with_name(path.name + ".gz") if name.endswith(" gz") else path
        target.mkdir(parents=True)
        (target / "inside").write_bytes(PREVIOUS)
        with pytest.raises(OSError):
            write(path)
        assert os.listdir(target) == ["inside"], name
        assert (target / "inside").read_bytes() == PREVIOUS, name
    assert leftovers(tmp_path / "bad") == []
