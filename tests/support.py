"""Helpers shared by the tests of every layer (tests/ is on sys.path, see
tests/conftest.py).  The invariants of a trace are checked by the public
frametrace.testing.assert_valid_trace."""
from __future__ import annotations

import os
import sys

import pytest
from collections import defaultdict

import frametrace
from frametrace.testing import assert_valid_trace

QUALNAMES = sys.version_info >= (3, 11)
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS_DIR)  # the checkout

# Under .ci/run's ASan stage: memory figures are ASan's allocator's, and
# CPython's own leaks at exit (daemon threads, tracemalloc) are not ours.
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
needs_plain_allocator = pytest.mark.skipif(
    UNDER_ASAN, reason="measures RSS and allocations, which ASan changes; leaks are "
                       "LeakSanitizer's and valgrind's to find there")


def child_env(**extra):
    """The environment of a test's child interpreter: no LeakSanitizer
    (CPython's exit is not frametrace's), the tests' directory importable."""
    env = dict(os.environ, **extra)
    if UNDER_ASAN:
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return env


def run_stderr_gone(command, cwd, env, first_line=None, timeout=120):
    """(status, stdout) of command run with stderr a pipe that is closed
    once it has said first_line (at once with None): a reader that went
    away (`... 2>&1 | head -1`).  Its process group is killed, and the
    test fails, if it runs past timeout."""
    import signal
    import subprocess

    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    if first_line is not None:
        assert proc.stderr.readline() == first_line
    proc.stderr.close()
    proc.stderr = None  # gone: communicate() reads stdout only
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{command} still running after {timeout} s")
    return proc.returncode, out


def torch_installed() -> bool:
    """Whether the real torch is importable.  tests/ is on sys.path and
    tests/pytorch/ (the torch tests, no __init__.py) is then a namespace
    package named torch: ``import torch`` succeeds without torch, and
    pytest.importorskip("torch") does not skip.  Installed, torch (a regular
    package) comes first."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    return spec is not None and spec.origin is not None


def qual(qualname: str) -> str:
    """The name frametrace reports for a function with this __qualname__."""
    return qualname if QUALNAMES else qualname.rsplit(".", 1)[-1]


def tracing_installed() -> bool:
    """Whether a hook is in place: a profile function on this thread, or
    frametrace holding sys.monitoring's profiler tool id."""
    if sys.getprofile() is not None:
        return True
    monitoring = getattr(sys, "monitoring", None)
    holder = monitoring.get_tool(monitoring.PROFILER_ID) if monitoring is not None else None
    return holder is not None and holder.startswith("frametrace (")


def traced(func, *args, **options):
    """Runs func(*args) under a tracer; its events, checked."""
    import frametrace

    with frametrace.trace(**options) as tracer:
        func(*args)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    return tracer, events


def subtree(events, index):
    """(name, kind, [children...]) of events[index], children in order."""
    kids = defaultdict(list)
    for i, ev in enumerate(events):
        kids[ev.parent].append(i)

    def build(i):
        ev = events[i]
        return (ev.name, ev.kind, [build(k) for k in kids[i]])

    return build(index)


def find(events, name, **fields):
    """Indices of the events with this name (and these field values)."""
    return [
        i for i, ev in enumerate(events)
        if ev.name == name and all(getattr(ev, k) == v for k, v in fields.items())
    ]


def only(events, name, **fields):
    found = find(events, name, **fields)
    assert len(found) == 1, (name, fields, [events[i] for i in found])
    return found[0]


def run_json(program, timeout=300):
    """Runs program (indented source is fine) in a fresh interpreter; the
    JSON it printed last.  It must exit 0 and print nothing on stderr."""
    import json
    import subprocess
    import textwrap

    env = child_env(PYTHONPATH=TESTS_DIR)
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(program)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


# Source for child programs: status("VmRSS") in bytes, from /proc.
PROC_STATUS = """
    def status(field):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
"""


# ---- a training loop under a profiling session -------------------------------


def model(batch):
    return sum(batch)


def training_loop(prof, steps):
    for i in range(steps):
        with frametrace.range("forward"):
            model([i, 1])
        prof.step()


