"""Bad-input fuzzing (Hypothesis) of every public constructor and method, and
of the private C entry points export.py and the tests use.

The property, for every target: a call either succeeds with a sane result,
or raises one of the exceptions its documentation names (TypeError,
ValueError, RuntimeError, OSError, as fits the call; AssertionError for the
``frametrace.testing`` checks), or an exception raised by the fuzzer's own
objects (``UserError``, from an ``__index__``, ``__fspath__``, ``__eq__`` ...)
propagates.  Never a crash, a hang, SystemError, or an internal error
(AttributeError, KeyError, IndexError, RecursionError, OverflowError ...) out
of frametrace's code; after any rejected call the object is still usable,
and nothing is left behind (no tracer active, no profile function
installed, no session current).

The fuzzer's objects misbehave only while "armed" (during the call under
test), so that Hypothesis can hash, compare and print them.  A "mutate"
object runs one of the test's actions instead of raising: clearing or
stopping the tracer in the middle of a call, say.

Fuzzing of the C entry points that could crash the interpreter (the Tracer
lifecycle, ``_replay``, ``_ticks_to_ns``, ``_write_chrome``,
``_write_perfetto``, progress callbacks) runs in a subprocess, so that a
crash is a failing test with its output, not a dead pytest; set
``FRAMETRACE_FUZZ_INPROCESS=1`` to run them in this process (to debug).

Bugs it finds are kept as minimal ``xfail(strict=True)`` tests at the end
(with, where a fuzz target must tolerate one meanwhile, its signature in
``KNOWN_BUGS``); once fixed, they stay there as regression tests.

Examples per target: a few hundred by default; ``FRAMETRACE_HYPOTHESIS_EXAMPLES=N``
runs N for every target.
"""
from __future__ import annotations

import atexit
import collections.abc
import contextlib
import decimal
import faulthandler
import fractions
import functools
import gc
import gzip
import io
import json
import math
import os
import pathlib
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import weakref
import xml.etree.ElementTree as ElementTree

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import frametrace  # noqa: E402
from frametrace import Event, _testing, _tracer, export, loader, reports, testing  # noqa: E402
from frametrace.schedule import ProfilerAction, Schedule  # noqa: E402
from frametrace.session import RangeRecord, StepRecord, Trace  # noqa: E402
from support import check_invariants  # noqa: E402
from pbwire import message  # noqa: E402

# One clock is enough here: the fuzzed code does not depend on it.
pytestmark = [
    pytest.mark.parametrize("clock", ["cycles"], indirect=True),
    pytest.mark.filterwarnings("ignore:Generating overly large repr"),
    pytest.mark.filterwarnings("ignore:NotImplemented should not be used in a boolean context"),
]

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
_EXAMPLES = os.environ.get("FRAMETRACE_HYPOTHESIS_EXAMPLES")
INPROCESS = bool(os.environ.get("FRAMETRACE_FUZZ_INPROCESS"))
HANG_SECONDS = 120  # one example taking this long is a hang: dump the stacks and exit


