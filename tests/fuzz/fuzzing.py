"""The fuzzers' harness (tests/fuzz/test_*.py): Hypothesis fuzzing, with
bad input, of what users can call.

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

Targets that could crash the interpreter (the Tracer lifecycle, progress
callbacks of long exports) run in a subprocess (``in_subprocess``), so
that a crash is a failing test with its output, not a dead pytest; set
``FRAMETRACE_FUZZ_INPROCESS=1`` to run them in this process (to debug).

Bugs they find are kept as minimal tests in test_fuzz_regressions.py (with,
where a fuzz target must tolerate one meanwhile, its signature in
``KNOWN_BUGS``).

Examples per target (``fuzz(weight)``): weight/10 (at least 5) by default,
for CI; ``FRAMETRACE_FUZZ=long`` runs 10 x weight, not derandomized;
``FRAMETRACE_FUZZ=N`` runs N for every target.  See tests/README.md.
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
import threading
import xml.etree.ElementTree as ElementTree

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

import frametrace
from frametrace import Event, _testing, _tracer, export, loader, reports, testing
from frametrace.schedule import ProfilerAction
from frametrace._trace import Trace

# Every fuzz module's pytestmark.  One setup is enough here (the fuzzed code
# does not depend on it): the cycle counter, setprofile backend.
PYTESTMARK = [
    pytest.mark.usefixtures("clock"),
    pytest.mark.parametrize("clock", ["cycles"], indirect=True),
    pytest.mark.filterwarnings("ignore:Generating overly large repr"),
    pytest.mark.filterwarnings("ignore:NotImplemented should not be used in a boolean context"),
]

FUZZ_DIR = os.path.dirname(os.path.abspath(__file__))
TESTS_DIR = os.path.dirname(FUZZ_DIR)
_MODE = os.environ.get("FRAMETRACE_FUZZ", "ci")
if _MODE not in ("ci", "long") and not _MODE.isdigit():
    raise ValueError(f"FRAMETRACE_FUZZ must be 'ci', 'long' or a number of examples, not {_MODE!r}")
INPROCESS = bool(os.environ.get("FRAMETRACE_FUZZ_INPROCESS"))
HANG_SECONDS = 120  # one example taking this long is a hang: dump the stacks and exit


def fuzz(weight):
    """Hypothesis settings for a target worth `weight` examples: a tenth of
    it in CI (deterministic), ten times it with FRAMETRACE_FUZZ=long (random
    each run); no database, no explain phase (it traces with
    sys.settrace/sys.monitoring, which would collide with the tracers under
    test)."""
    if _MODE == "ci":
        examples = max(5, weight // 10)
    elif _MODE == "long":
        examples = weight * 10
    else:
        examples = int(_MODE)
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=_MODE != "long",
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


def _active_tracers():
    return [o for o in gc.get_objects() if isinstance(o, _tracer.Tracer) and o.active]


def reset():
    """Stops whatever an example left running."""
    for t in _active_tracers():
        t.stop()
    _testing.set_noop_profile(False)
    sys.setprofile(None)
    threading.setprofile(None)
    frametrace._running.forget_session()
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
    if frametrace._running.session is not None:
        problems.append(f"a session is still current: {frametrace._running.session!r}")
        frametrace._running.forget_session()
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
            "threads": nasty, "events": st.just(base)}), label="trace fields")
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


def run_in_subprocess(code, timeout=600):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [FUZZ_DIR, TESTS_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.pop("FRAMETRACE_FUZZ_INPROCESS", None)
    if "libasan" in env.get("LD_PRELOAD", ""):
        # A sanitized run: CPython's own leaks at a child's exit are not ours.
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    return subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], env=env, cwd=FUZZ_DIR,
                          capture_output=True, text=True, timeout=timeout)


def in_subprocess(target):
    """Runs the fuzz target (a function of a tests/fuzz module) in a fresh
    interpreter (in this one with FRAMETRACE_FUZZ_INPROCESS=1); fails with
    its output if it fails or dies."""
    if INPROCESS:
        target()
        return
    proc = run_in_subprocess(f"import {target.__module__} as m; m.{target.__name__}(); print('@@done')")
    assert proc.returncode == 0 and proc.stdout.rstrip().endswith("@@done"), (
        f"fuzzing {target.__name__} in a subprocess, exit status {proc.returncode}:\n"
        f"{proc.stdout[-30000:]}\n--- stderr:\n{proc.stderr[-20000:]}")


# ---- helpers the targets of more than one module share ---------------------------------------

NEW, ACTIVE, STOPPED, CLEARED = "new", "active", "stopped", "cleared"


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


RAW_NUMBERS = ("1e1000000", "-1e1000000", "1e400", "1e-400", "1E+3", "-0", "0.0000001", "2.5", "1.5e3",
               "123456789012345678901234567890", "1" + "0" * 4400, "NaN", "Infinity", "-Infinity", "1e4000")


_RAW = "\x00raw:"


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
    tracer's), Trace.save()'s, a merge."""
    trace = cached_trace()
    texts = {}
    with scratch() as d:
        trace.extra_metadata = {"k": [1, 2]}
        trace.to_chrome(os.path.join(d, "session.json"))
        trace.extra_metadata = {}
        export.write_chrome(stopped_tracer(threads=True), os.path.join(d, "plain.json"))
        trace.save(os.path.join(d, "saved.json"))
        loader.merge([os.path.join(d, "session.json"), os.path.join(d, "plain.json")],
                     os.path.join(d, "merged.json"))
        for name in ("session", "plain", "saved", "merged"):
            with open(os.path.join(d, name + ".json"), encoding="utf-8") as fh:
                texts[name] = fh.read()
    return texts
