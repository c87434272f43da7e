"""Reading traces back: ``frametrace.loader.load(path)`` gives the
``frametrace.Trace`` of a file frametrace wrote (JSON, or gzip-compressed
whatever its name says).

    trace = frametrace.loader.load("train.json.gz")
    trace.summary()

- Chrome trace JSON (``write_chrome``, ``Trace.to_chrome``, ``frametrace
  run``) with its ``otherData.frametrace``: the complete events of ``cat``
  "python" and "c" become Events exact to the nanosecond (``ts`` and ``dur``
  read as decimals), "range" and "step" events ``RangeRecord``s and
  ``StepRecord``s, ``"M"`` thread_name events ``thread_names``.  ``depth``
  and ``parent`` are rebuilt from nesting per thread: the innermost event
  enclosing an event is its parent, but an event open at the tracer's start
  or stop only has a parent open there too (an event of zero duration
  starting where the previous one ended reads as its child).  A Chrome tid
  missing from ``otherData.frametrace.thread_ids`` keeps the tid as its
  ``thread_id``.
- A file ``frametrace merge`` wrote loads as a ``MergedTrace``: the events
  of every process, process after process, on the monotonic clock of the
  one that started first.  A thread id an earlier process has becomes the
  native thread id (else ``pid << 64 | ident``); thread names get
  `` [pid N]``.
- frametrace's portable JSON (``"format": "frametrace"``: ``Trace.save`` of
  earlier versions, the pytest plugin), whose events keep their depth and
  parent.

The file is streamed, its events never all parsed at once: each is read
with ``json.JSONDecoder.raw_decode`` and checked here, but those laid out as
write_chrome writes them, of a function and thread already checked, which
are taken in C (``_tracer._load_chrome_calls``; ``merge`` has its own).
Anything else raises ``ValueError`` naming the file and the problem; a
missing or unreadable file ``OSError``.
"""
from __future__ import annotations

import contextlib
import decimal
import gc
import gzip
import io
import itertools
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Union

from ._tracer import Event, ThreadInfo, _load_chrome_calls
from .export import EVENT_FIELDS, FORMAT, VERSION
from .session import RangeRecord, StepRecord, Trace

__all__ = ["MergedTrace", "load", "merge", "read_other_data"]

PathLike = Union[str, "os.PathLike[str]"]
Progress = Optional[Callable[[int, int], None]]
"""progress(done, total): bytes of the file read so far, of its size."""

_CHUNK = 1 << 20  # characters read at a time
_WS = re.compile(r"[ \t\n\r]*")
# Bounds on what a file that is no trace (a gzip bomb) can make us hold:
# the largest value read whole (all but the elements of the event arrays),
# the members of the top-level object, the digits of an integer (int64 and
# uint64 have at most 20).
_MAX_VALUE = 8 << 20
_MAX_MEMBERS = 1000
_MAX_DIGITS = 20
_OTHER_KEY = re.compile(r'"otherData"[ \t\n\r]*:[ \t\n\r]*')
# Top-level arrays of the portable format, checked element by element.
_PORTABLE_ARRAYS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "events": ("a list of 12 or 14 fields", lambda v: type(v) is list and len(v) in (12, 14)),
    "ranges": ("an object", lambda v: type(v) is dict),
    "steps": ("an object", lambda v: type(v) is dict),
}


@dataclass
class MergedTrace(Trace):
    """A trace of several processes (a file ``frametrace merge`` wrote)."""

    processes: list = field(default_factory=list)
    """One dict per process: pid (in this trace), original_pid, source (the
    file merged), process_name, thread_ids ({Chrome tid: thread_id in this
    trace}), shift_ns (added to the process's own monotonic times),
    tracer_start_ns and tracer_stop_ns (in this trace's times), dropped,
    metadata."""


class _Bad(ValueError):
    """A problem of the file, raised as ValueError(f"{path}: {problem}")."""


class _BigInt(Exception):
    """An integer too long to be any of a trace's (args: its digits)."""


def _parse_int(text: str) -> int:
    # Before int(): converting thousands of digits is quadratic.
    if len(text) - text.startswith("-") > _MAX_DIGITS:
        raise _BigInt(len(text) - text.startswith("-"))
    return int(text)


# ---- the JSON document, streamed ----------------------------------------------------