def fuzz(default):
    """Hypothesis settings: deterministic, no database, no explain phase
    (it traces with sys.settrace/sys.monitoring, which would collide with
    the tracers under test)."""
    return settings(
        max_examples=int(_EXAMPLES) if _EXAMPLES else default,
        deadline=None,
        derandomize=True,
        database=None,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


# ---- known bugs, tolerated by the fuzz targets until fixed -------------------------
# id -> (exception type, message regex): a fuzz target passing known=(id,) to
# attempt() takes that exception as a rejection.  Each entry goes with an
# xfail(strict=True) test at the end of the file; when the bug is fixed, that
# test passes (and fails, strict): then the entry goes, and the test stays as
# a regression test.

KNOWN_BUGS: dict[str, tuple[type, str]] = {}


def _known(exc, ids):
    for bug in ids:
        kind, pattern = KNOWN_BUGS[bug]
        if isinstance(exc, kind) and re.search(pattern, str(exc)):
            return bug
    return None


# ---- the fuzzer's own misbehaving objects ---------------------------------------------


class UserError(Exception):
    """Raised by the fuzzer's objects: may propagate out of any call."""


_STATE = {"armed": False, "actions": (), "mutations": 0}


class Evil:
    """An object one of whose protocol methods, while armed, raises
    UserError ("raise"), runs one of the test's actions ("mutate"), or just
    works ("ok")."""

    def __init__(self, how="raise", k=0, value=None):
        self.how = how
        self.k = k
        self.value = value

    def __repr__(self):
        return f"{type(self).__name__}({self.how!r}, {self.k}, {self.value!r})"

    def _act(self, result):
        if _STATE["armed"]:
            if self.how == "raise":
                raise UserError(type(self).__name__)
            actions = _STATE["actions"]
            if self.how == "mutate" and actions:
                _STATE["mutations"] += 1
                _STATE["armed"] = False  # the action runs with everything behaving
                try:
                    actions[self.k % len(actions)]()
                except Exception:
                    pass
                finally:
                    _STATE["armed"] = True
        return result


class EvilIndex(Evil):
    def __index__(self):
        return self._act(self.value if isinstance(self.value, int) else 1)


class EvilLen(Evil):
    def __len__(self):
        return self._act(0)

    def __iter__(self):
        return iter(self._act(()))

    def __getitem__(self, i):
        self._act(None)
        raise IndexError(i)


class EvilEq(Evil):
    """Compares badly; hashes like its value (to collide with it in dicts)."""

    def __eq__(self, other):
        return self._act(False)

    def __ne__(self, other):
        return self._act(True)

    def __hash__(self):
        return hash(self.value)


class EvilHash(Evil):
    def __hash__(self):
        return self._act(hash(self.value))


class EvilStr(Evil):
    def __str__(self):
        return self._act("evil")

    def __format__(self, spec):
        return self._act("evil")


class EvilFspath(Evil):
    def __fspath__(self):
        return self._act(self.value)


class EvilBool(Evil):
    def __bool__(self):
        return self._act(True)


class EvilIter(Evil):
    def __iter__(self):
        return iter(self._act(self.value if isinstance(self.value, (list, tuple)) else ()))


class EvilCall(Evil):
    def __call__(self, *args, **kwargs):
        return self._act(self.value)


class EvilRecord(Evil):
    """Looks like a RangeRecord/StepRecord: every public attribute is value."""

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._act(self.value)


class EvilMapping(Evil, collections.abc.Mapping):
    def __getitem__(self, key):
        return self._act(dict(self.value or {})[key])

    def __iter__(self):
        return iter(self._act(list(dict(self.value or {}))))

    def __len__(self):
        return self._act(len(dict(self.value or {})))


class EvilSequence(Evil, collections.abc.Sequence):
    def __getitem__(self, i):
        return self._act(list(self.value or ())[i])

    def __len__(self):
        return self._act(len(list(self.value or ())))


class _MisbehavingValue:
    """repr/format/eq/hash that raise while armed, for a subclass of a
    builtin value type (the type itself does the rest)."""

    how = "raise"

    def _act(self):
        if _STATE["armed"] and self.how == "raise":
            raise UserError(type(self).__name__)

    def __repr__(self):
        self._act()
        return super().__repr__()

    def __format__(self, spec):
        self._act()
        return super().__format__(spec)

    def __eq__(self, other):
        self._act()
        return super().__eq__(other)

    def __hash__(self):
        self._act()
        return super().__hash__()


class EvilInt(_MisbehavingValue, int):
    """An int (subclass) whose repr/str/eq/hash misbehave: C code that takes
    any PyLong takes it."""

    __str__ = _MisbehavingValue.__repr__


class EvilText(_MisbehavingValue, str):
    """A str (subclass) whose eq/ne/hash/repr/format misbehave."""

    def __ne__(self, other):
        self._act()
        return str.__ne__(self, other)


def _evil_int(value, how):
    obj = EvilInt(value)
    obj.how = how
    return obj


def _evil_text(value, how):
    obj = EvilText(value)
    obj.how = how
    return obj


@contextlib.contextmanager
def armed(actions=()):
    _STATE["actions"] = tuple(actions)
    _STATE["armed"] = True
    try:
        yield
    finally:
        _STATE["armed"] = False
        _STATE["actions"] = ()


# ---- calling, and judging what came out -------------------------------------------------

FORBIDDEN = (SystemError, RecursionError, NotImplementedError, MemoryError)


class Outcome:
    def __init__(self, ok, value=None, exc=None, mutated=False, known=None):
        self.ok = ok
        self.value = value
        self.exc = exc
        self.mutated = mutated  # a "mutate" object ran an action during the call
        self.known = known  # the KNOWN_BUGS id it matched

    @property
    def user(self):
        return isinstance(self.exc, UserError)

    def __repr__(self):
        return f"Outcome(ok={self.ok}, exc={self.exc!r}, mutated={self.mutated})"


def attempt(fn, *args, allowed=(TypeError, ValueError), known=(), actions=(), **kwargs):
    """Calls fn(*args, **kwargs) armed; the Outcome.  Fails the test if it
    raised anything but an allowed exception, the fuzzer's UserError or a
    known bug."""
    before = _STATE["mutations"]
    try:
        with armed(actions):
            value = fn(*args, **kwargs)
    except UserError as exc:
        return Outcome(False, exc=exc, mutated=_STATE["mutations"] != before)
    except BaseException as exc:  # noqa: B036 - judged here
        mutated = _STATE["mutations"] != before
        if isinstance(exc, allowed) and not isinstance(exc, FORBIDDEN):
            return Outcome(False, exc=exc, mutated=mutated)
        bug = _known(exc, known)
        if bug is not None:
            return Outcome(False, exc=exc, mutated=mutated, known=bug)
        name = getattr(fn, "__qualname__", repr(fn))
        raise AssertionError(
            f"{name}() raised {type(exc).__name__}: {exc!r}; allowed: "
            f"{', '.join(k.__name__ for k in allowed)}") from exc
    return Outcome(True, value=value, mutated=_STATE["mutations"] != before)


def _has_truth(value):
    """Whether bool(value) works (a misbehaving value's does: it raises
    the fuzzer's UserError, which attempt() expects anyway)."""
    if isinstance(value, Evil):
        return True
    try:
        bool(value)
    except TypeError:
        return False
    return True


def _active_tracers():
    return [o for o in gc.get_objects() if isinstance(o, _tracer.Tracer) and o.active]


def reset():
    """Stops whatever an example left running."""
    for t in _active_tracers():
        t.stop()
    _testing.set_noop_profile(False)
    sys.setprofile(None)
    threading.setprofile(None)
    frametrace.session._current = None
    _tracer._set_range_sink(None)


def assert_clean():
    """Nothing left behind by the example: no active tracer, no profile
    function, no session, the range sink unset."""
    problems = []
    if sys.getprofile() is not None:
        problems.append(f"sys.getprofile() is {sys.getprofile()!r}")
        sys.setprofile(None)
    if threading.getprofile() is not None:
        problems.append(f"threading.getprofile() is {threading.getprofile()!r}")
        threading.setprofile(None)
    if frametrace.session._current is not None:
        problems.append(f"a session is still current: {frametrace.session._current!r}")
        frametrace.session._current = None
    if MONITORING and sys.monitoring.get_tool(sys.monitoring.PROFILER_ID) is not None:
        problems.append(f"sys.monitoring's profiler id is held by "
                        f"{sys.monitoring.get_tool(sys.monitoring.PROFILER_ID)!r}")
    probe = _tracer.Tracer(buffer_size=16)
    try:
        probe.start()
    except RuntimeError as exc:
        problems.append(f"a fresh tracer cannot start: {exc}")
    finally:
        probe.stop()
    if problems:
        reset()
    _tracer._set_range_sink(None)
    assert not problems, problems


def _watch():
    """Arms the hang watchdog on the process's own stderr (pytest's
    --capture=sys puts an object without a file descriptor in sys.stderr)."""
    try:
        faulthandler.dump_traceback_later(HANG_SECONDS, exit=True, file=sys.__stderr__)
    except (AttributeError, ValueError, OSError):
        pass  # no usable stderr: no watchdog


def guarded(fn):
    """Each example: a watchdog against hangs, and the check that nothing
    was left behind."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        _watch()
        try:
            fn(*args, **kwargs)
        except BaseException:
            _STATE["armed"] = False
            reset()  # a failed example must not make the next ones fail
            raise
        finally:
            faulthandler.cancel_dump_traceback_later()
            _STATE["armed"] = False
        assert_clean()

    return run


# ---- scratch directories and paths ----------------------------------------------------------

_BASE = tempfile.mkdtemp(prefix="frametrace-fuzz-")
atexit.register(shutil.rmtree, _BASE, True)
_DEEP = os.path.join(_BASE, "a", "b", "c", "d", "e", "f")
os.makedirs(_DEEP)


@contextlib.contextmanager
def scratch():
    """A fresh directory, seven levels down in a private one, as the
    current directory: relative (and ../) paths the fuzzer makes stay in
    the private one."""
    d = tempfile.mkdtemp(dir=_DEEP)
    old = os.getcwd()
    os.chdir(d)
    try:
        yield d
    finally:
        os.chdir(old)
        shutil.rmtree(d, ignore_errors=True)


SUFFIXES = ["", ".json", ".json.gz", ".gz", ".pftrace", ".pftrace.gz", ".svg", ".pstats",
            ".folded", ".txt"]


def _safe_relative(value):
    """A str/bytes path the fuzzer drew, made relative (never /something)."""
    if isinstance(value, str) and value.startswith("/"):
        return "." + value
    if isinstance(value, bytes) and value.startswith(b"/"):
        return b"." + value
    return value


class PathSpec:
    """A path to make inside the scratch directory, and what writing to it
    must do: "ok" (succeed, other arguments being valid), "fail" (an
    OSError or ValueError), "any"."""

    def __init__(self, kind, *params):
        self.kind = kind
        self.params = params

    def __repr__(self):
        return f"PathSpec({self.kind!r}, {', '.join(map(repr, self.params))})"

    def make(self, d, readable=False, makedirs=True):
        """(path argument, expectation).  readable: for readers;
        makedirs: the writer creates missing parent directories (the C
        writers' private entry points do not)."""
        k, p = self.kind, self.params
        if k == "file":
            name, suffix, form = p
            return _form(os.path.join(d, name + suffix), form)
        if k == "nested":
            name, suffix = p
            path, expect = _form(os.path.join(d, "new", "deeper", name + suffix), "str")
            return path, expect if makedirs else "fail"
        if k == "dir":
            return d, "fail"
        if k == "dir_named":
            path = _fresh(d, "x.json")
            os.mkdir(path)
            return path, "fail"
        if k == "under_file":
            path = _fresh(d, "afile")
            with open(path, "w") as fh:
                fh.write("x")
            return os.path.join(path, "x.json"), "fail"
        if k == "devfull":
            # Reading /dev/full never ends: readers get /dev/null instead.
            return ("/dev/null", "any") if readable else ("/dev/full", "fail")
        if k == "empty":
            return "", "fail"
        if k == "nul":
            return os.path.join(d, "a\x00b.json"), "fail"
        if k == "surrogate":
            return os.path.join(d, "\ud800.json"), "fail"
        if k == "escaped":  # a lone surrogate that surrogateescape turns into a byte
            return os.path.join(d, "\udcff.json"), "ok"
        if k == "long":
            return os.path.join(d, "n" * 300 + ".json"), "fail"
        if k == "loop":
            path = _fresh(d, "loop")
            os.symlink(os.path.basename(path), path)
            return path, "fail"
        if k == "dangling":
            path = _fresh(d, "dangling")
            os.symlink(os.path.join(d, "missing", "target.json"), path)
            return path, "fail"
        if k == "evil":
            how, n = p
            return EvilFspath(how, n, os.path.join(d, "evil.json")), "any"
        if k == "nasty":
            return _safe_relative(p[0]), "any"
        raise AssertionError(k)


def _fresh(d, name):
    """d/name, or d/name.N: a name not taken yet."""
    path, n = os.path.join(d, name), 0
    while os.path.lexists(path):
        n += 1
        path = os.path.join(d, f"{name}.{n}")
    return path


def _form(path, form):
    """path as str, bytes, pathlib.Path or an __fspath__ object."""
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:
        return path, "fail"
    if form == "bytes":
        return raw, "any"  # bytes: not the documented str | PathLike[str]
    if form == "pathlib":
        return pathlib.Path(path), "ok"
    if form == "fspath":
        return EvilFspath("ok", 0, path), "ok"
    if form == "fspath-bytes":
        return EvilFspath("ok", 0, raw), "any"
    return path, "ok"


# ---- strategies ----------------------------------------------------------------------------

EDGE_INTS = (0, 1, -1, 2, 3, 7, 255, 256, 2**15, 2**16, 2**24, 2**24 + 1, 2**28, 2**28 + 1,
             2**31 - 1, 2**31, -(2**31), 2**32, 2**53 + 1, 2**62, 2**63 - 1, 2**63, -(2**63),
             -(2**63) - 1, 2**64 - 1, 2**64, 2**64 + 1, 2**100, -(2**100), 10**400)
EDGE_FLOATS = (0.0, -0.0, math.nan, math.inf, -math.inf, 1.5, -1.5, 1e308, 5e-324, 2.0**63,
               2.0**64, 1e-9)
EDGE_STRS = ("", "\x00", "a\x00b", "\ud800", "x\udcff", "\udc80\ud800", "\U0001f600", "é",
             "py", "c", "call", "return", "c_call", "c_return", "c_exception", "self", "total",
             "calls", "mean", "name", "X", "M", "leaf", "<module>", "a:1", ":", ";", "\n", "\r\n",
             "1", "-1", "NaN", "/", ".", "..", " ", "\\", '"', "<>&", "]]>", "x" * 100_000)
HOWS = st.sampled_from(["raise", "mutate", "ok"])
MONITORING = sys.version_info >= (3, 12)  # the sys.monitoring backend exists
BACKENDS = ("auto", "setprofile") + (("monitoring",) if MONITORING else ())
backends = st.sampled_from(BACKENDS)

ints = st.one_of(st.sampled_from(EDGE_INTS), st.integers(-300, 300), st.integers())
small_ints = st.one_of(st.sampled_from((0, 1, -1, 2, 5, 2**31, 2**63, 2**64)), st.integers(-5, 50))
floats = st.one_of(st.sampled_from(EDGE_FLOATS), st.floats())
_surrogates = st.integers(0xD800, 0xDFFF).map(chr)
texty = st.lists(st.one_of(st.characters(), _surrogates, st.sampled_from("\x00\n\r\t;:\"\\/.<>&")),
                 max_size=12).map("".join)
strs = st.one_of(st.sampled_from(EDGE_STRS), texty)
byteses = st.one_of(st.sampled_from((b"", b"\x00", b"abc", b"\xff\xfe\x00", b"x" * 1000)),
                    st.binary(max_size=12))


def _young_gc():
    """A collection of the youngest generation: finalizers and weakref
    callbacks run, at a fraction of a full collection's cost."""
    gc.collect(0)


def _leaf(i=0):
    return len([i])


def _work(n=3):
    total = 0
    for i in range(n):
        total += _leaf(i)
    return total


MISC = (object(), Ellipsis, NotImplemented, 1 + 2j, decimal.Decimal("nan"), decimal.Decimal("1e999"),
        fractions.Fraction(1, 3), range(3), bytearray(b"x"), frozenset({1}), type, int, len,
        _leaf, _leaf.__code__, (lambda *a, **k: None), sys, io.StringIO, ProfilerAction.RECORD)

evil_objects = st.one_of(
    st.builds(EvilIndex, HOWS, st.integers(0, 7), small_ints),
    st.builds(EvilLen, HOWS, st.integers(0, 7)),
    st.builds(EvilEq, HOWS, st.integers(0, 7), small_ints),
    st.builds(EvilHash, HOWS, st.integers(0, 7), small_ints),
    st.builds(EvilStr, HOWS, st.integers(0, 7)),
    st.builds(EvilFspath, HOWS, st.integers(0, 7),
              st.sampled_from(["fspath.json", b"fspath.json", 5, None, "a\x00b", "\ud800", ""])),
    st.builds(EvilBool, HOWS, st.integers(0, 7)),
    st.builds(EvilIter, HOWS, st.integers(0, 7), st.sampled_from([[], [1, 2], ["a"], [(1, 2)]])),
    st.builds(EvilCall, HOWS, st.integers(0, 7), st.sampled_from([None, 1, "x", ProfilerAction.RECORD])),
    st.builds(EvilRecord, HOWS, st.integers(0, 7), st.sampled_from([0, 1, "x", None, 2**64])),
    st.builds(EvilMapping, HOWS, st.integers(0, 7), st.sampled_from([None, {1: "a"}, {"a": 1}])),
    st.builds(EvilSequence, HOWS, st.integers(0, 7), st.sampled_from([None, [1], ["a", "b"]])),
    st.builds(_evil_int, ints, HOWS),
    st.builds(_evil_text, strs, HOWS),
)
atoms = st.one_of(st.none(), st.booleans(), ints, floats, strs, byteses, evil_objects,
                  st.sampled_from(MISC))
safe_keys = st.one_of(st.none(), st.booleans(), small_ints, st.sampled_from(EDGE_STRS[:30]), texty)
# Anything: an atom, or a small container of atoms (of containers, now and then).
_containers = st.one_of(st.lists(atoms, max_size=3), st.lists(atoms, max_size=3).map(tuple),
                        st.dictionaries(safe_keys, atoms, max_size=2))
nasty = st.one_of(atoms, atoms, _containers, st.lists(_containers, max_size=2))
names = texty.map(lambda s: (s.replace("/", "_").replace("\x00", "_").replace("..", "__") or "n")[:40])
path_specs = st.one_of(
    st.builds(lambda n, s, f: PathSpec("file", n, s, f), names, st.sampled_from(SUFFIXES),
              st.sampled_from(["str", "str", "bytes", "pathlib", "fspath", "fspath-bytes"])),
    st.builds(lambda n, s: PathSpec("nested", n, s), names, st.sampled_from(SUFFIXES)),
    st.sampled_from([PathSpec(k) for k in ("dir", "dir_named", "under_file", "devfull", "empty",
                                           "nul", "surrogate", "escaped", "long", "loop",
                                           "dangling")]),
    st.builds(lambda h, k: PathSpec("evil", h, k), HOWS, st.integers(0, 7)),
    st.builds(lambda v: PathSpec("nasty", v), nasty),
)


def maybe(strategy, valid):
    """Mostly a valid value, sometimes anything."""
    return st.one_of(valid, valid, strategy)


# ---- the traced code, and cached traces ------------------------------------------------------


def _thread_work():
    th = threading.Thread(target=_work, name="fuzz-worker")
    th.start()
    th.join()


def stopped_tracer(threads=False, **options):
    options.setdefault("buffer_size", 256)
    tracer = frametrace.Tracer(**options)
    with tracer:
        _work()
        if threads:
            _thread_work()
    return tracer


def session_trace(python_steps=None):
    """A Trace of a short session: events on two threads, ranges, steps."""
    got = []
    sched = frametrace.schedule(wait=0, warmup=0, active=3, repeat=1)
    with frametrace.profile(schedule=sched, python_steps=python_steps, buffer_size=512,
                            on_trace_ready=got.append) as prof:
        for _ in range(3):
            with frametrace.range("outer"):
                with frametrace.range("inner \U0001f600"):
                    _work()
                _thread_work()
            prof.step()
    assert len(got) == 1
    return got[0]


@functools.lru_cache(maxsize=None)
def cached_trace():
    return session_trace()


@functools.lru_cache(maxsize=None)
def cached_events():
    return tuple(cached_trace().events)


# ---- the Tracer constructor -----------------------------------------------------------------


def _expected_tracer_error(args, kwargs):
    """The exception type Tracer(*args, **kwargs) must raise (unless the
    fuzzer's own object raises first), None if it must succeed."""
    if (len(args) > 1 or set(kwargs) - {"buffer_size", "c_calls", "backend"}
            or (args and "buffer_size" in kwargs)):
        return TypeError
    backend = kwargs.get("backend")
    if backend is not None:
        if not isinstance(backend, str):
            return TypeError
        if str.__str__(backend) not in BACKENDS:
            return ValueError
    size = args[0] if args else kwargs.get("buffer_size", 1 << 20)
    if not isinstance(size, int) or isinstance(size, bool):
        return TypeError
    if not 1 <= size <= frametrace.MAX_BUFFER_SIZE:
        return ValueError
    if not isinstance(kwargs.get("c_calls", True), bool):
        return TypeError
    return None


tracer_kwargs = st.dictionaries(
    st.sampled_from(["buffer_size", "c_calls", "c_calls", "buffer_size", "backend", "backend", "bogus", "clock"]),
    st.one_of(nasty, st.integers(-2, 2**28 + 2), st.booleans(), st.sampled_from(("auto", "setprofile", "monitoring"))),
    max_size=4)


@fuzz(300)
@given(args=st.lists(st.one_of(nasty, st.integers(-2, 2**28 + 2)), max_size=2), kwargs=tracer_kwargs,
       factory=st.sampled_from(["Tracer", "trace", "_tracer.Tracer", "profile"]))
@guarded
def test_fuzz_tracer_constructor(args, kwargs, factory):
    make = {"Tracer": frametrace.Tracer, "trace": frametrace.trace,
            "_tracer.Tracer": _tracer.Tracer, "profile": frametrace.profile}[factory]
    if factory in ("trace", "profile"):
        args = []  # keyword-only
    if factory == "profile":
        kwargs = {k: v for k, v in kwargs.items() if k in ("buffer_size", "c_calls", "backend")}
    out = attempt(make, *args, **kwargs)
    expected = _expected_tracer_error(args, kwargs)
    if expected is None:
        assert out.ok, out
    elif not out.user:
        assert not out.ok and type(out.exc) is expected, (out, expected)
    if not out.ok:
        return
    obj = out.value
    if factory == "profile":
        assert isinstance(obj, frametrace.Profile)
        return
    size = args[0] if args else kwargs.get("buffer_size", frametrace.DEFAULT_BUFFER_SIZE)
    assert obj.buffer_size == size and type(obj.buffer_size) is int
    assert obj.c_calls is kwargs.get("c_calls", True)
    assert obj.start_ns is None and obj.stop_ns is None and not obj.active
    assert obj.dropped == 0 and obj.dropped_by_thread == {} and obj.thread_names == {}
    assert obj.clock in ("cycles", "monotonic")
    backend = kwargs.get("backend")
    assert obj.backend == (os.environ.get("FRAMETRACE_BACKEND", "setprofile")
                           if backend in (None, "auto") else str.__str__(backend)), obj.backend
    if size <= 1 << 12:  # a ring small enough to start here
        with obj:
            _work()
        events = obj.getEvents()
        assert_valid_trace(events, obj.start_ns, obj.stop_ns)
        assert any(e.name.endswith("_work") for e in events)
        if not obj.c_calls:
            assert all(e.kind == "py" for e in events)


# ---- the Tracer's lifecycle, methods and properties (subprocess) ---------------------------------

NEW, ACTIVE, STOPPED, CLEARED = "new", "active", "stopped", "cleared"


def observed_phase(tracer):
    if tracer.start_ns is None:
        return NEW
    if tracer.active:
        return ACTIVE
    if tracer._threads:
        return STOPPED
    try:  # no thread recorded anything, or cleared?
        tracer.getEvents()
    except RuntimeError:
        return CLEARED
    return STOPPED


def _hooked():
    """Whether this thread has a setprofile-backend tracer's hook."""
    return type(sys.getprofile()).__name__ == "_ThreadHook"


def check_properties(tracer, phase):
    assert (tracer.start_ns is None) == (phase == NEW)
    assert (tracer.stop_ns is None) == (phase in (NEW, ACTIVE))
    assert tracer.active is (phase == ACTIVE)
    if tracer.start_ns is not None and tracer.stop_ns is not None:
        assert tracer.start_ns <= tracer.stop_ns
    assert type(tracer.dropped) is int and tracer.dropped >= 0
    by_thread = tracer.dropped_by_thread
    assert isinstance(by_thread, dict)
    if phase != ACTIVE:  # while tracing, both keep growing
        assert sum(by_thread.values()) == tracer.dropped
    assert isinstance(tracer.thread_names, dict)
    assert all(isinstance(v, str) for v in tracer.thread_names.values())
    assert isinstance(tracer._threads, list)
    assert tracer.clock in ("cycles", "monotonic")


def _chrome_args(data, d, tracer):
    """Arguments for tracer._write_chrome: valid ones (and whether they all
    are), or fuzzed."""
    spec = data.draw(maybe(path_specs, st.builds(lambda n: PathSpec("file", n, ".json", "str"), names)),
                     label="path")
    path, expect = spec.make(d, makedirs=False)
    kwargs = {}
    valid = expect == "ok"
    for key, good in (("pid", st.integers(0, 2**31)), ("origin_ns", st.integers(-(2**40), 2**62)),
                      ("prelude", st.sampled_from(["", '{"ph":"M","name":"x","pid":1,"tid":1}'])),
                      ("trailer", st.sampled_from(['"a":1', '"otherData":{}'])),
                      ("compress", st.booleans()), ("progress", st.sampled_from([None, _leaf]))):
        choice = data.draw(st.sampled_from(["good", "good", "good", "omit", "nasty"]), label=key)
        if choice == "good":
            kwargs[key] = data.draw(good, label=key)
        elif choice == "nasty":
            kwargs[key] = data.draw(nasty, label=key)
            valid = False
        elif key in ("pid", "origin_ns", "prelude", "trailer"):
            valid = False
    if data.draw(st.booleans(), label="positional extras"):
        extra = data.draw(st.lists(nasty, max_size=2), label="extras")
        if extra:
            valid = False
        return (path, *extra), kwargs, valid
    return (path,), kwargs, valid


def _check_chrome_file(path, kwargs, count, events):
    assert count == len(events)
    opener = gzip.open if kwargs.get("compress") else open
    with opener(os.fsdecode(os.fspath(path)), "rt", encoding="utf-8") as fh:
        doc = json.load(fh)
    calls = [e for e in doc["traceEvents"] if e.get("cat") in ("python", "c")]
    assert len(calls) == count
    assert sorted(e["name"] for e in calls) == sorted(e.name for e in events)


LIFECYCLE_OPS = ("start", "stop", "getEvents", "get_events", "clear", "enter", "exit", "ignore",
                 "props", "write_chrome", "write_perfetto", "work", "thread", "other_tracer",
                 "setprofile", "noop_profile", "decorate", "orphan")


@fuzz(150)
@given(data=st.data(), options=st.fixed_dictionaries({}, optional={
    "buffer_size": st.sampled_from([1, 2, 3, 16, 256, 4096]), "c_calls": st.booleans(), "backend": backends}))
@guarded
def fuzz_tracer_lifecycle(data, options):
    tracer = frametrace.Tracer(**options)
    model = NEW
    actions = (tracer.clear, tracer.stop, tracer.start, tracer.getEvents, _young_gc,
               lambda: tracer._ignore(_leaf), lambda: _testing.set_noop_profile(False))
    ops = data.draw(st.lists(st.sampled_from(LIFECYCLE_OPS), min_size=1, max_size=10), label="ops")
    with scratch() as d:
        for op in ops:
            phase = observed_phase(tracer)
            if op not in ("write_chrome", "write_perfetto", "noop_profile"):
                assert phase == model, (op, phase, model)
            extra = data.draw(st.one_of(st.just([]), st.just([]), st.lists(nasty, min_size=1, max_size=2)),
                              label=f"{op} args")
            noargs = {"start": tracer.start, "stop": tracer.stop, "getEvents": tracer.getEvents,
                      "get_events": tracer.get_events, "clear": tracer.clear, "enter": tracer.__enter__}
            if op in noargs:
                out = attempt(noargs[op], *extra, allowed=(TypeError, RuntimeError))
                if extra:
                    assert not out.ok and type(out.exc) is TypeError, out
                    continue
                if op in ("start", "enter"):
                    assert out.ok == (phase == NEW), (out, phase)
                    if out.ok:
                        model = ACTIVE
                        assert op == "start" or out.value is tracer
                    else:
                        assert isinstance(out.exc, RuntimeError)
                elif op == "stop":
                    assert out.ok
                    if phase == ACTIVE:
                        model = STOPPED
                elif op in ("getEvents", "get_events"):
                    assert out.ok == (phase == STOPPED), (out, phase)
                    if out.ok:
                        assert_valid_trace(out.value, tracer.start_ns, tracer.stop_ns)
                elif op == "clear":
                    assert out.ok == (phase != ACTIVE), (out, phase)
                    if phase == STOPPED:
                        model = CLEARED
            elif op == "exit":
                out = attempt(tracer.__exit__, *extra)
                assert out.ok and out.value is False
                if phase == ACTIVE:
                    model = STOPPED
            elif op == "ignore":
                target = data.draw(st.one_of(st.sampled_from([_leaf, _leaf.__code__, _work]), nasty),
                                   label="ignore target")
                args = [target] + extra
                out = attempt(tracer._ignore, *args, allowed=(TypeError, RuntimeError))
                good = len(args) == 1 and (isinstance(target, type(_leaf)) or isinstance(target, type(_leaf.__code__)))
                if not good:
                    assert not out.ok and type(out.exc) is TypeError, out
                else:
                    assert out.ok == (phase != CLEARED), (out, phase)
            elif op == "props":
                check_properties(tracer, phase)
            elif op in ("write_chrome", "write_perfetto"):
                with contextlib.ExitStack() as stack:
                    sub = stack.enter_context(scratch())
                    if op == "write_chrome":
                        args, kwargs, valid = _chrome_args(data, sub, tracer)
                        out = attempt(tracer._write_chrome, *args, actions=actions,
                                      allowed=(TypeError, ValueError, RuntimeError, OSError, OverflowError),
                                      **kwargs)
                    else:
                        args, kwargs, valid = _perfetto_args(data, sub, tracer)
                        out = attempt(tracer._write_perfetto, *args, actions=actions,
                                      allowed=(TypeError, ValueError, RuntimeError, OSError, OverflowError), **kwargs)
                    if valid and not out.mutated:
                        assert out.ok == (phase == STOPPED), (out, phase)
                        if op == "write_chrome" and out.ok:
                            _check_chrome_file(args[0], kwargs, out.value, tracer.getEvents())
                        elif out.ok:
                            _check_perfetto_file(args[0], kwargs, out.value, tracer.getEvents())
                    if not out.ok and not out.mutated and phase == STOPPED and not out.user:
                        assert not valid or isinstance(out.exc, OSError), out
                model = observed_phase(tracer)
            elif op == "work":
                _work()
            elif op == "thread":
                _thread_work()
            elif op == "other_tracer":
                other = frametrace.Tracer(buffer_size=16)
                out = attempt(other.start, allowed=(RuntimeError,))
                assert out.ok == (phase != ACTIVE), (out, phase)
                other.stop()
                if out.ok:
                    assert_valid_trace(other.getEvents(), other.start_ns, other.stop_ns)
            elif op == "orphan":
                # A started tracer whose last reference goes: it stops itself.
                other = frametrace.Tracer(buffer_size=16)
                out = attempt(other.start, allowed=(RuntimeError,))
                assert out.ok == (phase != ACTIVE), (out, phase)
                ref = weakref.ref(other)
                del other, out  # (the exception's traceback refers to it)
                _young_gc()
                assert ref() is None
                if phase != ACTIVE:
                    assert_clean()
            elif op == "setprofile":
                # The setprofile backend refuses to start over another
                # profile function; the monitoring one runs beside it.
                sys.setprofile(lambda *a: None)
                try:
                    out = attempt(tracer.start, allowed=(RuntimeError,))
                    beside = tracer.backend == "monitoring" and phase == NEW
                    assert out.ok == beside, (out, tracer.backend, phase)
                    if out.ok:
                        model = ACTIVE
                finally:
                    sys.setprofile(None)
            elif op == "noop_profile":
                flag = data.draw(st.one_of(st.booleans(), nasty), label="noop flag")
                hooked = _hooked()
                # Its truth value decides; one that has none (NotImplemented
                # since 3.14) is a TypeError.
                allowed = (RuntimeError,) if _has_truth(flag) else (RuntimeError, TypeError)
                out = attempt(_testing.set_noop_profile, flag, allowed=allowed)
                if out.ok and hooked:
                    assert not flag or isinstance(flag, Evil), "replaced the tracer's hook"
                _testing.set_noop_profile(False)
                model = observed_phase(tracer)
            elif op == "decorate":
                target = data.draw(st.one_of(st.just(_work), nasty), label="decorated")
                out = attempt(tracer, target)
                assert out.ok == callable(target) or out.user, out
                if out.ok and target is _work:
                    call = attempt(out.value, allowed=(RuntimeError,))
                    assert call.ok == (phase != ACTIVE), (call, phase)
                    if call.ok:
                        used = out.value.tracer
                        assert_valid_trace(used.getEvents(), used.start_ns, used.stop_ns)
                        if used is tracer:
                            model = STOPPED
            if op in ("props", "work", "thread"):
                check_properties(tracer, observed_phase(tracer))
        tracer.stop()
        phase = observed_phase(tracer)
        check_properties(tracer, phase)
        if phase == STOPPED:
            events = tracer.getEvents()
            assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
            count = tracer._write_chrome(os.path.join(d, "final.json"), pid=1, origin_ns=0,
                                         prelude="", trailer='"a":1')
            assert count == len(events)
            tracer.clear()
        assert observed_phase(tracer) in (NEW, CLEARED)


# ---- tracer._write_perfetto, tracer._write_chrome (subprocess) ---------------------------------

PERFETTO_PACKET, PERFETTO_TRACK_EVENT, PERFETTO_SEQ = 1, 11, 10
span_tuples = st.tuples(maybe(nasty, strs), maybe(nasty, st.integers(0, 2**62)),
                        maybe(nasty, st.integers(0, 2**62)))


def _perfetto_args(data, d, tracer):
    spec = data.draw(maybe(path_specs, st.builds(lambda n: PathSpec("file", n, ".pftrace", "str"), names)),
                     label="path")
    path, expect = spec.make(d, makedirs=False)
    valid = expect == "ok"
    tids = [tid for tid, _ in tracer._threads] or [1]
    good_names = st.dictionaries(st.sampled_from(tids), strs, max_size=3)
    name_keys = st.one_of(st.sampled_from(tids), safe_keys,
                          st.builds(EvilEq, st.sampled_from(["raise", "ok"]), st.integers(0, 7), st.sampled_from(tids)),
                          st.builds(EvilHash, st.sampled_from(["raise", "ok"]), st.integers(0, 7), st.sampled_from(tids)))
    good_tracks = st.lists(st.tuples(strs, st.sampled_from([0, 1]),
                                     st.lists(st.tuples(strs, st.integers(0, 2**62), st.integers(0, 2**62)),
                                              max_size=3)), max_size=3)
    bad_tracks = st.one_of(nasty, st.lists(st.one_of(
        st.tuples(maybe(nasty, strs), maybe(nasty, small_ints), st.one_of(st.lists(span_tuples, max_size=3), nasty)),
        nasty), max_size=3))
    kwargs = {}
    for key, good, bad in (
            ("pid", st.integers(0, 2**31), nasty),
            ("process_name", strs, nasty),
            ("thread_names", good_names, st.one_of(nasty, st.dictionaries(name_keys, nasty, max_size=3))),
            ("tracks", good_tracks, bad_tracks),
            ("compress", st.booleans(), nasty),
            ("progress", st.sampled_from([None, _leaf]), nasty)):
        choice = data.draw(st.sampled_from(["good", "good", "good", "omit", "nasty"]), label=key)
        if choice == "good":
            kwargs[key] = data.draw(good, label=key)
        elif choice == "nasty":
            kwargs[key] = data.draw(bad, label=key)
            valid = False
        elif key not in ("compress", "progress"):
            valid = False
    return (path,), kwargs, valid


def _check_perfetto_file(path, kwargs, count, events, spans=True):
    assert count == len(events)
    opener = gzip.open if kwargs.get("compress") else open
    with opener(os.fsdecode(os.fspath(path)), "rb") as fh:
        packets = [message(p) for p in message(fh.read())[PERFETTO_PACKET]]
    begins = {}
    for pkt in packets:
        if PERFETTO_TRACK_EVENT in pkt:
            ev = message(pkt[PERFETTO_TRACK_EVENT][0])
            if ev.get(9) == [1]:
                seq = pkt[PERFETTO_SEQ][0]
                begins[seq] = begins.get(seq, 0) + 1
    if spans:
        expected = sum(len(t[2]) for t in kwargs.get("tracks", []))
        assert begins.get(1, 0) == expected, (begins, expected)
    assert sum(n for seq, n in begins.items() if seq != 1) == count, (begins, count)


@fuzz(150)
@given(data=st.data(), threads=st.booleans(), backend=backends)
@guarded
def fuzz_write_chrome_private(data, threads, backend):
    tracer = stopped_tracer(threads=threads, backend=backend)
    events = tracer.getEvents()
    # Clearing from arguments' protocol methods happens while they are
    # parsed, before the writer reads the tracer: allowed, safe.
    actions = (tracer.clear, tracer.stop, _young_gc, tracer.getEvents,
               lambda: tracer.start())
    if data.draw(st.booleans(), label="not stopped"):
        if data.draw(st.booleans(), label="new"):
            tracer = frametrace.Tracer()
        else:
            tracer.clear()
        events = None
    with scratch() as d:
        args, kwargs, valid = _chrome_args(data, d, tracer)
        out = attempt(tracer._write_chrome, *args, actions=actions,
                      allowed=(TypeError, ValueError, RuntimeError, OSError, OverflowError), **kwargs)
        if valid and not out.mutated:
            assert out.ok == (events is not None), out
            if out.ok:
                _check_chrome_file(args[0], kwargs, out.value, events)
        if out.ok and out.mutated:
            assert out.value == len(events)
    tracer.stop()


@fuzz(150)
@given(data=st.data(), threads=st.booleans(), backend=backends)
@guarded
def fuzz_write_perfetto_private(data, threads, backend):
    tracer = stopped_tracer(threads=threads, backend=backend)
    events = tracer.getEvents()
    if data.draw(st.booleans(), label="not stopped"):
        if data.draw(st.booleans(), label="new"):
            tracer = frametrace.Tracer()
        else:
            tracer.clear()
        events = None
    with scratch() as d:
        args, kwargs, valid = _perfetto_args(data, d, tracer)
        tracks, names = kwargs.get("tracks"), kwargs.get("thread_names")

        def clear_spans():
            for t in tracks:
                t[2].clear()

        # What the fuzzer's objects may do in the middle of the call: clear
        # the tracer, or the very lists and dict being read (an action's
        # exception is ignored).
        actions = (tracer.clear, tracer.stop, _young_gc, tracer.getEvents, lambda: tracks.clear(),
                   lambda: names.clear(), clear_spans, lambda: tracks.append(("late", 0, [("x", 1, 2)])))
        out = attempt(tracer._write_perfetto, *args, actions=actions,
                      allowed=(TypeError, ValueError, RuntimeError, OSError, OverflowError), **kwargs)
        if valid and not out.mutated:
            assert out.ok == (events is not None), out
        if out.ok and events is not None:
            # Mutated midway or not, what it wrote is what it says.
            _check_perfetto_file(args[0], kwargs, out.value, events, spans=not out.mutated)


# ---- _replay and _ticks_to_ns (subprocess) ----------------------------------------------------

KINDS = ("call", "return", "c_call", "c_return", "c_exception")
INT64 = (-(2**63), 2**63 - 1)
ts_values = st.one_of(st.integers(-5, 2000), st.sampled_from(EDGE_INTS), st.integers(*INT64))
func_ids = st.one_of(st.integers(0, 5), st.sampled_from((2**31 - 1, 2**31, 2**32, -1, 2**64)))
record = st.one_of(
    st.tuples(ts_values, st.sampled_from(KINDS), func_ids),
    st.tuples(maybe(nasty, ts_values), maybe(nasty, st.sampled_from(KINDS)), maybe(nasty, func_ids)),
    st.lists(st.integers(0, 5), max_size=3).map(tuple),
    nasty,
)


def _is_int64(v):
    return isinstance(v, int) and INT64[0] <= v <= INT64[1]


def _valid_records(records):
    if not isinstance(records, list):
        return False
    prev = None
    for rec in records:
        if type(rec) is not tuple or len(rec) != 3:
            return False
        ts, kind, func = rec
        if not (_is_int64(ts) and type(kind) is str and kind in KINDS
                and type(func) in (int, bool) and 0 <= func < 2**31):
            return False
        if prev is not None and ts < prev:
            return False
        prev = ts
    return True


def _valid_ids(ids):
    return ids is None or (type(ids) is list and all(type(v) in (int, bool) and 0 <= v < 2**31 for v in ids))


def check_replay(out, window_start, stop_ns):
    """tests/unit/test_replay.py's soundness check."""
    for i, ev in enumerate(out):
        func, kind, start, end, parent, depth, oas, oast = ev
        assert kind in ("py", "c")
        assert start <= end <= stop_ns, (i, ev)
        if window_start is not None:
            assert window_start <= start, (i, ev)
        if oast:
            assert end == stop_ns
        if parent == -1:
            assert depth == 0
        else:
            p = out[parent]
            assert parent < i
            assert p[2] <= start and end <= p[3], (p, ev)
            assert depth == p[5] + 1
    by_parent = {}
    for ev in out:
        by_parent.setdefault(ev[4], []).append(ev)
    for sibs in by_parent.values():
        sibs.sort(key=lambda e: (e[2], e[3]))
        for a, b in zip(sibs, sibs[1:]):
            assert a[3] <= b[2], (a, b)


@fuzz(250)
@given(records=st.one_of(st.lists(record, max_size=30), st.lists(st.tuples(st.integers(0, 1000).map(lambda t: t),
                                                                           st.sampled_from(KINDS), st.integers(0, 4)),
                                                                 max_size=40).map(lambda rs: sorted(rs)), nasty),
       kwargs=st.fixed_dictionaries({"base_ts": maybe(nasty, ts_values), "stop_ns": maybe(nasty, ts_values)}, optional={
           "capacity": maybe(nasty, st.sampled_from([None, 1, 2, 3, 5, 64, 2**24, 2**24 + 1, 0, -1, 2**64])),
           "base_stack": maybe(nasty, st.lists(func_ids, max_size=5)),
           "stop_stack": maybe(nasty, st.one_of(st.none(), st.lists(func_ids, max_size=6))),
           "bogus": nasty}),
       positional=st.lists(nasty, max_size=1), drop=st.sampled_from([None, None, None, "base_ts", "stop_ns"]))
@guarded
def fuzz_replay(records, kwargs, positional, drop):
    kwargs.pop(drop, None)
    args = [records] + positional
    actions = (_young_gc, lambda: records.clear(), lambda: records.extend([(0, "call", 1)] * 100))
    out = attempt(_testing.replay, *args, actions=actions,
                  allowed=(TypeError, ValueError, OverflowError), **kwargs)
    capacity = kwargs.get("capacity")
    valid = (len(args) == 1 and "bogus" not in kwargs and _valid_records(records)
             and _is_int64(kwargs.get("base_ts")) and _is_int64(kwargs.get("stop_ns"))
             # -2**63 is refused as "missing": see test_bug_replay_int64_min_is_missing.
             and INT64[0] not in (kwargs.get("base_ts"), kwargs.get("stop_ns"))
             and (capacity is None or (isinstance(capacity, int) and 1 <= capacity <= 2**24))
             and _valid_ids(kwargs.get("base_stack", [])) and _valid_ids(kwargs.get("stop_stack")))
    if valid:
        assert out.ok, out
    if not out.ok:
        return
    assert isinstance(out.value, list)
    base_ts, stop_ns = kwargs["base_ts"], kwargs["stop_ns"]
    # Sound for streams within the window (what a ring holds), with times
    # far enough from the int64 limits to take differences.
    times = [r[0] for r in records] + [base_ts, stop_ns]
    if (valid and base_ts <= stop_ns and all(base_ts <= r[0] for r in records)
            and max(times) - min(times) < 2**62):
        check_replay(out.value, base_ts if capacity is None else None, stop_ns)


anchor = st.one_of(st.tuples(ts_values, ts_values), st.tuples(maybe(nasty, ts_values), maybe(nasty, ts_values)),
                   st.lists(ts_values, max_size=3).map(tuple), nasty)


def _increasing_anchors(steps):
    out, t, ns = [], 0, 0
    for dt, dns in steps:
        t += dt
        ns += dns
        out.append((t, ns))
    return out


@fuzz(250)
@given(anchors=st.one_of(
           st.lists(st.tuples(st.integers(1, 10**6), st.integers(0, 10**9)), max_size=6).map(_increasing_anchors),
           st.lists(anchor, max_size=5), nasty),
       ticks=st.one_of(st.lists(st.one_of(ts_values, st.integers(-10, 10**7)), max_size=12),
                       st.lists(maybe(nasty, ts_values), max_size=6), nasty),
       extra=st.lists(nasty, max_size=1))
@guarded
def fuzz_ticks_to_ns(anchors, ticks, extra):
    # The fuzzer's objects may change the lists being read.
    actions = (_young_gc, lambda: anchors.clear(), lambda: ticks.clear(),
               lambda: ticks.extend(range(1000)), lambda: anchors.extend([(1, 1)] * 10))
    out = attempt(_testing.ticks_to_ns, anchors, ticks, *extra, actions=actions,
                  allowed=(TypeError, ValueError, OverflowError))
    valid = (not extra and type(anchors) is list and type(ticks) is list
             and all(type(a) is tuple and len(a) == 2 and all(_is_int64(v) for v in a) for a in anchors)
             and all(b[0] > a[0] and b[1] >= a[1] for a, b in zip(anchors, anchors[1:]))
             and all(_is_int64(t) for t in ticks))
    if valid:
        assert out.ok, out
    if not out.ok:
        return
    result = out.value
    assert type(result) is list and len(result) == len(ticks)
    assert all(type(v) is int for v in result)
    # Sane where the arithmetic cannot overflow (spans below 2**62).
    values = [v for a in anchors for v in a] + list(ticks)
    if not valid or (values and max(values) - min(values) >= 2**62):
        return
    if not anchors:
        assert result == list(ticks)
        return
    first, last = anchors[0], anchors[-1]
    for t, ns in zip(ticks, result):
        if t <= first[0]:
            assert ns == first[1], (t, ns)
        elif t <= last[0]:
            assert first[1] <= ns <= last[1], (t, ns)
    pairs = sorted((t, ns) for t, ns in zip(ticks, result) if t <= last[0])
    assert all(a[1] <= b[1] for a, b in zip(pairs, pairs[1:])), pairs
    at = dict(anchors)
    for t, ns in zip(ticks, result):
        if t in at:
            assert ns == at[t], (t, ns, at[t])


# ---- long exports: progress callbacks that misbehave (subprocess) --------------------------------


def fuzz_progress_callbacks():
    """Writers call progress(done, total) every 2**20 events: callbacks that
    raise, are not callable, write the tracer again, or clear it."""

    def record():
        with frametrace.Tracer(buffer_size=1 << 21, c_calls=False) as tracer:
            for i in range(1_048_600):
                _leaf(i)
        return tracer

    def raising(done, total):
        raise UserError("progress")

    # /dev/null: what is written does not matter here, and 1M events of
    # JSON are 130 MB.
    path = "/dev/null"
    with scratch():
        for write in (export.write_chrome, export.write_perfetto):
            tracer = record()
            out = attempt(write, path, tracer, progress=raising)
            assert out.user, out
            out = attempt(write, path, tracer, progress=5)
            assert not out.ok and isinstance(out.exc, TypeError), out
            counts = []
            if write is export.write_perfetto:
                def again(done, total):
                    counts.append(write(path, tracer))

                out = attempt(write, path, tracer, progress=again)
                assert out.ok and counts == [out.value], (out, counts)
                counts.append(out.value)
            # Clearing the tracer from the callback: the writers own what
            # they write by then, and write it all.
            out = attempt(write, path, tracer, allowed=(RuntimeError,),
                          progress=lambda done, total: tracer.clear())
            assert out.ok and out.value > 1 << 20, out
            assert not counts or out.value == counts[-1], (out, counts)
            assert observed_phase(tracer) == CLEARED
    assert_clean()


C_TARGETS = {
    "lifecycle": fuzz_tracer_lifecycle,
    "write_chrome": fuzz_write_chrome_private,
    "write_perfetto": fuzz_write_perfetto_private,
    "replay": fuzz_replay,
    "ticks_to_ns": fuzz_ticks_to_ns,
    "progress": fuzz_progress_callbacks,
}


def run_in_subprocess(code, timeout=600):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [TESTS_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("FRAMETRACE_FUZZ_INPROCESS", None)
    if "libasan" in env.get("LD_PRELOAD", ""):
        # A sanitized run: CPython's own leaks at a child's exit are not ours.
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], env=env, cwd=TESTS_DIR,
                          capture_output=True, text=True, timeout=timeout)


def c_targets_main(targets):
    """Runs the C targets one after the other (in the subprocess), each
    between markers."""
    import traceback

    for target in targets:
        print(f"\n@@start {target}", flush=True)
        try:
            C_TARGETS[target]()
        except BaseException:  # noqa: B036 - reported to the parent
            traceback.print_exc(file=sys.stdout)
            print(f"\n@@failed {target}", flush=True)
        else:
            print(f"\n@@done {target}", flush=True)


_C_RESULTS: dict = {}  # target -> (passed, output), from the shared subprocess


def _run_c_targets(targets):
    """One subprocess for the C targets still to run: its start-up (and
    Hypothesis's import) paid once.  A crash fails the target it happened
    in; the targets after it run again in a new subprocess when asked."""
    proc = run_in_subprocess(f"import test_fuzz_api as m; m.c_targets_main({targets!r})")
    sections = re.split(r"\n@@start (\w+)\n", "\n" + proc.stdout)
    for target, text in zip(sections[1::2], sections[2::2]):
        if f"@@done {target}" in text:
            _C_RESULTS[target] = (True, text)
        elif f"@@failed {target}" in text:
            _C_RESULTS[target] = (False, text)
        else:  # it died there
            _C_RESULTS[target] = (False, f"{text}\n--- exit status {proc.returncode}, stderr:\n"
                                         f"{proc.stderr[-20000:]}")


@pytest.mark.parametrize("target", sorted(C_TARGETS))
def test_fuzz_c_entry_points(target, request):
    if INPROCESS:
        C_TARGETS[target]()
        return
    if target not in _C_RESULTS:
        selected = [item.callspec.params["target"] for item in request.session.items
                    if getattr(item, "originalname", None) == "test_fuzz_c_entry_points"]
        todo = [t for t in selected if t not in _C_RESULTS]
        _run_c_targets(todo if target in todo else [target])
    passed, output = _C_RESULTS.pop(target, (False, "not run"))
    assert passed, f"fuzzing {target} in a subprocess:\n{output[-30000:]}"


# ---- schedules --------------------------------------------------------------------------------


def reference_action(step, wait, warmup, active, repeat, skip_first):
    """The schedule's step semantics, from its docstring."""
    if step < skip_first:
        return ProfilerAction.NONE
    step -= skip_first
    cycle = wait + warmup + active
    if repeat and step // cycle >= repeat:
        return ProfilerAction.NONE
    pos = step % cycle
    if pos < wait:
        return ProfilerAction.NONE
    if pos < wait + warmup:
        return ProfilerAction.WARMUP
    return ProfilerAction.RECORD if pos < cycle - 1 else ProfilerAction.RECORD_AND_SAVE


@fuzz(200)
@given(kwargs=st.dictionaries(st.sampled_from(["wait", "warmup", "active", "repeat", "skip_first", "bogus"]),
                              st.one_of(st.integers(-2, 6), nasty), max_size=6),
       positional=st.lists(st.integers(0, 3), max_size=2),
       steps=st.lists(st.one_of(st.integers(0, 60), ints, nasty), max_size=8),
       via=st.sampled_from(["schedule", "Schedule"]))
@guarded
def test_fuzz_schedule(kwargs, positional, steps, via):
    make = frametrace.schedule if via == "schedule" else Schedule
    out = attempt(make, *positional, **kwargs)
    required = {"wait", "warmup", "active"}
    fields = dict(zip(["wait", "warmup", "active", "repeat", "skip_first"], positional)) if via == "Schedule" else {}
    if via == "schedule" and positional or "bogus" in kwargs or set(fields) & set(kwargs):
        assert not out.ok and isinstance(out.exc, TypeError), out
        return
    fields.update(kwargs)
    if not required <= set(fields):
        assert not out.ok and isinstance(out.exc, TypeError), out
        return
    expected = None
    for name in ("wait", "warmup", "active", "repeat", "skip_first"):
        v = fields.get(name, 0)
        if isinstance(v, bool) or not isinstance(v, int):
            expected = TypeError
            break
        if v < (1 if name == "active" else 0):
            expected = ValueError
            break
    if expected is not None:
        assert not out.ok and (out.user or type(out.exc) is expected), (out, expected)
        return
    assert out.ok, out
    sched = out.value
    assert sched.cycle_length == fields["wait"] + fields["warmup"] + fields["active"]
    params = [fields.get(k, 0) for k in ("wait", "warmup", "active", "repeat", "skip_first")]
    for step in steps + [0, 1, 2, 59]:
        got = attempt(sched, step)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            assert not got.ok and (got.user or type(got.exc) is ValueError), (step, got)
        else:
            assert got.ok and got.value is reference_action(step, *params), (step, got)
    # A Schedule is frozen: assigning fails, and leaves it as it was.
    with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError
        sched.active = 0
    assert sched.active == fields["active"]


@fuzz(100)
@given(value=st.one_of(st.integers(-2, 5), nasty))
@guarded
def test_fuzz_profiler_action(value):
    out = attempt(ProfilerAction, value)
    if out.ok:
        assert out.value.value == value or out.value is value
    elif not out.user:
        assert isinstance(out.exc, ValueError) or isinstance(out.exc, TypeError), out


# ---- profiling sessions --------------------------------------------------------------------------

schedules = st.one_of(
    st.none(),
    st.builds(lambda w, u, a, r, s: frametrace.schedule(wait=w, warmup=u, active=a, repeat=r, skip_first=s),
              st.integers(0, 2), st.integers(0, 1), st.integers(1, 3), st.integers(0, 2), st.integers(0, 2)),
    st.lists(st.sampled_from(list(ProfilerAction)), min_size=1, max_size=6).map(
        lambda acts: (lambda step: acts[step % len(acts)])),
    st.builds(EvilCall, HOWS, st.integers(0, 7), st.sampled_from(list(ProfilerAction) + [None, 3, "RECORD"])),
    nasty,
)
SESSION_STEP_OPS = ("range", "stop", "global_step", "work", "thread", "nested", "decorated_range",
                    "bad_range")


def check_trace(trace):
    assert isinstance(trace, Trace)
    assert trace.session_start_ns <= trace.session_end_ns
    if trace.tracer is not None:
        assert trace.tracer_stop_ns == trace.tracer.stop_ns is not None
        assert trace.session_start_ns <= trace.tracer_start_ns <= trace.tracer_stop_ns <= trace.session_end_ns
        assert_valid_trace(trace.events, trace.tracer.start_ns, trace.tracer.stop_ns)
    else:
        assert trace.events == [] and trace.tracer_stop_ns is None
    for r in trace.ranges:
        assert trace.session_start_ns <= r.start_ns <= r.end_ns <= trace.session_end_ns, r
    for s in trace.steps:
        assert s.name == f"step#{s.step}" and s.start_ns <= s.end_ns, s
        assert trace.session_start_ns <= s.start_ns and s.end_ns <= trace.session_end_ns, s


@fuzz(150)
@given(data=st.data(),
       kwargs=st.fixed_dictionaries({}, optional={
           "schedule": schedules,
           "python_steps": st.one_of(st.none(), st.integers(-1, 4), nasty),
           "on_trace_ready": st.one_of(st.none(), st.just("collect"), st.just("save"),
                                       st.builds(EvilCall, HOWS, st.integers(0, 7)), nasty),
           "buffer_size": st.one_of(st.sampled_from([1, 16, 512]), st.sampled_from([0, -1, 2**28 + 1, 2**64]), nasty),
           "c_calls": st.one_of(st.booleans(), nasty),
           "backend": st.one_of(backends, nasty)}),
       ignore=st.one_of(st.none(), st.lists(st.one_of(st.sampled_from([_leaf, _leaf.__code__]), nasty), max_size=3)))
@guarded
def test_fuzz_profile_session(data, kwargs, ignore):
    traces = []
    nested = []
    with scratch() as d:
        if kwargs.get("on_trace_ready") == "collect":
            kwargs["on_trace_ready"] = traces.append
        elif kwargs.get("on_trace_ready") == "save":
            kwargs["on_trace_ready"] = frametrace.save(os.path.join(d, "saved"))
        if ignore is None:
            out = attempt(frametrace.profile, **kwargs)
        else:  # the Profile class, with its private _ignore (code kept out of the trace)
            out = attempt(frametrace.Profile, **kwargs, _ignore=ignore)
        expected = _expected_profile_error(kwargs)
        if expected is None and ignore is not None and not isinstance(ignore, (list, tuple)):
            expected = TypeError
        if expected is None:
            assert out.ok, out
        elif not out.user:
            assert not out.ok and type(out.exc) is expected, (out, expected)
        if not out.ok:
            return
        prof = out.value
        assert_clean()  # nothing happens before the session is entered

        def nested_session():
            other = frametrace.profile()
            other.__enter__()
            nested.append(other)  # entered: exited at the end

        actions = (prof.step, prof.stop, frametrace.step, lambda: prof.__exit__(None, None, None),
                   nested_session, _young_gc)
        ops = data.draw(st.lists(st.lists(st.sampled_from(SESSION_STEP_OPS), max_size=3), max_size=6),
                        label="steps")

        def run():
            with prof:
                for step_ops in ops:
                    for op in step_ops:
                        if op == "range":
                            with frametrace.range("r"):
                                _work()
                        elif op == "stop":
                            prof.stop()
                        elif op == "global_step":
                            frametrace.step()
                        elif op == "work":
                            _work()
                        elif op == "thread":
                            _thread_work()
                        elif op == "nested":
                            try:
                                nested_session()
                            except RuntimeError:
                                pass  # sessions do not nest
                            else:
                                assert prof._finished, "a session nested in a running one"
                        elif op == "decorated_range":
                            frametrace.range("deco")(_work)()
                        elif op == "bad_range":
                            try:
                                with frametrace.range("boom"):
                                    raise KeyError("inside a range")
                            except KeyError:
                                pass
                    prof.step()

        outcome = attempt(run, allowed=(TypeError, ValueError, RuntimeError, OSError), actions=actions)
        for other in reversed(nested):
            other.__exit__(None, None, None)
        # Whatever happened, the session is over and left nothing behind.
        assert frametrace.session._current is None
        assert_clean()
        if outcome.ok:
            assert attempt(prof.step, allowed=(RuntimeError,)).exc is not None
        again = attempt(prof.__enter__, allowed=(RuntimeError,))
        assert not again.ok and isinstance(again.exc, RuntimeError), again
        for trace in traces + ([prof.last_trace] if prof.last_trace is not None else []):
            check_trace(trace)
        if isinstance(kwargs.get("python_steps"), int) and kwargs["python_steps"] == 0:
            assert all(t.tracer is None for t in traces)
        saved = os.path.join(d, "saved")
        if os.path.isdir(saved):
            for name in os.listdir(saved):
                loaded = frametrace.load(os.path.join(saved, name))
                assert isinstance(loaded, Trace)


def _expected_profile_error(kwargs):
    sched = kwargs.get("schedule")
    if sched is not None and not callable(sched):
        return TypeError
    steps = kwargs.get("python_steps")
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, int):
            return TypeError
        if steps < 0:
            return ValueError
        if isinstance(sched, Schedule) and steps > sched.active:
            return ValueError
    ready = kwargs.get("on_trace_ready")
    if ready is not None and not callable(ready):
        return TypeError
    return _expected_tracer_error([], {k: kwargs[k] for k in ("buffer_size", "c_calls", "backend") if k in kwargs})