def run_training(prof, steps):
    training_loop(prof, steps)


# ---- SVG flame graphs ----------------------------------------------------------

SVG = "{http://www.w3.org/2000/svg}"


def frames_of(path):
    """The root of an SVG flame graph and its frames: (title, x, width, y)."""
    import xml.etree.ElementTree as ET
    root = ET.parse(path).getroot()
    assert root.tag == SVG + "svg"
    frames = []
    for g in root.iter(SVG + "g"):
        if g.get("class") == "f":
            rect, title = g.find(SVG + "rect"), g.find(SVG + "title")
            assert rect is not None and title is not None
            frames.append((title.text, float(rect.get("x")), float(rect.get("width")),
                           float(rect.get("y"))))
    return root, frames


def child_pids(pid: int) -> list:
    """The processes process pid has started and not yet waited for."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return f.read().split()
    except OSError:
        return []


def wait_for_a_child_to_come_and_go(pid: int, process=None,
                                    timeout: float = 60.0) -> None:
    """Waits until process pid has started a child and that has ended;
    process: its Popen, whose output an early exit shows."""
    import time

    deadline = time.monotonic() + timeout
    seen = False
    while True:
        children = child_pids(pid)
        seen = seen or bool(children)
        if seen and not children:
            return
        if process is not None and process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"process {pid} ended (status {process.returncode}) before a "
                                 f"child came and went: {out}{err}")
        assert time.monotonic() < deadline, f"process {pid} started no child"
        time.sleep(0.002)


class UserPython:
    """A copy of this CPython (its program, libpython, standard library)
    that user uid owns, as pyenv, conda or uv make one in a home folder,
    with code planted in its ``encodings`` package (which every start of
    the interpreter imports, ``-I -S`` too): each run creates
    ``ran-as-EUID`` in ``self.marks``.  The stdlib's files are hard links
    (root's; the folders holding them, the program and ``encodings`` are
    the user's).  Beside it, what the user's processes need wherever the
    tests and their venv are (maybe in folders only root can read):
    frametrace (importable: ``popen``'s environment) and tests/targets
    (``self.targets``); ``out``: a folder the user can write.
    ``remove()`` when done."""

    def __init__(self, uid: int, gid: int):
        import shutil
        import sysconfig
        import tempfile

        self.uid, self.gid = uid, gid
        self.home = tempfile.mkdtemp(prefix="frametrace-user-", dir="/tmp")
        os.chmod(self.home, 0o755)  # root's: the user can only read it
        prefix = os.path.join(self.home, "python")
        version = "python%d.%d" % sys.version_info[:2]
        stdlib = sysconfig.get_path("stdlib")
        lib = os.path.join(prefix, "lib", version)
        os.makedirs(lib)
        os.makedirs(os.path.join(prefix, "bin"))
        self.program = os.path.join(prefix, "bin", version)
        shutil.copy2(os.path.realpath(sys.executable), self.program)

        def link(src, dst):
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)

        skip = shutil.ignore_patterns("__pycache__")
        for name in os.listdir(stdlib):
            src, dst = os.path.join(stdlib, name), os.path.join(lib, name)
            if name in ("test", "site-packages", "dist-packages", "__pycache__", "encodings",
                        "idlelib", "tkinter", "turtledemo"):
                continue
            if os.path.isdir(src):
                shutil.copytree(src, dst, symlinks=True, copy_function=link, ignore=skip)
            elif os.path.isfile(src):
                link(src, dst)
        shutil.copytree(os.path.join(stdlib, "encodings"), os.path.join(lib, "encodings"),
                        ignore=skip)
        self.marks = prefix
        init = os.path.join(lib, "encodings", "__init__.py")
        with open(init) as f:
            original = f.read()
        with open(init, "w") as f:
            f.write(f"import posix as _p\ntry:\n"
                    f"    _p.close(_p.open({self.marks!r} + '/ran-as-%d' % _p.geteuid(), "
                    f"_p.O_WRONLY | _p.O_CREAT, 0o644))\n"
                    f"except OSError:\n    pass\ndel _p\n" + original)
        site = os.path.join(self.home, "site")
        shutil.copytree(os.path.dirname(frametrace.__file__), os.path.join(site, "frametrace"),
                        copy_function=link, ignore=skip)
        self.targets = os.path.join(self.home, "targets")
        shutil.copytree(os.path.join(TESTS_DIR, "targets"), self.targets, ignore=skip)
        self.env = {"PATH": os.defpath, "LC_ALL": "C.UTF-8", "PYTHONPATH": site}
        with open("/proc/self/maps") as f:
            libpython = [line.split(None, 5)[5].strip() for line in f
                         if "/libpython3" in line and len(line.split(None, 5)) == 6]
        if libpython:
            link(libpython[0], os.path.join(prefix, "lib", os.path.basename(libpython[0])))
            self.env["LD_LIBRARY_PATH"] = os.path.join(prefix, "lib")
        self.out = os.path.join(self.home, "out")
        os.mkdir(self.out)
        # The user's: every folder, the program, encodings (not the links).
        os.chown(self.out, uid, gid)
        for folder, _, files in os.walk(prefix):
            os.chown(folder, uid, gid)
            if folder.endswith("encodings") or folder.endswith("bin"):
                for name in files:
                    os.chown(os.path.join(folder, name), uid, gid)

    def ran_as(self) -> set:
        """The effective uids the planted code has run with."""
        return {int(name[len("ran-as-"):]) for name in os.listdir(self.marks)
                if name.startswith("ran-as-")}

    def popen(self, *args, **kwargs):
        """A process of the user's running this Python, in an environment of
        its own: frametrace's settings (the clock fixture's) and, under the
        sanitizers, their runtime (its log is stderr: root's log folder is
        not the user's to write)."""
        import re
        import subprocess

        env = dict(self.env, **{name: value for name, value in os.environ.items()
                                if name.startswith("FRAMETRACE_")})
        if UNDER_ASAN:
            for name in ("LD_PRELOAD", "UBSAN_OPTIONS", "PYTHONMALLOC"):
                if name in os.environ:
                    env[name] = os.environ[name]
            env["ASAN_OPTIONS"] = re.sub(r"(^|:)log_path=[^:]*", "",
                                         os.environ.get("ASAN_OPTIONS", "")) + ":detect_leaks=0"
        return subprocess.Popen([self.program, *args], user=self.uid, group=self.gid,
                                extra_groups=[], env=env, **kwargs)

    def remove(self):
        import shutil

        shutil.rmtree(self.home, ignore_errors=True)


# Writer options of earlier versions that are now fields of the Trace.
_TRACE_FIELDS = {"thread_slices": "slices", "top_level": "chrome_top_level",
                 "metadata": "extra_metadata", "origin_ns": "session_start_ns"}


def trace_of(tracer, **facts):
    """frametrace.as_trace(tracer) with these Trace fields set."""
    trace = frametrace.as_trace(tracer)
    for name, value in facts.items():
        setattr(trace, _TRACE_FIELDS.get(name, name), value)
    return trace


# The events columns no event leaves empty: Parquet writes them required.
EVENTS_REQUIRED = {"pid", "thread", "id", "depth", "name", "file", "line", "kind", "start_ns",
                   "end_ns", "dur_ns", "self_ns", "open_at_start", "open_at_stop", "outermost"}


def assert_events_layout(root: str) -> None:
    """Every events file under the dataset root keeps its strings as
    dictionary indices in every row group (a dictionary written with
    repeated values makes Parquet store each string plain) and declares
    required the columns no event leaves empty."""
    import pyarrow.parquet as pq

    files = [os.path.join(d, f) for d, _, names in os.walk(os.path.join(root, "events"))
             for f in names if f.endswith(".parquet")]
    assert files
    for path in files:
        meta = pq.ParquetFile(path).metadata
        schema = meta.schema.to_arrow_schema()
        assert {f.name for f in schema if not f.nullable} == EVENTS_REQUIRED, path
        columns = {meta.schema.column(i).name: i for i in range(meta.num_columns)}
        for group in range(meta.num_row_groups):
            for name in ("name", "file", "kind"):
                chunk = meta.row_group(group).column(columns[name])
                assert "RLE_DICTIONARY" in chunk.encodings, (path, group, name,
                                                             chunk.encodings)