class _Reader:
    """A JSON file read in chunks: each value with raw_decode, the top-level
    object and its arrays around them one piece at a time."""

    def __init__(self, path: str, progress: Progress = None):
        self.raw = open(path, "rb")
        try:
            self.gzip = self.raw.read(2) == b"\x1f\x8b"
            self.raw.seek(0)
            stream: Any = gzip.GzipFile(fileobj=self.raw, mode="rb") if self.gzip else self.raw
            self.text = io.TextIOWrapper(stream, encoding="utf-8", newline="")
            self.size = os.fstat(self.raw.fileno()).st_size
        except BaseException:
            self.raw.close()
            raise
        self.progress = progress
        self.buf, self.pos, self.base, self.eof = "", 0, 0, False  # base: characters before buf
        self.decoder = json.JSONDecoder(parse_float=decimal.Decimal, parse_int=_parse_int)

    def __enter__(self) -> "_Reader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.text.close()
        self.raw.close()

    def fill(self, size: int = _CHUNK) -> None:
        try:
            chunk = self.text.read(size)
        except UnicodeDecodeError as exc:
            raise _Bad(f"not UTF-8 text ({exc.reason})") from None
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise _Bad(f"truncated or corrupted gzip data ({exc})") from None
        except OSError as exc:
            if not self.gzip:
                raise
            raise _Bad(f"corrupted gzip data ({exc})") from None
        self.eof = not chunk
        self.base += self.pos
        self.buf, self.pos = self.buf[self.pos:] + chunk, 0
        if self.progress is not None:
            try:
                done = min(self.raw.tell(), self.size)
            except (OSError, ValueError):
                done = 0
            self.progress(done, self.size)

    def peek(self) -> str:
        """The next character after whitespace, "" at the end."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf) or self.eof:
                return self.buf[self.pos:self.pos + 1]
            self.fill()

    def where(self, at: Optional[int] = None) -> str:
        return f"character {self.base + (self.pos if at is None else at)}"

    def punct(self, chars: str, context: str) -> str:
        c = self.peek()
        if c == "":
            raise _Bad(f"not JSON: truncated at {self.where()} (the file ends in {context})")
        if c not in chars:
            raise _Bad(f"not JSON: expecting {' or '.join(map(repr, chars))} in {context} at "
                       f"{self.where()}, found {c!r}")
        self.pos += 1
        return c

    def value(self) -> Any:
        self.peek()
        size = _CHUNK
        while True:
            if len(self.buf) - self.pos < 4096 and not self.eof:
                self.fill()
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                problem, at = exc.msg, exc.pos
            except _BigInt as exc:
                raise _Bad(f"not a trace: an integer of {exc.args[0]} digits in the value at "
                           f"{self.where()}") from None
            else:
                if end - self.pos > _MAX_VALUE:
                    raise _Bad(f"not a trace: a JSON value of more than {_MAX_VALUE >> 20} MiB "
                               f"at {self.where()}")
                if end < len(self.buf) or self.eof:  # else a number may go on
                    self.pos = end
                    return value
                problem, at = "", len(self.buf)
            cut = problem.startswith("Unterminated string")
            if self.eof and (cut or len(self.buf) - at <= 8):  # in a cut literal or string
                raise _Bad(f"not JSON: truncated (the file ends in the middle of the document, "
                           f"at {self.where(len(self.buf))})")
            # An error well before the end of what was read is one more text
            # does not mend: said at once, whatever follows.
            if self.eof or (len(self.buf) - at > 64 and not cut):
                raise _Bad(f"not JSON: {problem} at {self.where(at)}")
            if len(self.buf) - self.pos > _MAX_VALUE:
                raise _Bad(f"not a trace: a JSON value of more than {_MAX_VALUE >> 20} MiB at "
                           f"{self.where()}")
            self.fill(size)  # twice as much each time: a long value is parsed again a few times
            size *= 2

    def members(self) -> Iterator[tuple[str, bool]]:
        """The keys of the top-level object, each with whether its value is
        an array: the caller reads the value (value() or elements())."""
        self.fill()
        c = self.peek()
        if c == "":
            raise _Bad("empty file (not a trace)")
        if c != "{":
            value = self.value()  # raises if it is not JSON at all
            self.end()
            kind = {list: "an array", str: "a string", bool: "a boolean",
                    type(None): "null"}.get(type(value), "a number")
            hint = " (a Chrome trace in array form, not written by frametrace)" if kind == "an array" else ""
            raise _Bad(f"not a trace: the JSON document is {kind}, not an object{hint}")
        self.pos += 1
        if self.peek() == "}":
            self.pos += 1
        else:
            for n in itertools.count(1):
                if self.peek() != '"':
                    self.punct('"', "the top-level object")
                if n > _MAX_MEMBERS:
                    raise _Bad(f"not a trace: more than {_MAX_MEMBERS} members in the top-level "
                               f"object (at {self.where()})")
                key = self.value()
                self.punct(":", "the top-level object")
                yield key, self.peek() == "["
                if self.punct(",}", "the top-level object") == "}":
                    break
        self.end()

    def elements(self, context: str) -> Iterator[None]:
        """Once for each element of the array at the cursor, which the caller reads."""
        self.pos += 1  # "["
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield
            if self.punct(",]", context) == "]":
                return

    def end(self) -> None:
        if self.peek() != "":
            raise _Bad(f"not JSON: extra data after the document at {self.where()}")


class _Sink:
    """Where the elements of traceEvents go: on_event() for each, but those
    its C path (c_fast()) takes."""

    def c_fast(self) -> Optional[Callable[[str, int, int], tuple[int, int, int]]]:
        """c(buf, pos, stop): takes in C the events it can from pos (those
        starting before stop), and returns (where it stopped, and the start
        and end of that line's key text when only its function, thread or
        pid was new to it, else -1, -1); or None."""
        return None

    def on_event(self, ev: Any, key: Optional[str]) -> Any:
        """ev: the next element of traceEvents; key: its key text (see
        c_fast), which the C path takes from now on once ev is checked."""
        raise NotImplementedError


class _Checked(_Sink):
    """Checks each event as load() does (before its plan is known)."""

    def __init__(self) -> None:
        self.n = 0
        self.strings = _Strings()

    def on_event(self, ev: Any, key: Optional[str] = None) -> Any:
        self.n += 1
        return _parse_event(ev, self.n - 1, self.strings)


def _read(path: str, sink: Optional[_Sink], progress: Progress = None,
          skip_events: bool = False) -> tuple[dict[str, Any], bool]:
    """The top-level members of the document but traceEvents, whose elements
    go to sink (skip_events: only parsed), and whether traceEvents was an
    array."""
    top: dict[str, Any] = {}
    saw_events = False
    with _Reader(path, progress) as r:
        for key, array in r.members():
            if key == "traceEvents" and array:
                saw_events = True
                _events(r, None if skip_events else sink)
            elif key in _PORTABLE_ARRAYS and array:
                # Checked as they come: a file that is no trace is refused at its first wrong element.
                kind, ok = _PORTABLE_ARRAYS[key]
                top[key] = values = []
                for _ in r.elements(key):
                    at = r.where()
                    value = r.value()
                    if not ok(value):
                        raise _Bad(f"{key}[{len(values)}]: {kind} expected, not {_show(value)} (at {at})")
                    values.append(value)
            else:
                top[key] = r.value()
    return top, saw_events


def _events(r: _Reader, sink: Optional[_Sink]) -> None:
    c_fast = sink.c_fast() if sink is not None else None
    for _ in r.elements("traceEvents"):
        key = None
        if c_fast is not None:
            # Lines laid out as the C writer lays them out, each with its
            # separator, taken in C up to one it does not take (read below);
            # the 8 KiB left at the end of the buffer go on with more text.
            while True:
                r.peek()
                if len(r.buf) - r.pos < 8192 and not r.eof:
                    r.fill()
                stop = len(r.buf) if r.eof else len(r.buf) - 8192
                r.pos, start, end = c_fast(r.buf, r.pos, stop)
                if r.eof or len(r.buf) - r.pos >= 8192:
                    break
            if start >= 0:
                key = r.buf[start:end]
        value = r.value()
        if sink is not None:
            sink.on_event(value, key)


@contextlib.contextmanager
def _named_errors(path: str) -> Iterator[None]:
    """What is wrong with a file, as the ValueError naming it."""
    try:
        yield
    except _Bad as exc:
        raise ValueError(f"{path}: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to be a trace") from None
    except decimal.DecimalException as exc:
        raise ValueError(f"{path}: a number out of range ({type(exc).__name__})") from None


def _tail_other(path: str) -> Optional[dict]:
    """otherData.frametrace, unchecked, from before traceEvents (where
    write_chrome puts it) or the end of the file (where it put it before
    issue 18), the events not read; None when not there."""
    try:
        with _Reader(path) as r:
            for key, array in r.members():
                if key == "otherData":
                    return _frametrace_of(r.value())
                if array:
                    break
                r.value()
            else:
                return None
        if key != "traceEvents":
            return None  # no Chrome trace: its end is not looked for (a gzip bomb not inflated twice)
        keep = 1 << 20
        with open(path, "rb") as raw:
            if raw.read(2) == b"\x1f\x8b":
                raw.seek(0)
                tail = b""
                with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                    for chunk in iter(lambda: gz.read(1 << 22), b""):
                        tail = (tail + chunk)[-keep:]
            else:
                raw.seek(max(0, raw.seek(0, os.SEEK_END) - keep))
                tail = raw.read()
        text = tail.decode("utf-8", errors="replace")
        match = _OTHER_KEY.match(text, text.rfind('"otherData"'))
        if match is None or '"otherData"' not in text:
            return None
        other, end = json.JSONDecoder(parse_float=decimal.Decimal,
                                      parse_int=_parse_int).raw_decode(text, match.end())
        if not re.fullmatch(r"[ \t\n\r]*\}[ \t\n\r]*", text[end:]):
            return None
    except (OSError, EOFError, zlib.error, ValueError, _BigInt, RecursionError):
        return None
    return _frametrace_of(other)


def _frametrace_of(other: Any) -> Optional[dict]:
    ft = other.get("frametrace") if isinstance(other, dict) else None
    return ft if isinstance(ft, dict) else None


# ---- checked values -----------------------------------------------------------------

_THOUSAND = decimal.Decimal(1000)
_EXPECTED = {int: "an integer", str: "a string", bool: "true or false", dict: "an object",
             list: "a list"}
_REQUIRED: Any = object()


def _check(value: Any, kind: Any, what: str) -> Any:
    """value, if of type kind (exactly: JSON's types), or one of the tuple kind."""
    if type(kind) is tuple:
        if value not in kind:
            raise _Bad(f"{what}: {' or '.join(map(json.dumps, kind))} expected, not {_show(value)}")
    elif type(value) is not kind:
        raise _Bad(f"{what}: {_EXPECTED[kind]} expected, not {_show(value)}")
    return value


def _get(obj: dict, key: str, kind: Any, what: str, default: Any = _REQUIRED) -> Any:
    """obj[key] checked (kind None: any value), default when missing (else an error)."""
    if key not in obj:
        if default is _REQUIRED:
            raise _Bad(f"{what or 'the document'}: no {key!r}")
        return default
    return obj[key] if kind is None else _check(obj[key], kind, f"{what}.{key}" if what else key)


def _int(value: Any, what: str) -> int:
    return _check(value, int, what)


def _ns(value: Any, what: str) -> int:
    """Microseconds (a JSON number) -> exact nanoseconds."""
    if type(value) is int:
        return value * 1000
    if isinstance(value, decimal.Decimal):
        # int64 nanoseconds have 19 digits: a larger exponent is no time of
        # ours (and exact arithmetic on it would take long, or overflow).
        if not value.is_finite() or value.adjusted() > 18:
            raise _Bad(f"{what}: {_show(value)} us is out of range")
        ns = value * _THOUSAND
        if ns == ns.to_integral_value():
            return int(ns)
        raise _Bad(f"{what}: {value} us is not a whole number of nanoseconds")
    raise _Bad(f"{what}: a number of microseconds expected, not {_show(value)}")


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _by_thread(raw: Any, kind: type, what: str) -> dict:
    """{thread id: value} of a JSON object keyed by thread ids."""
    out = {}
    for k, v in _check(raw, dict, what).items():
        try:
            tid = int(k)
        except ValueError:
            raise _Bad(f"{what}: key {k!r} is not a thread id") from None
        out[tid] = _check(v, kind, f"{what}[{k!r}]")
    return out


# ---- otherData.frametrace -------------------------------------------------------------


@dataclass
class _Process:
    """What the Chrome file says about one process."""

    pid: int
    origin_ns: int  # ts 0, on the process's own monotonic clock (merged: see shift)
    start_ns: int
    stop_ns: int
    dropped: int
    dropped_by_thread: dict  # chrome tid -> events dropped
    thread_ids: dict  # chrome tid -> thread_id
    metadata: dict
    clock_anchor: Optional[dict]
    shift_ns: int = 0  # merged files: added to the process's own times
    original_pid: Optional[int] = None
    source: Optional[str] = None
    process_name: Optional[str] = None


def _process(other: dict, what: str) -> _Process:
    anchor = other.get("clock_anchor")
    if anchor is not None:
        for key in ("monotonic_ns", "wall_ns"):
            _get(_check(anchor, dict, f"{what}.clock_anchor"), key, int, f"{what}.clock_anchor")
    return _Process(
        *(_get(other, key, int, what) for key in ("pid", "origin_ns", "start_ns", "stop_ns")),
        dropped=_get(other, "dropped", int, what, 0),
        dropped_by_thread=_by_thread(other.get("dropped_by_thread") or {}, int,
                                     f"{what}.dropped_by_thread"),
        thread_ids=_by_thread(_get(other, "thread_ids", None, what), int, f"{what}.thread_ids"),
        metadata=_check(other.get("metadata") or {}, dict, f"{what}.metadata"),
        clock_anchor=anchor, shift_ns=_get(other, "shift_ns", int, what, 0),
        original_pid=other.get("original_pid"), source=other.get("source"),
        process_name=other.get("process_name"))


def _frametrace_other(top: dict, saw_events: bool) -> dict:
    """otherData.frametrace of a Chrome document, checked."""
    if not saw_events:
        if "traceEvents" in top:
            raise _Bad("traceEvents is not a list")
        raise _Bad("not a trace: no traceEvents (neither a Chrome trace nor frametrace's "
                   "portable format)")
    ft = _frametrace_of(top.get("otherData"))
    if ft is None:
        raise _Bad("a Chrome trace not written by frametrace (no otherData.frametrace)")
    if ft.get("format", FORMAT) != FORMAT or ft.get("version", VERSION) != VERSION:
        raise _Bad(f"unsupported otherData.frametrace format {ft.get('format')!r} "
                   f"version {ft.get('version')!r}")
    return ft


def _processes(ft: dict) -> tuple[list[_Process], bool]:
    """The processes of otherData.frametrace, and whether it is a merge."""
    if not ft.get("merged"):
        return [_process(ft, "otherData.frametrace")], False
    inputs = ft.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise _Bad("otherData.frametrace.inputs: a non-empty list expected in a merged trace")
    procs = [_process(_check(p, dict, f"otherData.frametrace.inputs[{i}]"),
                      f"otherData.frametrace.inputs[{i}]") for i, p in enumerate(inputs)]
    if len({p.pid for p in procs}) != len(procs):
        raise _Bad("otherData.frametrace.inputs: two processes with the same pid")
    _get(ft, "origin_ns", int, "otherData.frametrace")
    return procs, True


def read_other_data(path: PathLike) -> dict:
    """``otherData.frametrace`` of a Chrome trace frametrace wrote, read
    without keeping its events (ValueError if it is not one)."""
    path = os.fspath(path)
    with _named_errors(path):
        ft = _tail_other(path)
        if ft is not None:
            return _frametrace_other({"otherData": {"frametrace": ft}}, True)
        return _frametrace_other(*_read(path, None, skip_events=True))


# ---- Chrome -> Trace ---------------------------------------------------------------------


class _Plan:
    """How a Chrome file's events become Events, from its otherData.frametrace:
    the origin of its times and the thread id of each (pid, Chrome tid)."""

    def __init__(self, ft: dict):
        self.ft = ft
        self.procs, self.merged = _processes(ft)
        self.by_pid = {p.pid: p for p in self.procs}
        self.origin = (_get(ft, "origin_ns", int, "otherData.frametrace") if self.merged
                       else self.procs[0].origin_ns)
        # Thread ids: the file's, made distinct across the processes of a merge.
        self.tid_map: dict[tuple[int, int], int] = {}
        used: set[int] = set()
        for p in self.procs:
            for ctid, thread_id in p.thread_ids.items():
                if self.merged and thread_id in used:
                    # A forked process's main thread has its parent's ident.
                    thread_id = ctid if ctid not in used else p.pid << 64 | thread_id
                used.add(thread_id)
                p.thread_ids[ctid] = self.tid_map[(p.pid, ctid)] = thread_id
        # No event ends after its tracer's stop (the latched stop), in this trace's times.
        self.stop_of = {p.pid: p.stop_ns + p.shift_ns for p in self.procs}
        self.earliest_stop = min(self.stop_of.values())

    def pid(self, pid: int) -> int:
        """One process: its events' pid is not checked."""
        if not self.merged:
            return self.procs[0].pid
        if pid not in self.by_pid:
            raise _Bad(f"events of pid {pid}, none of the merged processes "
                       f"(otherData.frametrace.inputs)")
        return pid

    def check_end(self, pid: int, end: int, n: int) -> None:
        """Raises if traceEvents[n], of pid, ends after its tracer's stop."""
        stop = self.stop_of.get(pid if self.merged else self.procs[0].pid)
        if stop is not None and end > stop:
            raise _Bad(f"traceEvents[{n}]: ends {end - stop} ns after the tracer's stop "
                       f"(otherData.frametrace stop_ns): no event of frametrace does")

    def thread_id(self, pid: int, ctid: int) -> int:
        """A Chrome tid missing from thread_ids (a thread whose threading
        ident an earlier thread had, or with ranges and no Python events)
        keeps its Chrome tid as id."""
        return self.tid_map.get((self.pid(pid), ctid), ctid)


def _span(ev: dict, what: str) -> tuple[int, int, int, int]:
    """(pid, tid, ts, end) of a complete event, ns from the origin."""
    pid, tid = _get(ev, "pid", int, what), _get(ev, "tid", int, what)
    ts, dur = (_ns(_get(ev, k, None, what), f"{what}.{k}") for k in ("ts", "dur"))
    if ts < 0:
        raise _Bad(f"{what}.ts: negative ({ev['ts']}): before the trace's origin")
    if dur < 0:
        raise _Bad(f"{what}.dur: negative ({ev['dur']})")
    return pid, tid, ts, ts + dur


class _Strings:
    """Function names and "path:line" locations, checked once per distinct
    text, shared between events."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.files: dict[str, tuple[str, int]] = {}  # args.file -> (filename, lineno)

    def name(self, name: str) -> str:
        return self.names.setdefault(name, name)

    def loc(self, where: str, what: str) -> tuple[str, int]:
        loc = self.files.get(where)
        if loc is None:
            filename, colon, line = where.rpartition(":")
            if not colon or not line.isdigit() or not line.isascii():
                raise _Bad(f"{what}.args.file: \"path:line\" expected, not {_show(where)}")
            loc = self.files[where] = (filename, int(line))
        return loc


def _parse_event(ev: Any, n: int, strings: _Strings) -> Optional[tuple[str, tuple]]:
    """traceEvents[n] checked as load() reads it, whoever reads it (load and
    merge accept the same events): ("call", (kind, pid, tid, ts, end, name,
    (filename, lineno), open_at_start, open_at_stop, open_at_loss)), ("range",
    (name, pid, tid, ts, end, open_at_start, open_at_end)), ("step", (name,
    step, pid, ts, end)), ("thread_name", (pid, tid, name, thread_id,
    thread_serial, native_thread_id)), ("process_name", (pid, name)), or None:
    not frametrace's, left out.  Times in ns from the file's origin."""
    what = f"traceEvents[{n}]"
    ph = _check(ev, dict, what).get("ph")
    cat = ev.get("cat")
    if ph == "X" and cat in ("python", "c", "range", "step"):
        if cat != "python" and cat != "c":
            what += f" ({cat})"
        pid, tid, ts, end = _span(ev, what)
        name = _get(ev, "name", str, what, None)
        args = _check(ev.get("args") or {} if cat in ("range", "step") else ev.get("args"), dict,
                      f"{what}.args")

        def flag(key: str) -> bool:
            return _get(args, key, bool, f"{what}.args", False)
        if cat == "range":  # on a track of its own since issue 18: its thread's tid in args
            return "range", (_check(name, str, f"{what}.name"), pid,
                             _get(args, "thread_tid", int, f"{what}.args", tid), ts, end,
                             flag("open_at_start"), flag("open_at_end"))
        if cat == "step":
            name = _check(name, str, f"{what}.name")
            step = args.get("step")
            if step is None:
                step = int(name[5:]) if name.startswith("step#") and name[5:].isdigit() else 0
            return "step", (name, _check(step, int, f"{what}.args.step"), pid, ts, end)
        return "call", ("py" if cat == "python" else "c", pid, tid, ts, end,
                        strings.name(_check(name, str, f"{what}.name")),
                        strings.loc(_get(args, "file", str, f"{what}.args"), what),
                        flag("open_at_start"), flag("open_at_stop"), flag("open_at_loss"))
    args = ev.get("args")
    if ph == "M" and ev.get("name") in ("thread_name", "process_name") and isinstance(args, dict):
        what += f" ({ev['name']})"
        pid = _get(ev, "pid", int, what)
        if ev["name"] == "process_name":
            return "process_name", (pid, _get(args, "name", str, f"{what}.args"))
        return "thread_name", (pid, _get(ev, "tid", int, what), _get(args, "name", str, f"{what}.args"),
                               args.get("thread_id"), args.get("thread_serial"),
                               args.get("native_thread_id"))
    if not isinstance(ph, str):
        raise _Bad(f"{what}: no \"ph\" (event phase)")
    return None  # other phases and categories: not frametrace's


class _ChromeEvents(_Checked):
    """Collects a Chrome document's events while it streams past: Events,
    nested per thread."""

    use_c = True  # False: the Python path alone (the tests compare both)

    def __init__(self, plan: _Plan) -> None:
        super().__init__()
        self.plan = plan
        self.calls: list[Event] = []
        self.ranges: list[tuple] = []  # (name, pid, tid, ts, end, oas, oae)
        self.steps: list[tuple] = []  # (name, step, pid, ts, end)
        self.thread_names: dict[tuple[int, int], str] = {}  # (pid, tid) -> name
        self.process_names: dict[int, str] = {}
        # (pid, tid) -> ((thread_id, native_thread_id, serial), stack of its open events' indices),
        # as _load_chrome_calls takes them.
        self.threads: dict[tuple[int, int], tuple[tuple[int, int, int], list[int]]] = {}
        # (pid, tid) -> thread_serial: the one its thread_name event gives (write_chrome
        # writes each thread's), else (older files, a second process of a merge)
        # the next after the largest so far, in the order the file names or uses the threads.
        self.serials: dict[tuple[int, int], int] = {}
        # (pid, tid) -> the real native id, where the thread_name event gives it (a
        # synthetic Chrome tid stands for a native id an earlier thread had).
        self.natives: dict[tuple[int, int], int] = {}
        self.used_serials: set[int] = set()
        self.max_serial = 0
        # For the C path: the functions met ({py, c}: their JSON text from the
        # name's opening quote to args.file's closing quote -> (name, filename, lineno, kind)).
        self.infos: tuple[dict, dict] = ({}, {})

    def c_fast(self) -> Optional[Callable[[str, int, int], tuple[int, int, int]]]:
        if not self.use_c:
            return None
        calls, plan = self.calls, self.plan

        def c(buf: str, pos: int, stop: int) -> tuple[int, int, int]:
            before = len(calls)
            taken = _load_chrome_calls(buf, pos, stop, calls, *self.infos, self.threads,
                                       plan.origin, plan.earliest_stop)
            self.n += len(calls) - before
            return taken
        return c

    def _serial(self, key: tuple[int, int], wanted: Any = None) -> int:
        if key not in self.serials:
            if not (type(wanted) is int and wanted > 0 and wanted not in self.used_serials):
                wanted = self.max_serial + 1
            self.serials[key] = wanted
            self.used_serials.add(wanted)
            self.max_serial = max(self.max_serial, wanted)
        return self.serials[key]

    def on_event(self, ev: Any, key: Optional[str] = None) -> None:
        parsed = super().on_event(ev, key)
        if parsed is None:
            return
        what, data = parsed
        n = self.n - 1
        if what == "call":
            kind, pid, tid, ts, end, name, (filename, lineno), oas, oast, oal = data
            ts, end = ts + self.plan.origin, end + self.plan.origin
            if end > self.plan.earliest_stop:
                self.plan.check_end(pid, end, n)
            thread = self.threads.get((pid, tid))
            if thread is None:
                thread = self.threads[(pid, tid)] = (
                    (self.plan.thread_id(pid, tid), self.natives.get((pid, tid), tid),
                     self._serial((pid, tid))), [])
            # The innermost event still open that encloses this one (and, for
            # one open at the start, the stop or the loss of its thread, open
            # there too) is its parent.
            stack, calls = thread[1], self.calls
            while stack:
                top = calls[stack[-1]]
                if (top.start_ns <= ts and end <= top.end_ns and (top.open_at_start or not oas)
                        and (top.open_at_stop or not oast) and (top.open_at_loss or not oal)):
                    break
                stack.pop()
            calls.append(Event((name, filename, lineno, kind, thread[0][0], thread[0][1], ts, end,
                                len(stack), stack[-1] if stack else -1, oas, oast, thread[0][2],
                                oal)))
            stack.append(len(calls) - 1)
            if key is not None:  # the C path takes this function's next events
                self.infos[kind == "c"][key] = (name, filename, lineno, kind)
        elif what == "range":
            self.ranges.append(data)
        elif what == "step":
            self.steps.append(data)
        elif what == "thread_name":
            pid, tid, name, _thread_id, serial, native = data
            self.thread_names[(pid, tid)] = name
            if type(native) is int and native >= 0 and (pid, tid) not in self.threads:
                self.natives[(pid, tid)] = native
            self._serial((pid, tid), serial)
        else:
            self.process_names[data[0]] = data[1]


def _chrome_trace(col: _ChromeEvents) -> Trace:
    plan = col.plan
    procs, merged, origin = plan.procs, plan.merged, plan.origin
    ranges = [RangeRecord(name, plan.thread_id(pid, ctid), origin + ts, origin + end, oas, oae)
              for name, pid, ctid, ts, end, oas, oae in col.ranges]
    steps = [StepRecord(name, step, origin + ts, origin + end)
             for name, step, _pid, ts, end in col.steps]
    names: dict[Any, str] = {}
    for key, name in col.thread_names.items():
        if merged:
            name = f"{name} [pid {key[0]}]"
        t = plan.tid_map.get((key[0] if merged else procs[0].pid, key[1]))
        if t is not None:  # else the steps track, or a thread without events
            names[t] = name
    threads = []
    # Each thread its own, in serial order: those named and those with events.
    for key in sorted(col.threads.keys() | col.thread_names.keys(), key=col.serials.__getitem__):
        pid, ctid = key
        if (pid if merged else procs[0].pid, ctid) not in plan.tid_map and key not in col.threads:
            continue  # the steps track
        own = col.thread_names.get(key)
        threads.append(ThreadInfo((col.serials[key], plan.thread_id(pid, ctid),
                                   col.natives.get(key, ctid),
                                   f"{own} [pid {pid}]" if own is not None and merged else own,
                                   plan.by_pid.get(pid, procs[0]).dropped_by_thread.get(ctid))))
    dropped_by_thread: dict[int, int] = {}
    for p in procs:
        for ctid, n in p.dropped_by_thread.items():
            t = plan.thread_id(p.pid, ctid)
            dropped_by_thread[t] = dropped_by_thread.get(t, 0) + n
    common: dict[str, Any] = dict(events=col.calls, ranges=ranges, steps=steps, dropped_by_thread=dropped_by_thread,
                  pid=procs[0].pid, thread_names=names, threads=threads)
    if not merged:
        p = procs[0]
        md = p.metadata
        traced = md.get("python_traced", True) is not False  # python_steps=0: no Python
        return Trace(
            **common, session_start_ns=p.origin_ns,
            session_end_ns=_int(md.get("session_end_ns", p.stop_ns),
                                "otherData.frametrace.metadata.session_end_ns"),
            tracer_start_ns=p.start_ns if traced else None,
            tracer_stop_ns=p.stop_ns if traced else None, clock_anchor=p.clock_anchor,
            dropped=p.dropped, cycle=_int(md.get("cycle", 0), "otherData.frametrace.metadata.cycle"))
    processes = [{
        "pid": p.pid, "original_pid": p.original_pid if p.original_pid is not None else p.pid,
        "source": p.source, "process_name": col.process_names.get(p.pid, p.process_name),
        "thread_ids": dict(p.thread_ids), "shift_ns": p.shift_ns,
        "tracer_start_ns": p.start_ns + p.shift_ns, "tracer_stop_ns": p.stop_ns + p.shift_ns,
        "dropped": p.dropped,
        "dropped_by_thread": {p.thread_ids.get(k, k): n for k, n in p.dropped_by_thread.items()},
        "metadata": p.metadata,
    } for p in procs]
    ends = [p.metadata.get("session_end_ns", p.stop_ns) for p in procs]
    return MergedTrace(
        **common, processes=processes, session_start_ns=origin,
        session_end_ns=max((end if type(end) is int else p.stop_ns) + p.shift_ns
                           for end, p in zip(ends, procs)),
        tracer_start_ns=min(p["tracer_start_ns"] for p in processes),
        tracer_stop_ns=max(p["tracer_stop_ns"] for p in processes),
        dropped=sum(p.dropped for p in procs))


# ---- portable JSON -> Trace -------------------------------------------------------------

_PORTABLE_KINDS = (str, str, int, ("py", "c"), int, int, int, int, int, int, bool, bool, int, bool)


def _portable_trace(doc: dict) -> Trace:
    if doc.get("version") != VERSION:
        raise _Bad(f"unsupported frametrace trace version {doc.get('version')!r}")
    md = _check(doc.get("metadata") or {}, dict, "metadata")
    fields = _get(doc, "event_fields", None, "")
    # Files written before thread_serial and open_at_loss have the first 12.
    names = next((names for names in (EVENT_FIELDS, EVENT_FIELDS[:12])
                  if isinstance(fields, list) and sorted(map(str, fields)) == sorted(names)), None)
    if names is None:
        raise _Bad(f"event_fields: the {len(EVENT_FIELDS)} fields {', '.join(EVENT_FIELDS)} "
                   f"(or the first 12 of them) expected, not {_show(fields)}")
    order = [fields.index(f) for f in names]
    serials: dict[tuple[int, int], int] = {}  # old files: threads in order of appearance
    events = []
    for i, raw in enumerate(_get(doc, "events", list, "")):
        if type(raw) is not list or len(raw) != len(names):
            raise _Bad(f"events[{i}]: a list of {len(names)} fields expected, not {_show(raw)}")
        values = [_check(raw[j], kind, f"events[{i}].{f}")
                  for kind, j, f in zip(_PORTABLE_KINDS, order, names)]
        if not -1 <= values[9] < i:
            raise _Bad(f"events[{i}].parent: {values[9]} is not -1 or an earlier event")
        if len(names) == 12:
            values += [serials.setdefault((values[4], values[5]), len(serials) + 1), False]
        elif values[12] < 0:
            raise _Bad(f"events[{i}].thread_serial: {values[12]} is negative")
        events.append(Event(values))

    def records(cls: Any, what: str) -> list:
        out = []
        for i, raw in enumerate(doc.get(what) or []):
            try:
                rec = cls(**_check(raw, dict, f"{what}[{i}]"))
            except TypeError as exc:
                raise _Bad(f"{what}[{i}]: {exc}") from None
            for f, v in rec._asdict().items():
                _check(v, str if f == "name" else bool if f.startswith("open_") else int,
                       f"{what}[{i}].{f}")
            out.append(rec)
        return out

    def opt_int(*keys: str) -> Optional[int]:
        return next((_int(md[k], f"metadata.{k}") for k in keys if md.get(k) is not None), None)

    start, stop = opt_int("tracer_start_ns", "start_ns"), opt_int("tracer_stop_ns", "stop_ns")
    session_start, session_end = opt_int("session_start_ns"), opt_int("session_end_ns")
    if session_start is None:
        session_start = start if start is not None else min((e.start_ns for e in events), default=0)
    if session_end is None:
        session_end = stop if stop is not None else max((e.end_ns for e in events), default=0)
    return Trace(
        events=events, ranges=records(RangeRecord, "ranges"), steps=records(StepRecord, "steps"),
        session_start_ns=session_start, session_end_ns=session_end,
        tracer_start_ns=start, tracer_stop_ns=stop, dropped=opt_int("dropped") or 0,
        dropped_by_thread=_by_thread(md.get("dropped_by_thread") or {}, int,
                                     "metadata.dropped_by_thread"),
        pid=opt_int("pid") or 0, cycle=opt_int("cycle") or 0,
        thread_names=_by_thread(md.get("thread_names") or {}, str, "metadata.thread_names"),
        threads=_portable_threads(md, events))


def _portable_threads(md: dict, events: list) -> list:
    """Trace.threads of a portable file: its metadata.threads, or (older
    files) one per thread_serial of the events, named by thread_names."""
    raw = md.get("threads")
    if raw is None:
        names = md.get("thread_names")
        names = names if isinstance(names, dict) else {}
        first: dict[int, Any] = {}
        for e in events:
            first.setdefault(e.thread_serial, e)
        return [ThreadInfo((serial, e.thread_id, e.native_thread_id,
                            names.get(str(e.thread_id)), None))
                for serial, e in sorted(first.items())]
    if not isinstance(raw, list):
        raise _Bad(f"metadata.threads must be a list, not {type(raw).__name__}")
    out = []
    for i, t in enumerate(raw):
        what = f"metadata.threads[{i}]"
        if not isinstance(t, list) or len(t) != 5:
            raise _Bad(f"{what} must be [serial, thread_id, native_thread_id, name, dropped]")
        out.append(ThreadInfo(tuple(None if v is None and k >= 3 else
                                    _check(v, str if k == 3 else int, f"{what}[{k}]")
                                    for k, v in enumerate(t))))
    return out


# ---- load ---------------------------------------------------------------------------------


def load(path: PathLike, *, progress: Progress = None) -> Trace:
    """The ``frametrace.Trace`` of a trace file: Chrome trace JSON
    frametrace wrote (``write_chrome``, ``Trace.to_chrome``, ``frametrace
    run``, ``frametrace merge``: a ``MergedTrace``), or frametrace's
    portable JSON (``Trace.save``); ``.json`` or gzip-compressed.

    Raises ValueError naming the file and the problem for anything else
    (OSError when it cannot be opened).  progress, if given, is called as
    ``progress(done, total)`` now and then: bytes of the file read so far,
    of its size."""
    path = os.fspath(path)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of new objects, no cycles: no collections meanwhile
    try:
        with _named_errors(path):
            ft = _tail_other(path)
            if ft is None:
                # otherData.frametrace neither before the events nor at the end:
                # a first pass finds it (the events only checked), a second reads them.
                top, saw_events = _read(path, _Checked(), _half(progress, 0))
                if not saw_events and top.get("format") == FORMAT:
                    return _portable_trace(top)
                ft = _frametrace_other(top, saw_events)
                progress = _half(progress, 1)
            col = _ChromeEvents(_Plan(_frametrace_other({"otherData": {"frametrace": ft}}, True)))
            if _frametrace_other(*_read(path, col, progress)) != ft:
                raise _Bad("otherData.frametrace is not the one read before its events")
            return _chrome_trace(col)
    finally:
        if gc_was_enabled:
            gc.enable()


def _half(progress: Progress, k: int) -> Progress:
    """progress of the k-th of two passes over the file."""
    if progress is None:
        return None
    return lambda done, total: progress((k * total + done) // 2, total)  # type: ignore[misc]


from .merge import merge  # noqa: E402  (merge reads with this module)