@fuzz(100)
@given(call=st.sampled_from(["step", "stop", "exit", "global_step"]), args=st.lists(nasty, max_size=2))
@guarded
def test_fuzz_session_methods_outside_a_session(call, args):
    prof = frametrace.profile()
    fn = {"step": prof.step, "stop": prof.stop, "exit": prof.__exit__, "global_step": frametrace.step}[call]
    out = attempt(fn, *args, allowed=(TypeError, RuntimeError))
    if call == "exit":  # never entered: refused, and the session stays whole
        assert not out.ok and isinstance(out.exc, RuntimeError), out
    elif args:
        assert not out.ok and isinstance(out.exc, TypeError), out
    elif call == "step":
        assert not out.ok and isinstance(out.exc, RuntimeError), out
    else:
        assert out.ok, out  # stop() and frametrace.step(): no-ops outside a session
    with prof:  # still usable
        prof.step()
    check_trace(prof.last_trace)


# ---- ranges and the range sink -------------------------------------------------------------------


@fuzz(200)
@given(name=st.one_of(strs, nasty), how=st.sampled_from(["range", "Range", "Range(name=)", "two", "none"]),
       sink=st.one_of(st.just("list"), st.none(), nasty), decorated=st.one_of(st.just(_work), nasty),
       exit_args=st.lists(nasty, max_size=3))
@guarded
def test_fuzz_range(name, how, sink, decorated, exit_args):
    make = {"range": lambda: frametrace.range(name), "Range": lambda: _tracer.Range(name),
            "Range(name=)": lambda: _tracer.Range(name=name), "two": lambda: frametrace.range(name, name),
            "none": lambda: frametrace.range()}[how]
    out = attempt(make)
    if how in ("two", "none"):
        assert not out.ok and isinstance(out.exc, TypeError), out
        return
    assert out.ok == isinstance(name, str), out
    if not out.ok:
        return
    r = out.value
    assert r.name is name
    marks = [] if sink == "list" else sink
    got = attempt(_tracer._set_range_sink, marks, allowed=(TypeError,))
    assert got.ok == (marks is None or type(marks) is list), got
    before = len(marks) if type(marks) is list else 0
    try:
        entered = attempt(r.__enter__)
        assert entered.ok and entered.value is r, entered
        left = attempt(r.__exit__, *exit_args)
        assert left.ok and left.value is False, left
        if got.ok and type(marks) is list:
            new = marks[before:]
            assert [(m[0], m[1]) for m in new] == [("B", name), ("E", name)]
            assert new[0][1] is name and new[0][2] == new[1][2] == threading.get_ident()
            assert new[0][3] <= new[1][3]
        if how == "range":
            deco = attempt(r, decorated)
            assert deco.ok == callable(decorated) or deco.user, deco
            if deco.ok and decorated is _work:
                assert deco.value() == _work()
    finally:
        _tracer._set_range_sink(None)


@fuzz(100)
@given(fn=st.sampled_from(["_clock_ns", "_set_noop_profile", "_set_range_sink", "Event"]),
       args=st.lists(st.one_of(nasty, st.lists(nasty, min_size=12, max_size=12)), max_size=2))
@guarded
def test_fuzz_module_functions(fn, args):
    if fn == "_clock_ns":
        before = _tracer._clock_ns()
        out = attempt(_tracer._clock_ns, *args)
        assert out.ok == (not args), out
        if out.ok:
            assert type(out.value) is int and out.value >= before
    elif fn == "_set_noop_profile":
        out = attempt(_testing.set_noop_profile, *args, allowed=(TypeError, RuntimeError))
        _testing.set_noop_profile(False)
        if len(args) != 1:
            assert not out.ok and isinstance(out.exc, TypeError), out
    elif fn == "_set_range_sink":
        out = attempt(_tracer._set_range_sink, *args)
        _tracer._set_range_sink(None)
        if len(args) != 1:
            assert not out.ok and isinstance(out.exc, TypeError), out
        else:
            assert out.ok == (args[0] is None or type(args[0]) is list), out
    else:
        out = attempt(Event, *args)
        if out.ok:
            ev = out.value
            assert isinstance(ev, Event) and len(ev) == 12
            # An event of anything: the reports and checks still only
            # raise what they document.
            _judge_reports([ev], "any")
            _judge_testing_helpers([ev], "any")


# ---- frametrace.testing ---------------------------------------------------------------------------

EVENT_FIELDS = Event.__match_args__


def _mutate_events(data, base):
    events = list(base)
    for _ in range(data.draw(st.integers(0, 3), label="mutations")):
        if not events:
            break
        i = data.draw(st.integers(0, len(events) - 1), label="event")
        field = data.draw(st.integers(0, 11), label="field")
        value = data.draw(st.one_of(nasty, small_ints, st.sampled_from([-1, 0, -2, 10**6, 2**63])), label="value")
        values = list(events[i])
        values[field] = value
        form = data.draw(st.sampled_from(["Event", "Event", "tuple", "list"]), label="form")
        events[i] = Event(values) if form == "Event" else tuple(values) if form == "tuple" else values
    return events


def events_arg(data):
    """events for reports/testing: the real ones ("real"), mutated ones, or
    anything ("any")."""
    kind = data.draw(st.sampled_from(["real", "real", "mutated", "mutated", "shuffled", "any", "trace"]),
                     label="events kind")
    base = list(cached_events())
    if kind == "real":
        return base, "real"
    if kind == "mutated":
        return _mutate_events(data, base), "any"
    if kind == "shuffled":
        return data.draw(st.permutations(base[:12]), label="shuffled"), "any"
    if kind == "trace":
        fields = data.draw(st.fixed_dictionaries({}, optional={
            "thread_names": nasty, "events": st.just(base)}), label="trace fields")
        return Trace(**fields), "any"
    return data.draw(st.one_of(nasty, st.lists(nasty, max_size=3),
                               st.lists(st.lists(nasty, min_size=12, max_size=12).map(Event), max_size=3)),
                     label="events"), "any"


def _judge_testing_helpers(events, kind, data=None):
    allowed = (TypeError, ValueError, AssertionError)
    draw = (lambda s, label: data.draw(s, label=label)) if data is not None else (lambda s, label: None)
    real = kind == "real"
    stop_ns = draw(st.one_of(st.just(cached_trace().tracer_stop_ns), ints, nasty), "stop_ns") \
        if data is not None else cached_trace().tracer_stop_ns
    out = attempt(testing.assert_no_events_after_stop, events, stop_ns, allowed=allowed)
    if real and stop_ns == cached_trace().tracer_stop_ns and type(stop_ns) is int:
        assert out.ok, out
    out = attempt(testing.assert_well_nested, events, allowed=allowed)
    if real:
        assert out.ok, out
    name = draw(st.one_of(st.sampled_from(sorted({e.name for e in cached_events()})), strs, nasty), "name") \
        if data is not None else "nope"
    times = draw(st.one_of(st.none(), st.integers(-1, 40), nasty), "times") if data is not None else None
    out = attempt(testing.assert_called, events, name, times, allowed=allowed)
    if real and isinstance(name, str) and type(name) is str and (times is None or type(times) is int and times >= 0):
        count = sum(e.name == name for e in events)
        assert out.ok == ((times is None and count > 0) or times == count), out
        if out.ok:
            assert len(out.value) == count
        else:
            assert isinstance(out.exc, AssertionError), out
    crit = {}
    if data is not None:
        crit = data.draw(st.fixed_dictionaries({}, optional={
            "name": st.one_of(st.none(), strs, nasty), "thread_id": st.one_of(st.none(), ints, nasty),
            "kind": st.one_of(st.none(), st.sampled_from(["py", "c", "x"]), nasty)}), label="find criteria")
    out = attempt(testing.find_events, events, allowed=allowed[:2], **crit)
    if real and out.ok:
        expect = [e for e in events if all(v is None or getattr(e, k) == v for k, v in crit.items())]
        assert out.value == expect
    index = draw(st.one_of(st.integers(-3, 40), nasty), "index") if data is not None else 0
    out = attempt(testing.describe_event, events, index, allowed=(TypeError, ValueError, IndexError))
    if real and type(index) is int and -len(events) <= index < len(events):
        assert out.ok and isinstance(out.value, str), out


@fuzz(200)
@given(data=st.data())
@guarded
def test_fuzz_testing_helpers(data):
    events, kind = events_arg(data)
    _judge_testing_helpers(events, kind, data)


# ---- frametrace.reports ---------------------------------------------------------------------------

REPORT_ERRORS = (TypeError, ValueError, OSError)


def _judge_reports(events, kind, data=None, d=None):
    def draw(strategy, default, label):
        return data.draw(strategy, label=label) if data is not None else default

    sort = draw(maybe(nasty, st.sampled_from(reports.SORT_KEYS)), "self", "sort")
    limit = draw(st.one_of(st.none(), st.integers(-2, 50), nasty), 30, "limit")
    per_thread = draw(st.one_of(st.booleans(), nasty), False, "per_thread")
    thread_names = draw(st.one_of(st.none(), st.dictionaries(safe_keys, strs, max_size=2), nasty), None,
                        "thread_names")
    out = attempt(reports.summary, events, sort=sort, limit=limit, per_thread=per_thread,
                  thread_names=thread_names, allowed=REPORT_ERRORS)
    valid_args = (isinstance(sort, str) and sort in reports.SORT_KEYS
                  and (limit is None or (type(limit) is int and limit >= 0))
                  and (thread_names is None or isinstance(thread_names, collections.abc.Mapping)))
    if kind == "real" and valid_args and not isinstance(per_thread, Evil):
        assert out.ok, out
    if out.ok:
        table = out.value
        text = attempt(str, table, allowed=(TypeError, ValueError))
        buf = io.StringIO()
        attempt(table.print, buf, allowed=(TypeError, ValueError))
        if kind == "real":
            assert text.ok, text
            if limit is None and not per_thread:
                assert sum(r.calls for r in table.rows) == len(events)
                assert math.isclose(sum(r.share for r in table.rows), 1.0, rel_tol=1e-6) or table.traced_ns == 0
            if limit is not None:
                assert len(table.rows) <= limit * max(1, len(table.threads))
    weight = draw(maybe(nasty, st.sampled_from(["self", "calls"])), "self", "weight")
    threads = draw(st.one_of(st.booleans(), nasty), True, "threads")
    out = attempt(reports.collapsed_stacks, events, weight=weight, threads=threads,
                  thread_names=thread_names, allowed=REPORT_ERRORS)
    if out.ok:
        assert all(isinstance(line, str) and re.fullmatch(r".+ [0-9]+", line, re.S) for line in out.value)
    label = draw(st.tuples(maybe(nasty, strs), maybe(nasty, strs), maybe(nasty, small_ints),
                           maybe(nasty, st.sampled_from(["py", "c"]))), ("len", "<built-in>", 0, "c"), "label")
    out = attempt(reports.pstats_label, *label, qualnames=draw(st.one_of(st.booleans(), nasty), False, "qualnames"),
                  allowed=REPORT_ERRORS)
    if out.ok:
        assert len(out.value) == 3
    if d is None:
        return
    for writer in (draw(st.sampled_from(["pstats", "collapsed", "svg"]), None, "writer"),):
        spec = draw(maybe(path_specs, st.builds(lambda n: PathSpec("file", n, "." + writer, "str"), names)),
                    None, f"{writer} path")
        path, expect = spec.make(d)
        if writer == "pstats":
            out = attempt(reports.write_pstats, events, path, allowed=REPORT_ERRORS,
                          qualnames=draw(st.one_of(st.booleans(), nasty), False, "qualnames"))
        elif writer == "collapsed":
            out = attempt(reports.write_collapsed, events, path, allowed=REPORT_ERRORS,
                          weight=weight, threads=threads, thread_names=thread_names)
        else:
            title = draw(maybe(nasty, strs), "frametrace", "title")
            width = draw(maybe(nasty, st.one_of(st.integers(90, 3000), st.sampled_from([100, 2**31, 10**6]))),
                         1200, "width")
            out = attempt(reports.write_flamegraph_svg, events, path, title=title, width=width,
                          thread_names=thread_names, allowed=REPORT_ERRORS)
        if expect == "fail":
            assert not out.ok, f"{writer} wrote to {path!r}"
        if out.ok:
            written = out.value
            assert written == os.fspath(path) or written == os.fsdecode(os.fspath(path))
            if kind == "real":
                if writer == "pstats":
                    stats = pstats.Stats(os.fsdecode(written))
                    assert sum(v[1] for v in stats.stats.values()) == len(events)
                elif writer == "svg":
                    ElementTree.parse(written)
        elif kind == "real" and expect == "ok" and writer == "pstats":
            assert out.user, out


@fuzz(150)
@given(data=st.data())
@guarded
def test_fuzz_reports(data):
    events, kind = events_arg(data)
    with scratch() as d:
        _judge_reports(events, kind, data, d)


# ---- Trace methods, frametrace.save ---------------------------------------------------------------


@fuzz(150)
@given(data=st.data(), method=st.sampled_from(["summary", "to_pstats", "to_collapsed", "to_flamegraph_svg",
                                                "to_chrome", "to_perfetto", "save", "frametrace.save"]))
@guarded
def test_fuzz_trace_methods(data, method):
    trace = cached_trace()
    allowed = (TypeError, ValueError, RuntimeError, OSError)
    if method == "summary":
        kwargs = data.draw(st.fixed_dictionaries({}, optional={
            "sort": maybe(nasty, st.sampled_from(reports.SORT_KEYS)), "limit": st.one_of(st.none(), st.integers(-1, 9), nasty),
            "per_thread": st.one_of(st.booleans(), nasty), "print": st.one_of(st.booleans(), nasty)}), label="kwargs")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            out = attempt(trace.summary, allowed=allowed, **kwargs)
        if out.ok:
            assert isinstance(out.value, reports.SummaryTable)
            assert (buf.getvalue() == "") == (not kwargs.get("print", True)) or isinstance(kwargs.get("print"), Evil)
        return
    with scratch() as d:
        spec = data.draw(maybe(path_specs, st.builds(lambda n, s: PathSpec("file", n, s, "str"), names,
                                                     st.sampled_from(SUFFIXES))), label="path")
        path, expect = spec.make(d)
        kwargs = {}
        if method == "to_chrome":
            kwargs = data.draw(st.fixed_dictionaries({}, optional={
                "process_name": st.one_of(st.none(), strs, nasty),
                "metadata": st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.one_of(ints, strs, floats), max_size=3), nasty)}),
                label="kwargs")
        elif method == "to_flamegraph_svg":
            kwargs = data.draw(st.fixed_dictionaries({}, optional={"title": maybe(nasty, strs)}), label="kwargs")
        elif method == "frametrace.save":
            kwargs = data.draw(st.fixed_dictionaries({}, optional={"compress": st.one_of(st.booleans(), nasty)}),
                               label="kwargs")
        if method == "frametrace.save":
            made = attempt(frametrace.save, path, **kwargs)
            if not made.ok:
                return
            out = attempt(made.value, trace, allowed=allowed)
        else:
            out = attempt(getattr(trace, method), path, allowed=allowed, **kwargs)
        if expect == "fail" and method != "frametrace.save":
            assert not out.ok, f"{method} wrote to {path!r}"
        if not out.ok:
            return
        written = out.value
        assert isinstance(written, (str, bytes))
        if method in ("to_chrome", "save", "frametrace.save") and isinstance(written, str) and not out.mutated:
            meta, pname = kwargs.get("metadata"), kwargs.get("process_name")
            if method != "to_chrome" or ((meta is None or (type(meta) is dict and all(type(k) is str for k in meta)))
                                         and (pname is None or type(pname) is str)):
                loaded = attempt(frametrace.load, written)
                assert loaded.ok, loaded
                assert [tuple(e)[:4] for e in loaded.value.events] == [tuple(e)[:4] for e in trace.events]
                assert [(r.name, r.start_ns, r.end_ns) for r in loaded.value.ranges] == \
                    [(r.name, r.start_ns, r.end_ns) for r in trace.ranges]


@fuzz(150)
@given(data=st.data(), fields=st.fixed_dictionaries({}, optional={
    f: nasty for f in ("events", "ranges", "steps", "session_start_ns", "session_end_ns", "tracer_start_ns",
                       "tracer_stop_ns", "dropped", "dropped_by_thread", "pid", "thread_names", "cycle",
                       "tracer")}),
       method=st.sampled_from(["save", "metadata", "summary", "to_pstats", "to_collapsed",
                               "to_flamegraph_svg", "to_chrome", "to_perfetto"]))
@guarded
def test_fuzz_trace_fields(data, fields, method):
    """A Trace built by hand from anything: its methods still raise only
    what they document."""
    out = attempt(Trace, **fields)
    assert out.ok, out  # a dataclass: takes anything
    trace = out.value
    allowed = (TypeError, ValueError, RuntimeError, OSError)
    with scratch() as d:
        if method == "metadata":
            out = attempt(trace.metadata, allowed=allowed)
        elif method == "summary":
            out = attempt(trace.summary, print=False, allowed=allowed)
        else:
            path, _ = data.draw(maybe(path_specs, st.builds(lambda n: PathSpec("file", n, ".out", "str"), names)),
                                label="path").make(d)
            out = attempt(getattr(trace, method), path, allowed=allowed)
        if out.ok and method == "save":
            loaded = attempt(frametrace.load, out.value, allowed=(ValueError,))
            if loaded.ok:
                assert isinstance(loaded.value, Trace)


@fuzz(50)
@given(method=st.sampled_from(["to_chrome", "to_perfetto"]), spec=path_specs)
@guarded
def test_fuzz_trace_without_tracer(method, spec):
    trace = Trace()  # python_steps=0: a trace without tracer records
    with scratch() as d:
        path, _ = spec.make(d)
        out = attempt(getattr(trace, method), path, allowed=(RuntimeError,))
        assert not out.ok and isinstance(out.exc, RuntimeError), out


# ---- export.write_chrome and export.write_perfetto -------------------------------------------------

records = st.one_of(
    st.builds(RangeRecord, strs, small_ints, st.integers(0, 2**40), st.integers(0, 2**40),
              st.booleans(), st.booleans()),
    st.builds(StepRecord, strs, st.integers(0, 10), st.integers(0, 2**40), st.integers(0, 2**40)),
    st.builds(RangeRecord, nasty, nasty, nasty, nasty, nasty, nasty),
    st.builds(StepRecord, nasty, nasty, nasty, nasty),
    st.builds(EvilRecord, HOWS, st.integers(0, 7), st.sampled_from([0, 1, "x", None, 2**64])),
    nasty,
)


@fuzz(150)
@given(data=st.data(), writer=st.sampled_from(["write_chrome", "write_perfetto"]),
       tracer_kind=st.sampled_from(["stopped", "stopped", "stopped", "threads", "new", "active", "cleared", "nasty"]))
@guarded
def test_fuzz_export_writers(data, writer, tracer_kind):
    if tracer_kind == "nasty":
        tracer = data.draw(nasty, label="tracer")
    else:
        tracer = stopped_tracer(threads=tracer_kind == "threads") if tracer_kind != "new" else frametrace.Tracer(buffer_size=64)
        if tracer_kind == "cleared":
            tracer.clear()
    events = tracer.getEvents() if tracer_kind in ("stopped", "threads") else None
    write = getattr(export, writer)
    ranges_of = (lambda rs: [r for r in rs if isinstance(r, RangeRecord)])
    with scratch() as d:
        spec = data.draw(maybe(path_specs, st.builds(lambda n, s: PathSpec("file", n, s, "str"), names,
                                                     st.sampled_from([".json", ".json.gz", ".pftrace", ""]))),
                         label="path")
        path, expect = spec.make(d)
        kwargs = data.draw(st.fixed_dictionaries({}, optional={
            "pid": st.one_of(st.none(), st.integers(0, 2**31), nasty),
            "process_name": st.one_of(st.none(), strs, nasty),
            "thread_names": st.one_of(st.none(), st.dictionaries(st.one_of(small_ints, safe_keys), strs, max_size=3), nasty),
            "ranges": st.one_of(st.lists(records, max_size=3), nasty),
            "steps": st.one_of(st.lists(records, max_size=3), nasty),
            "progress": st.one_of(st.none(), nasty)}), label="kwargs")
        if writer == "write_chrome":
            kwargs.update(data.draw(st.fixed_dictionaries({}, optional={
                "origin_ns": st.one_of(st.none(), st.integers(0, 2**62), nasty),
                "metadata": st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.one_of(ints, strs), max_size=3), nasty)}),
                label="chrome kwargs"))
        if tracer_kind == "active":
            tracer = frametrace.Tracer(buffer_size=64)
            tracer.start()
        actions = (_young_gc,) + ((tracer.stop, tracer.getEvents) if isinstance(tracer, _tracer.Tracer) else ())
        try:
            out = attempt(write, path, tracer, actions=actions, allowed=(TypeError, ValueError, RuntimeError, OSError), **kwargs)
        finally:
            if isinstance(tracer, _tracer.Tracer):
                tracer.stop()
        if events is None and not out.mutated:
            assert not out.ok, out
        if expect == "fail":
            assert not out.ok, f"{writer} wrote to {path!r}"
        valid = _valid_export_kwargs(kwargs)
        if valid and expect == "ok" and events is not None and not out.mutated:
            assert out.ok, out
        if not out.ok:
            return
        assert out.value == len(tracer.getEvents())
        if writer == "write_chrome" and valid and isinstance(path, (str, pathlib.Path)) and not out.mutated:
            loaded = attempt(frametrace.load, path)
            assert loaded.ok, loaded
            trace = loaded.value
            assert [tuple(e)[:4] + tuple(e)[6:8] for e in trace.events] == \
                [tuple(e)[:4] + tuple(e)[6:8] for e in tracer.getEvents()]
            # Ranges far (2**53 ns) from the origin lose nanoseconds: see
            # test_bug_write_chrome_ranges_far_from_origin_lose_ns.
            origin = kwargs.get("origin_ns") or tracer.start_ns
            given_ranges = ranges_of(kwargs.get("ranges", ()))
            if all(abs(t - origin) < 2**50 for r in given_ranges for t in (r.start_ns, r.end_ns)):
                assert sorted((r.name, r.start_ns, r.end_ns) for r in trace.ranges) == \
                    sorted((r.name, r.start_ns, r.end_ns) for r in given_ranges)


def _valid_export_kwargs(kwargs):
    def int_ok(v, lo=0, hi=2**62):
        return v is None or (type(v) is int and lo <= v <= hi)

    ranges, steps = kwargs.get("ranges", ()), kwargs.get("steps", ())
    names = kwargs.get("thread_names")
    meta = kwargs.get("metadata")
    return (int_ok(kwargs.get("pid"), 0, 2**31) and int_ok(kwargs.get("origin_ns"))
            and (kwargs.get("process_name") is None or type(kwargs["process_name"]) is str)
            and (names is None or (type(names) is dict and all(type(k) is int and type(v) is str for k, v in names.items())))
            and type(ranges) is list and all(type(r) is RangeRecord and type(r.name) is str and type(r.thread_id) is int
                                             and int_ok(r.start_ns) and int_ok(r.end_ns) and r.start_ns <= r.end_ns
                                             and type(r.open_at_start) is bool and type(r.open_at_end) is bool
                                             for r in ranges)
            and type(steps) is list and all(type(s) is StepRecord and type(s.name) is str and type(s.step) is int
                                            and int_ok(s.start_ns) and int_ok(s.end_ns) and s.start_ns <= s.end_ns
                                            for s in steps)
            and kwargs.get("progress") is None
            and (meta is None or type(meta) is dict))


# ---- loader.load, loader.merge, read_other_data ------------------------------------------------------

RAW_NUMBERS = ("1e1000000", "-1e1000000", "1e400", "1e-400", "1E+3", "-0", "0.0000001", "2.5", "1.5e3",
               "123456789012345678901234567890", "1" + "0" * 4400, "NaN", "Infinity", "-Infinity", "1e4000")
_RAW = "\x00raw:"
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.sampled_from(EDGE_INTS[:-1]), st.integers(-5, 5),
              st.sampled_from([1.5, -1.5, 1e-7, math.nan, math.inf, 1e300]), st.sampled_from(EDGE_STRS[:-1] + ("x" * 5000,)),
              texty, st.sampled_from(RAW_NUMBERS).map(lambda s: _RAW + s),
              st.sampled_from(["python", "c", "range", "step", "X", "M", "B", "x.py:1", "<built-in>:0",
                               "thread_name", "process_name", "frametrace"]),
              st.just("deep")),
    lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.sampled_from(
        ["ph", "cat", "pid", "tid", "ts", "dur", "name", "args", "file", "x", "format", "version"]), kids, max_size=3)),
    max_leaves=5)


def _dumps(value):
    """JSON text of value, raw number tokens spliced in, "deep" a nesting of 5000."""
    text = json.dumps(value, separators=(",", ":"))
    if "\\u0000raw:" in text:
        text = re.sub(r'"\\u0000raw:([^"]*)"', lambda m: m.group(1), text)
    if '"deep"' in text:
        text = text.replace('"deep"', "[" * 5000 + "]" * 5000)
    return text


def _chrome_text(doc):
    """A Chrome document laid out as write_chrome writes it (so the
    loader's fast path sees its events)."""
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return _dumps(doc)
    rest = {k: v for k, v in doc.items() if k != "traceEvents"}
    head = '{"traceEvents":[' + ",\n".join(_dumps(e) for e in events) + "]"
    tail = _dumps(rest)
    return head + ("," + tail[1:] if tail != "{}" else "}") + "\n"


@functools.lru_cache(maxsize=None)
def loader_bases():
    """Texts of files frametrace wrote: Chrome traces (a session's, a
    tracer's), the portable format, a merge."""
    trace = cached_trace()
    texts = {}
    with scratch() as d:
        trace.to_chrome(os.path.join(d, "session.json"), metadata={"k": [1, 2]})
        export.write_chrome(os.path.join(d, "plain.json"), stopped_tracer(threads=True))
        trace.save(os.path.join(d, "portable.json"))
        loader.merge([os.path.join(d, "session.json"), os.path.join(d, "plain.json")],
                     os.path.join(d, "merged.json"))
        for name in ("session", "plain", "portable", "merged"):
            with open(os.path.join(d, name + ".json"), encoding="utf-8") as fh:
                texts[name] = fh.read()
    return texts


def _walk_and_replace(data, doc):
    """doc with one node replaced, deleted, or a key added, the node chosen
    by a random walk."""
    path = []
    node = doc
    while isinstance(node, (dict, list)) and node and data.draw(st.integers(0, 3), label="deeper") > 0:
        key = data.draw(st.sampled_from(sorted(node, key=repr) if isinstance(node, dict) else range(len(node))),
                        label="key")
        path.append(key)
        node = node[key]
    if not path:
        return data.draw(json_values, label="document")
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    what = data.draw(st.sampled_from(["replace", "replace", "delete", "add"]), label="edit")
    if what == "replace":
        parent[path[-1]] = data.draw(json_values, label="value")
    elif what == "delete":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[data.draw(st.sampled_from(["ph", "ts", "dur", "pid", "tid", "x", "merged", "inputs"]), label="new key")] = \
            data.draw(json_values, label="value")
    else:
        parent.insert(path[-1], data.draw(json_values, label="value"))
    return doc


def mutated_file(data, d, name="input.json"):
    base = data.draw(st.sampled_from(sorted(loader_bases())), label="base")
    text = loader_bases()[base]
    for _ in range(data.draw(st.integers(0, 2), label="structural edits")):
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            break  # already not JSON (or too deep for json here)
        doc = _walk_and_replace(data, doc)
        text = _chrome_text(doc) if isinstance(doc, dict) and "traceEvents" in doc else _dumps(doc)
    for _ in range(data.draw(st.integers(0, 2), label="text edits")):
        pos = data.draw(st.integers(0, len(text)), label="at")
        edit = data.draw(st.sampled_from(["cut", "delete", "insert", "replace"]), label="text edit")
        chunk = data.draw(st.text(alphabet='{}[],:"\\0123456789.eE-+ntrufals \n\x00\ud800é', max_size=4),
                          label="chunk")
        if edit == "cut":
            text = text[:pos]
        elif edit == "delete":
            text = text[:pos] + text[pos + data.draw(st.integers(1, 40), label="n"):]
        elif edit == "insert":
            text = text[:pos] + chunk + text[pos:]
        else:
            text = text[:pos] + chunk + text[pos + len(chunk):]
    raw = text.encode("utf-8", "surrogatepass")
    if data.draw(st.booleans(), label="gzip"):
        raw = gzip.compress(raw, compresslevel=1)
        if data.draw(st.booleans(), label="corrupt gzip"):
            cut = data.draw(st.integers(0, len(raw)), label="gzip at")
            raw = raw[:cut] + data.draw(st.binary(max_size=3), label="gzip bytes")
    if data.draw(st.booleans(), label="latin-1"):
        raw = raw.replace(b"\xc3\xa9", b"\xe9")  # not UTF-8 any more
    path = os.path.join(d, name)
    with open(path, "wb") as fh:
        fh.write(raw)
    return path


def _check_loaded(trace):
    assert isinstance(trace, Trace)
    assert all(isinstance(e, Event) for e in trace.events)
    for r in trace.ranges:
        assert isinstance(r, RangeRecord)
    for s in trace.steps:
        assert isinstance(s, StepRecord)
    # A loaded trace works with the reports.
    attempt(reports.summary, trace, allowed=(TypeError, ValueError))


@fuzz(200)
@given(data=st.data())
@guarded
def test_fuzz_load(data):
    with scratch() as d:
        if data.draw(st.integers(0, 9), label="path or file") == 0:
            path, _ = data.draw(path_specs, label="path").make(d, readable=True)
        else:
            path = mutated_file(data, d)
        reader = data.draw(st.sampled_from(["load", "loader.load", "read_other_data", "read_json"]), label="reader")
        progress = data.draw(st.one_of(st.none(), st.just("record"), nasty), label="progress")
        seen = []
        kwargs = {} if reader in ("read_other_data", "read_json") else {
            "progress": (lambda done, total: seen.append((done, total))) if progress == "record" else progress}
        fn = {"load": frametrace.load, "loader.load": loader.load, "read_other_data": loader.read_other_data,
              "read_json": export.read_json}[reader]
        out = attempt(fn, path, allowed=(ValueError, OSError, TypeError), **kwargs)
        if not out.ok:
            if isinstance(out.exc, TypeError) and not out.user:
                # A TypeError only for a bad argument: the path or the callback.
                assert not isinstance(path, str) or progress not in (None, "record"), out
            return
        if reader in ("read_other_data", "read_json"):
            assert isinstance(out.value, dict)
        else:
            _check_loaded(out.value)
            assert all(0 <= done <= total for done, total in seen)


@fuzz(100)
@given(data=st.data())
@guarded
def test_fuzz_merge(data):
    with scratch() as d:
        inputs = []
        for i in range(data.draw(st.integers(0, 3), label="inputs")):
            kind = data.draw(st.sampled_from(["mutated", "mutated", "base", "path"]), label="input kind")
            if kind == "path":
                inputs.append(data.draw(path_specs, label="input path").make(d, readable=True)[0])
            elif kind == "base":
                name = data.draw(st.sampled_from(["session", "plain", "merged"]), label="base input")
                path = os.path.join(d, f"base{i}.json")
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(loader_bases()[name])
                inputs.append(path)
            else:
                inputs.append(mutated_file(data, d, f"in{i}.json"))
        form = data.draw(st.sampled_from(["list", "list", "tuple", "generator", "nasty"]), label="inputs form")
        arg = {"list": list, "tuple": tuple, "generator": iter}.get(form, lambda x: x)(inputs)
        if form == "nasty":
            arg = data.draw(nasty, label="inputs")
        spec = data.draw(maybe(path_specs, st.builds(lambda n, s: PathSpec("file", n, s, "str"), names,
                                                     st.sampled_from([".json", ".json.gz"]))), label="output")
        if spec.kind == "devfull":
            spec = PathSpec("dir")  # merge replaces its output: never a device
        output, expect = spec.make(d)
        if spec.kind in ("loop", "dangling"):
            expect = "any"  # merge renames its file over the link: fine
        out = attempt(loader.merge, arg, output, allowed=(ValueError, OSError, TypeError))
        if expect == "fail":
            assert not out.ok, f"merge wrote to {output!r}"
        if not out.ok:
            return
        assert isinstance(out.value, dict) and out.value.get("merged") is True
        loaded = attempt(frametrace.load, output, allowed=(ValueError, OSError, TypeError))
        assert loaded.ok, f"merge wrote {output!r}, which load() rejects: {loaded.exc!r}"
        assert isinstance(loaded.value, frametrace.MergedTrace)
        _check_loaded(loaded.value)
        where = os.fsdecode(os.fspath(output))
        prefix = os.path.basename(where) + ".tmp"
        assert not [name for name in os.listdir(os.path.dirname(where) or ".")
                    if name.startswith(prefix)], "merge left its temporary file"


# ---- regressions: the bugs this file found (fixed in da0930d), as minimal reproducers ---------------
# Run in a subprocess where they crashed the interpreter.


def _subprocess_ok(code):
    proc = run_in_subprocess(textwrap.dedent(code), timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        f"exit status {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


@pytest.mark.parametrize("call", ["replay", "ticks_to_ns", "perfetto_track", "perfetto_span"])
def test_regression_list_instead_of_tuple_is_systemerror(call, tmp_path):
    """Found by this file's fuzzing, fixed since: A record, anchor, track or span given as a
    list instead of a tuple reaches PyArg_ParseTuple (csrc/testing.c,
    csrc/export_perfetto.c), which raises SystemError('new style getargs format but argument
    is not a tuple') instead of TypeError"""
    tracer = stopped_tracer()
    path = str(tmp_path / "x.pftrace")
    calls = {
        "replay": lambda: _testing.replay([[0, "call", 1]], base_ts=0, stop_ns=10),
        "ticks_to_ns": lambda: _testing.ticks_to_ns([[0, 0]], [1]),
        "perfetto_track": lambda: tracer._write_perfetto(path, pid=1, process_name="p", thread_names={},
                                                         tracks=[["t", 0, []]]),
        "perfetto_span": lambda: tracer._write_perfetto(path, pid=1, process_name="p", thread_names={},
                                                        tracks=[("t", 0, [["s", 0, 1]])]),
    }
    with pytest.raises(TypeError):
        calls[call]()


@pytest.mark.parametrize("how", ["grow_ticks", "shrink_ticks", "shrink_anchors"])
def test_regression_ticks_to_ns_lists_mutated_while_parsed(how):
    """Found by this file's fuzzing, fixed since: _ticks_to_ns (csrc/testing.c) iterates its
    lists through borrowed items and sizes read once: an __index__ that grows the ticks list
    writes past the result list (heap-buffer-overflow, segfault); one that shrinks it
    returns a list holding NULLs; one that shrinks the anchors list reads freed memory
    (segfault)"""
    _subprocess_ok(f"""
        from frametrace import _tracer
        from frametrace import _testing
        how = {how!r}
        ticks, anchors = [], [(0, 0), (10, 10)]
        class Index:
            def __index__(self):
                if how == "grow_ticks":
                    ticks.extend(range(100_000))
                elif how == "shrink_ticks":
                    ticks.clear()
                else:
                    anchors.clear()
                return 1
        if how == "shrink_anchors":
            anchors[:] = [(0, 0), (Index(), 5), (20, 20), (30, 30)]
            ticks[:] = [1, 2]
        else:
            ticks[:] = [Index(), 1, 2, 3]
        try:
            result = _testing.ticks_to_ns(anchors, ticks)
        except (TypeError, ValueError):
            pass
        else:
            assert all(type(v) is int for v in result), repr(result)
        print("ok")
    """)


@pytest.mark.parametrize("which", ["tracks", "spans"])
def test_regression_write_perfetto_tracks_mutated_while_parsed(which):
    """Found by this file's fuzzing, fixed since: _write_perfetto (csrc/export_perfetto.c)
    parses tracks and spans through borrowed list items: a category's or a time's __index__
    that clears the list frees the tuple (and its name and spans) still being parsed and
    used (AddressSanitizer: heap-use-after-free in emit_spans, export_perfetto.c:300)"""
    _subprocess_ok(f"""
        import frametrace
        which = {which!r}
        tracer = frametrace.Tracer(buffer_size=64)
        with tracer:
            len([])
        freed, freed_while_parsed = [], []
        class Name(str):
            def __del__(self):
                freed.append(str(self))
        class Index:
            def __init__(self, lst):
                self.lst = lst
            def __index__(self):
                self.lst.clear()
                # The tuple being parsed (and its name) must still be alive.
                freed_while_parsed.extend(freed)
                return 1
        tracks = []
        if which == "tracks":
            tracks.append((Name("track"), Index(tracks), [(Name("span"), 0, 1)]))
        else:
            spans = []
            spans.append((Name("span"), Index(spans), 5))
            tracks.append((Name("track"), 0, spans))
        try:
            tracer._write_perfetto("/dev/null", pid=1, process_name="p", thread_names={{}}, tracks=tracks)
        except Exception as exc:
            error = exc
        else:
            error = None
        assert not freed_while_parsed, "freed while in use: " + repr(freed_while_parsed)
        assert error is None or isinstance(error, (TypeError, ValueError)), repr(error)
        print("ok")
    """)


@pytest.mark.parametrize("where", ["thread_names_key", "track_category"])
def test_regression_write_perfetto_tracer_cleared_midway(where):
    """Found by this file's fuzzing, fixed since: _write_perfetto (csrc/export_perfetto.c)
    reads the tracer again (threads, nthreads, funcs) after running user code (a
    thread_names key's __eq__, a track's __index__): a tracer.clear() there makes it use a
    freed ft_thread (AddressSanitizer: heap-use-after-free, export_perfetto.c:390) and
    return the event count while writing none of the events"""
    _subprocess_ok(f"""
        import frametrace, sys
        sys.path.insert(0, ".")
        from pbwire import message
        where = {where!r}
        tracer = frametrace.Tracer(buffer_size=64)
        with tracer:
            len([])
        n = len(tracer.getEvents())
        tid = tracer._threads[0][0]
        class Key:
            def __hash__(self):
                return hash(tid)
            def __eq__(self, other):
                tracer.clear()
                return False
        class Index:
            def __index__(self):
                tracer.clear()
                return 0
        names, tracks = {{}}, []
        if where == "thread_names_key":
            names[Key()] = "x"
        else:
            tracks.append(("t", Index(), []))
        import tempfile, os
        path = os.path.join(tempfile.mkdtemp(), "t.pftrace")
        try:
            count = tracer._write_perfetto(path, pid=1, process_name="p", thread_names=names, tracks=tracks)
        except RuntimeError:
            print("ok")  # refusing is fine
            raise SystemExit
        with open(path, "rb") as fh:
            packets = [message(p) for p in message(fh.read())[1]]
        slices = sum(1 for p in packets if 11 in p and message(p[11][0]).get(9) == [1])
        assert slices == count == n, (slices, count, n)
        print("ok")
    """)


def test_regression_ticks_to_ns_wide_anchors_wrap():
    """Found by this file's fuzzing, fixed since: ft_clock_to_ns (csrc/clock.c) takes the
    differences of anchors and ticks in int64: anchors spanning more than 2**63 wrap around
    and give ns outside the anchors' range (e.g. anchors (0, -2**63), (2, 2**63-1): tick 1
    gives -2**63)"""
    assert -1 <= _testing.ticks_to_ns([(0, -(2**63)), (2, 2**63 - 1)], [1])[0] <= 0
    assert _testing.ticks_to_ns([(-(2**63), 0), (2**63 - 1, 10)], [0]) == [5]


@pytest.mark.parametrize("writer", ["write_chrome", "write_perfetto"])
@pytest.mark.parametrize("bad", ["tracer", "ranges", "steps"])
def test_regression_export_unchecked_arguments_attributeerror(writer, bad, tmp_path):
    """Found by this file's fuzzing, fixed since: export.write_chrome/write_perfetto read
    attributes of their tracer, ranges and steps arguments unchecked: a non-Tracer tracer,
    or a range/step that is not a record, raises AttributeError (e.g. "'NoneType' object has
    no attribute 'stop_ns'") instead of TypeError"""
    kwargs = {"ranges": [1]} if bad == "ranges" else {"steps": [1]} if bad == "steps" else {}
    tracer = None if bad == "tracer" else stopped_tracer()
    with pytest.raises(TypeError):
        getattr(export, writer)(str(tmp_path / "x"), tracer, **kwargs)


@pytest.mark.parametrize("case", ["chrome_pid", "chrome_origin", "perfetto_pid", "perfetto_range",
                                  "perfetto_step", "perfetto_inf_key"])
def test_regression_export_int64_overflow(case, tmp_path):
    """Found by this file's fuzzing, fixed since: export.write_chrome/write_perfetto pass
    pid, origin_ns and range/step times on to the C writers' int64 conversions unchecked:
    2**64 raises OverflowError ("int too big to convert"), and write_perfetto's int() of a
    float('inf') thread_names key too, instead of ValueError/TypeError"""
    tracer = stopped_tracer()
    path = str(tmp_path / "x")
    call = {
        "chrome_pid": lambda: export.write_chrome(path, tracer, pid=2**64),
        "chrome_origin": lambda: export.write_chrome(path, tracer, origin_ns=2**64),
        "perfetto_pid": lambda: export.write_perfetto(path, tracer, pid=2**64),
        "perfetto_range": lambda: export.write_perfetto(path, tracer, ranges=[RangeRecord("r", 1, 2**64, 2**64)]),
        "perfetto_step": lambda: export.write_perfetto(path, tracer, steps=[StepRecord("s", 0, 0, 2**64)]),
        "perfetto_inf_key": lambda: export.write_perfetto(path, tracer, thread_names={math.inf: "x"}),
    }[case]
    with pytest.raises((TypeError, ValueError)):
        call()


@pytest.mark.parametrize("bad", ["process_name", "thread_names"])
def test_regression_write_chrome_accepts_nonstr_names(bad, tmp_path):
    """Found by this file's fuzzing, fixed since: export.write_chrome (and Trace.to_chrome)
    take any JSON value as process_name or thread_names' names (write_perfetto rejects them:
    TypeError) and write a file frametrace.load() then rejects ("traceEvents[0]
    (process_name).args.name: a string expected, not [null]")"""
    tracer = stopped_tracer()
    tid = tracer._threads[0][0]
    kwargs = {"process_name": [None]} if bad == "process_name" else {"thread_names": {tid: 5}}
    path = str(tmp_path / "t.json")
    try:
        export.write_chrome(path, tracer, **kwargs)
    except TypeError:
        return  # rejected, as write_perfetto does
    frametrace.load(path)


@pytest.mark.parametrize("call", ["write_pstats", "write_flamegraph_svg", "pstats_label", "assert_called"])
def test_regression_reports_nonstr_event_name_attributeerror(call, tmp_path):
    """Found by this file's fuzzing, fixed since: reports.write_pstats/pstats_label,
    reports.write_flamegraph_svg and testing.assert_called call str methods (rsplit,
    rpartition, encode) on event names without checking them: an Event whose name is not a
    str raises AttributeError instead of TypeError"""
    ev = list(cached_events()[0])
    ev[0] = 5
    events = [Event(ev)]
    fn = {
        "write_pstats": lambda: reports.write_pstats(events, str(tmp_path / "x.pstats")),
        "write_flamegraph_svg": lambda: reports.write_flamegraph_svg(events, str(tmp_path / "x.svg")),
        "pstats_label": lambda: reports.pstats_label(5, "<built-in>", 0, "c"),
        "assert_called": lambda: testing.assert_called(events, "absent"),
    }[call]
    with pytest.raises((TypeError, AssertionError)):
        fn()


@pytest.mark.parametrize("events", [[None], {}])
def test_regression_describe_event_unchecked_events(events):
    """Found by this file's fuzzing, fixed since: testing.describe_event(events, index) does
    not check its events (the other helpers do): describe_event([None], 0) raises
    AttributeError ("'NoneType' object has no attribute 'lineno'"), describe_event({}, 0)
    KeyError, instead of TypeError"""
    with pytest.raises(TypeError):
        testing.describe_event(events, 0)


@pytest.mark.parametrize("fields", [{"dropped_by_thread": 5}, {"thread_names": [1]}, {"ranges": ["r"]},
                                    {"steps": [1]}], ids=["dropped_by_thread", "thread_names", "ranges", "steps"])
def test_regression_trace_save_unchecked_fields(fields, tmp_path):
    """Found by this file's fuzzing, fixed since: Trace.save() (and Trace.metadata()) call
    .items() on dropped_by_thread/thread_names and ._asdict() on ranges/steps unchecked:
    Trace(dropped_by_thread=5).save(path) or Trace(ranges=['r']).save(path) raises
    AttributeError, not TypeError"""
    with pytest.raises(TypeError):
        Trace(**fields).save(str(tmp_path / "t.json"))


def _chrome_with(tmp_path, old, new):
    text = loader_bases()["plain"]
    assert old in text
    path = tmp_path / "t.json"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def test_regression_merge_writes_what_load_rejects(tmp_path):
    """Found by this file's fuzzing, fixed since: loader.merge() checks less than load(): an
    input whose process_name (or thread_name) metadata event has a non-str args.name, which
    load() rejects with a ValueError, is merged, and merge writes a file load() rejects too
    ("traceEvents[0] (process_name).args.name: a string expected, not null")"""
    path = _chrome_with(tmp_path, '"args":{"name":"python ', '"args":{"name":null,"x":"')
    with pytest.raises(ValueError):
        frametrace.load(path)
    try:
        loader.merge([str(path)], str(tmp_path / "merged.json"))
    except ValueError:
        return  # rejected, naming the input: fine
    frametrace.load(tmp_path / "merged.json")


@pytest.mark.parametrize("where", ["event", "metadata"])
def test_regression_load_deep_nesting_recursionerror(where, tmp_path):
    """Found by this file's fuzzing, fixed since: loader: deeply nested JSON (an event or
    otherData nested 5000 deep) raises RecursionError out of frametrace.load() (json's
    scanner), not the documented ValueError naming the file"""
    deep = "[" * 100_000 + "]" * 100_000
    old, new = ('"traceEvents":[', '"traceEvents":[' + deep + ",") if where == "event" else \
        ('"metadata":{}', '"metadata":{"x":' + deep + "}")
    with pytest.raises(ValueError):
        frametrace.load(_chrome_with(tmp_path, old, new))


def test_regression_load_huge_exponent_decimal_overflow(tmp_path):
    """Found by this file's fuzzing, fixed since: loader._ns: a ts or dur with a huge
    exponent (1e999999) overflows the decimal context when multiplied by 1000:
    frametrace.load() raises decimal.Overflow (an ArithmeticError), not ValueError"""
    with pytest.raises(ValueError):
        frametrace.load(_chrome_with(tmp_path, '"ts":0.000,', '"ts":1e999999,'))


def test_regression_load_huge_exponent_is_slow(tmp_path):
    """Found by this file's fuzzing, fixed since: loader._ns turns a number like 1e120000
    (us) into an exact int (int(Decimal): quadratic in the exponent): one 8-byte number
    makes frametrace.load() take ~0.7 s (1e999990: ~40 s), and then accept an event
    10**120003 ns long"""
    import time

    path = _chrome_with(tmp_path, '"dur":', '"dur":1e999990,"x":')  # was ~40 s
    start = time.perf_counter()
    try:
        frametrace.load(path)
    except ValueError:
        pass
    assert time.perf_counter() - start < 2


def test_read_json_deep_nesting_is_a_valueerror(tmp_path):
    """Found by this file's fuzzing, fixed since (65810b3): export.read_json() let
    json's RecursionError out for a portable-format file nested 100000 deep, not the
    ValueError it documents."""
    path = tmp_path / "t.json"
    path.write_text('{"format":"frametrace","version":1,"x":' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ValueError):
        export.read_json(path)


# ---- regressions: bugs this file found, fixed after 2832691 ---------------------------------------


@pytest.mark.parametrize("far", [2**53 + 1, 2**60 + 1])
def test_write_chrome_ranges_far_from_origin_keep_ns(far, tmp_path):
    """Found by this file's fuzzing, fixed since: export.write_chrome wrote ranges' and
    steps' ts/dur through a float (round(ns / 1000, 3)), unlike the events: a range at
    2**60+1 ns from origin_ns loaded back at 2**60+24.  Now exact decimal text."""
    tracer = stopped_tracer()
    tid = tracer._threads[0][0]
    path = str(tmp_path / "t.json")
    export.write_chrome(path, tracer, origin_ns=0,
                        ranges=[RangeRecord("r", tid, far, far + 2)],
                        steps=[StepRecord("step#0", 0, far, far + 6)])
    trace = frametrace.load(path)
    assert [(r.start_ns, r.end_ns) for r in trace.ranges] == [(far, far + 2)]
    assert [(s.start_ns, s.end_ns) for s in trace.steps] == [(far, far + 6)]


@pytest.mark.parametrize("which", ["base_ts", "stop_ns"])
def test_replay_takes_int64_min(which):
    """Found by this file's fuzzing, fixed since: _replay (csrc/testing.c) marked base_ts
    and stop_ns missing with LLONG_MIN, so -2**63, a valid int64, raised TypeError."""
    kwargs = {"base_ts": 0, "stop_ns": 0, which: -(2**63)}
    assert isinstance(_testing.replay([], **kwargs), list)


def test_merge_rejects_events_load_rejects(tmp_path):
    """Found by this file's fuzzing, fixed since: loader.merge() checked an input's events
    less than load() did: a step event without "dur" was merged into a file load()
    rejects.  Both now check events with loader._parse_event."""
    doc = json.loads(loader_bases()["session"])
    step = next(e for e in doc["traceEvents"] if e.get("cat") == "step")
    del step["dur"]
    path = tmp_path / "t.json"
    path.write_text(_chrome_text(doc), encoding="utf-8")
    with pytest.raises(ValueError):
        frametrace.load(path)
    try:
        loader.merge([str(path)], str(tmp_path / "merged.json"))
    except ValueError:
        return  # rejected, naming the input: fine
    frametrace.load(tmp_path / "merged.json")


def test_merge_deep_nesting_is_valueerror(tmp_path):
    """Found by this file's fuzzing, fixed since: loader.merge() turned RecursionError into
    ValueError only in its first pass: a top-level member nested 100000 deep raised
    RecursionError from its second.  Both passes and load() share _named_errors()."""
    path = _chrome_with(tmp_path, '"displayTimeUnit":"ns"',
                        '"displayTimeUnit":' + "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError):
        frametrace.load(path)
    with pytest.raises(ValueError):
        loader.merge([str(path)], str(tmp_path / "merged.json"))
