"""Reading traces back: ``frametrace.loader.load(path)`` gives a
``frametrace.Trace`` from a file frametrace wrote.

    trace = frametrace.loader.load("train.json.gz")
    trace.summary()

Two formats are read (``.json`` or gzip-compressed, whatever the name says):

- Chrome trace event JSON, written by ``frametrace.export.write_chrome`` (and
  ``Trace.to_chrome``).  ``otherData.frametrace`` must be there: it holds the
  origin of the timestamps, the tracer's start and stop, the pid and the
  thread ids.  Each complete event (``"ph": "X"``) of ``cat`` "python" or "c"
  becomes a ``frametrace.Event``: times exact to the nanosecond (``ts`` and
  ``dur`` are read as decimals: ``ts * 1000 + origin_ns``), ``filename`` and
  ``lineno`` from ``args.file`` (split at its last colon), ``thread_id``
  through ``otherData.frametrace.thread_ids`` (a tid missing there keeps
  the tid as its thread_id: write_chrome keys thread_ids by thread ident, so
  a thread that got the ident of one that ended before it is missing),
  ``native_thread_id`` the Chrome ``tid``, the open flags from ``args``.
  ``depth`` and ``parent`` are not in the file: they are rebuilt from
  nesting, per thread (the events of a thread are written parents first, in
  call order, and a child lies within its parent; of the enclosing events
  the innermost is the parent, except that an event open at the tracer's
  start or stop only has a parent open there too.  The one ambiguity left:
  an event of zero duration starting exactly where the previous one ended
  is read as its child).  Events of ``cat`` "range" and "step" become ``RangeRecord``s
  and ``StepRecord``s; ``"M"`` thread_name events give ``thread_names``.
  The session's end is ``otherData.frametrace.metadata.session_end_ns`` when
  there (``Trace.to_chrome``), else the tracer's stop.  ``dropped_by_thread``
  comes from ``otherData.frametrace.dropped_by_thread`` (keyed by Chrome tid).
- frametrace's portable JSON (``"format": "frametrace"``: ``Trace.save``,
  the pytest plugin's failure traces; see ``frametrace.export``), whose
  events keep their own ``depth`` and ``parent``.

A file ``frametrace merge`` wrote (the traces of several processes on one
timeline) loads as a ``MergedTrace``: the events of every process in one
list, process after process (each process's events in its own order), with
times on the monotonic clock of the process that started first (the others
moved onto it through the wall-clock anchors each trace records).  A thread
keeps its ``threading.get_ident()`` as ``thread_id`` unless a thread listed
before it in the file has the same id (a forked process's main thread has
the ident of the thread that forked it); then its ``thread_id`` is its
native thread id (the Chrome ``tid``), or ``pid << 64 | ident`` when that
is taken too.
``thread_names`` get `` [pid N]`` appended; ``processes`` describes each
input (its pid, source file, ``thread_ids`` {Chrome tid: thread_id in this
trace}, the shift of its times, its metadata); ``pid`` is the first's.

``merge(inputs, output)`` writes such a file (the ``frametrace merge``
command).

The file is streamed: its events are never all parsed at once.  One parser
reads the events for load() and merge(): events laid out as write_chrome
writes them are taken in C (``_tracer._load_chrome_calls``, or merge's
``_merge_chrome_lines``), once their function and thread have been met and
checked here; every other event (the first of each function and thread,
other layouts) is read with ``json.JSONDecoder.raw_decode`` and checked
here, with the same result.  When otherData.frametrace is at the end of the
file (where write_chrome puts it), it is read first and the events are
made Events as they come; else they are kept as tuples until the end.

Anything else (not JSON, a truncated or corrupted gzip file, a document that
is not an object, no ``traceEvents``, a Chrome trace another tool wrote,
events with missing or mistyped fields) raises ``ValueError`` naming the
file and the problem.  A missing or unreadable file raises ``OSError``.
"""
from __future__ import annotations

import contextlib
import decimal
import gc
import gzip
import io
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterator, Optional, Union

from ._tracer import Event, _load_chrome_calls
from .export import EVENT_FIELDS, FORMAT, VERSION
from .session import RangeRecord, StepRecord, Trace

__all__ = ["MergedTrace", "load", "merge", "read_other_data"]

PathLike = Union[str, "os.PathLike[str]"]
Progress = Optional[Callable[[int, int], None]]
"""progress(done, total): bytes of the file read so far, of its size."""

_CHUNK = 1 << 20  # characters read at a time
_WS = re.compile(r"[ \t\n\r]*")
# The largest JSON value read whole (all but the elements of the event
# arrays, which are read one at a time): otherData, metadata.  Bounds the
# memory a file that is no trace (a gzip bomb) can take.
_MAX_VALUE = 8 << 20
_MAX_MEMBERS = 1000  # of the top-level object
_MAX_DIGITS = 20  # of an integer: int64 and uint64 have at most 20
# Top-level arrays of the portable format, read element by element: what
# each element must be (an event: a list of 12 or 14 fields).
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
    # Before int(): a number of thousands of digits is no time or id, and
    # converting it is quadratic (and refused past sys.get_int_max_str_digits()).
    digits = len(text) - text.startswith("-")
    if digits > _MAX_DIGITS:
        raise _BigInt(digits)
    return int(text)


# ---- reading JSON, streamed -------------------------------------------------------


def _open_text(path: str) -> tuple[IO[str], IO[bytes]]:
    """The file as text (gunzipped if it starts with gzip's magic number),
    and the raw file under it (for progress)."""
    raw = open(path, "rb")
    try:
        magic = raw.read(2)
        raw.seek(0)
        stream: IO[bytes] = raw
        if magic == b"\x1f\x8b":
            stream = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
        return io.TextIOWrapper(stream, encoding="utf-8", newline=""), raw
    except BaseException:
        raw.close()
        raise


class _Reader:
    """A JSON document read in chunks, its top-level object member by
    member, and the elements of its ``traceEvents`` array one at a time: a
    trace of millions of events is never held as one parsed document."""

    def __init__(self, path: str, progress: Progress = None):
        self.path = path
        self.text, self.raw = _open_text(path)
        self.gzip = not isinstance(getattr(self.text, "buffer", None), io.BufferedReader)
        self.size = os.fstat(self.raw.fileno()).st_size
        self.progress = progress
        self.buf = ""
        self.pos = 0
        self.base = 0  # characters consumed before buf
        self.eof = False
        self.decoder = json.JSONDecoder(parse_float=decimal.Decimal, parse_int=_parse_int)

    def close(self) -> None:
        self.text.close()
        self.raw.close()

    # -- the buffer --

    def _fill(self, size: int = _CHUNK) -> None:
        try:
            chunk = self.text.read(size)
        except UnicodeDecodeError as exc:
            raise _Bad(f"not UTF-8 text ({exc.reason})") from None
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise _Bad(f"truncated or corrupted gzip data ({exc})") from None
        except OSError as exc:
            if self.gzip:
                raise _Bad(f"corrupted gzip data ({exc})") from None
            raise
        if not chunk:
            self.eof = True
        self.base += self.pos
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0
        if self.progress is not None:
            try:
                done = self.raw.tell()
            except (OSError, ValueError):
                done = 0
            self.progress(min(done, self.size), self.size)

    def _skip_ws(self) -> str:
        """Skips whitespace; the next character, "" at the end."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if self.eof:
                return ""
            self._fill()

    def _where(self) -> str:
        return f"character {self.base + self.pos}"

    def _value(self) -> Any:
        """The JSON value at the current position (after whitespace)."""
        self._skip_ws()
        size = _CHUNK
        while True:
            if len(self.buf) - self.pos < 4096 and not self.eof:
                self._fill()
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                problem, at = exc.msg, exc.pos
            except _BigInt as exc:
                raise _Bad(f"not a trace: an integer of {exc.args[0]} digits in the value at "
                           f"{self._where()}") from None
            else:
                # A number (or literal) that reaches the end of the buffer may go on.
                if end - self.pos > _MAX_VALUE:
                    raise _Bad(f"not a trace: a JSON value of more than {_MAX_VALUE >> 20} MiB "
                               f"at {self._where()}")
                if end < len(self.buf) or self.eof:
                    self.pos = end
                    return value
                problem, at = "", len(self.buf)
            if self.eof:
                # An error at the very end (in a cut literal, escape or string).
                if len(self.buf) - at <= 8 or problem.startswith("Unterminated string"):
                    raise _Bad(f"not JSON: truncated (the file ends in the middle of the "
                               f"document, at character {self.base + len(self.buf)})")
                raise _Bad(f"not JSON: {problem} at character {self.base + at}")
            # An error well before the end of what was read is one more
            # text does not mend: said at once, whatever follows.
            if len(self.buf) - at > 64 and not problem.startswith("Unterminated string"):
                raise _Bad(f"not JSON: {problem} at character {self.base + at}")
            if len(self.buf) - self.pos > _MAX_VALUE:
                raise _Bad(f"not a trace: a JSON value of more than {_MAX_VALUE >> 20} MiB at "
                           f"{self._where()}")
            # Incomplete in the buffer: read more, twice as much each time, so
            # that a huge value is parsed again only a few times.
            self._fill(size)
            size *= 2

    def _expect(self, chars: str, context: str) -> str:
        c = self._skip_ws()
        if c == "":
            raise _Bad(f"not JSON: truncated at {self._where()} (the file ends in {context})")
        if c not in chars:
            raise _Bad(f"not JSON: expecting {' or '.join(repr(x) for x in chars)} in "
                       f"{context} at {self._where()}, found {c!r}")
        self.pos += 1
        return c

    # -- the document --

    def read(self, sink: Optional["_Sink"], skip_events: bool = False) -> tuple[dict[str, Any], bool]:
        """Reads the whole document: gives each element of traceEvents to
        sink (skip_events: only checks they parse), returns (the other
        members of the top-level object, whether traceEvents was there)."""
        self._fill()
        c = self._skip_ws()
        if c == "":
            raise _Bad("empty file (not a trace)")
        if c != "{":
            value = self._value()  # raises if it is not JSON at all
            self._end()
            kind = {list: "an array", str: "a string", bool: "a boolean"}.get(
                type(value), "a number" if isinstance(value, (int, decimal.Decimal)) else "null")
            hint = (" (a Chrome trace in array form, not written by frametrace)"
                    if isinstance(value, list) else "")
            raise _Bad(f"not a trace: the JSON document is {kind}, not an object{hint}")
        self.pos += 1
        top: dict[str, Any] = {}
        saw_events = False
        if self._skip_ws() == "}":
            self.pos += 1
        else:
            members = 0
            while True:
                if self._skip_ws() != '"':
                    self._expect('"', "the top-level object")
                members += 1
                if members > _MAX_MEMBERS:
                    raise _Bad(f"not a trace: more than {_MAX_MEMBERS} members in the top-level "
                               f"object (at {self._where()})")
                key = self._value()
                self._expect(":", "the top-level object")
                if key == "traceEvents" and self._skip_ws() == "[":
                    saw_events = True
                    self._events(None if skip_events else sink)
                elif key in _PORTABLE_ARRAYS and self._skip_ws() == "[":
                    top[key] = self._array(key, _PORTABLE_ARRAYS[key])
                else:
                    top[key] = self._value()
                if self._expect(",}", "the top-level object") == "}":
                    break
        self._end()
        return top, saw_events

    def _events(self, sink: Optional["_Sink"]) -> None:
        self.pos += 1  # "["
        if self._skip_ws() == "]":
            self.pos += 1
            return
        c_fast = sink.c_fast() if sink is not None else None
        while True:
            key = None
            if c_fast is not None:
                # The events laid out as frametrace's C writer lays them
                # out, each with its separator, taken in C up to a line it
                # does not take (read below).
                while True:
                    self._skip_ws()
                    if len(self.buf) - self.pos < 8192 and not self.eof:
                        self._fill()
                    stop = len(self.buf) if self.eof else len(self.buf) - 8192
                    self.pos, start, end = c_fast(self.buf, self.pos, stop)
                    if self.eof or len(self.buf) - self.pos >= 8192:
                        break
                if start >= 0:
                    key = self.buf[start:end]
            value = self._value()
            if sink is not None:
                sink.on_event(value, key)
            if self._expect(",]", "traceEvents") == "]":
                return

    def _array(self, key: str, kind: tuple[str, Callable[[Any], bool]]) -> list:
        """A top-level array of the portable format, element by element, each
        checked as it comes (a file that is no trace is refused at its first
        wrong element, whatever its size)."""
        self.pos += 1  # "["
        out: list = []
        if self._skip_ws() == "]":
            self.pos += 1
            return out
        while True:
            at = self._where()
            value = self._value()
            if not kind[1](value):
                raise _Bad(f"{key}[{len(out)}]: {kind[0]} expected, not {_show(value)} (at {at})")
            out.append(value)
            if self._expect(",]", key) == "]":
                return out

    def _end(self) -> None:
        if self._skip_ws() != "":
            raise _Bad(f"not JSON: extra data after the document at {self._where()}")


class _Sink:
    """Where the elements of traceEvents go: on_event() for each, but those
    its C path (c_fast()) takes."""

    def c_fast(self) -> Optional[Callable[[str, int, int], tuple[int, int, int]]]:
        """c(buf, pos, stop): takes in C the events it can from pos (those
        starting before stop), and returns (where it stopped, and the start
        and end of that line's key text when only its function, thread or
        pid was new to it, else -1, -1); or None."""
        return None

    def on_event(self, ev: Any, key: Optional[str]) -> None:
        """ev: traceEvents[self.n]; key: its key text (see c_fast), which
        the C path takes from now on once ev is checked."""
        raise NotImplementedError


@contextlib.contextmanager
def _named_errors(path: str) -> Iterator[None]:
    """What is wrong with a file, as the ValueError naming it that load()
    and merge() raise."""
    try:
        yield
    except _Bad as exc:
        raise ValueError(f"{path}: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to be a trace") from None
    except decimal.DecimalException as exc:
        raise ValueError(f"{path}: a number out of range ({type(exc).__name__})") from None


def _read(path: str, sink: Optional[_Sink], progress: Progress = None,
          skip_events: bool = False) -> tuple[dict[str, Any], bool]:
    reader = _Reader(path, progress)
    try:
        return reader.read(sink, skip_events)
    finally:
        reader.close()


# ---- fields -------------------------------------------------------------------------

_THOUSAND = decimal.Decimal(1000)


def _ns(value: Any, what: str) -> int:
    """Microseconds (a JSON number) -> exact nanoseconds."""
    if type(value) is int:
        return value * 1000
    if isinstance(value, decimal.Decimal):
        # int64 nanoseconds are 19 digits: a larger exponent is no time of
        # ours (and exact arithmetic on it would take long, or overflow).
        if not value.is_finite() or value.adjusted() > 18:
            raise _Bad(f"{what}: {_show(value)} us is out of range")
        ns = value * _THOUSAND
        if ns == ns.to_integral_value():
            return int(ns)
        raise _Bad(f"{what}: {value} us is not a whole number of nanoseconds")
    raise _Bad(f"{what}: a number of microseconds expected, not {_show(value)}")


def _int(value: Any, what: str) -> int:
    if type(value) is not int:
        raise _Bad(f"{what}: an integer expected, not {_show(value)}")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what}: a string expected, not {_show(value)}")
    return value


def _bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"{what}: true or false expected, not {_show(value)}")
    return value


def _dict(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise _Bad(f"{what}: an object expected, not {_show(value)}")
    return value


def _show(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _get(obj: dict, key: str, what: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise _Bad(f"{what}: no {key!r}") from None


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
    thread_ids = {}
    for k, v in _dict(_get(other, "thread_ids", what), f"{what}.thread_ids").items():
        try:
            tid = int(k)
        except ValueError:
            raise _Bad(f"{what}.thread_ids: key {k!r} is not a thread id") from None
        thread_ids[tid] = _int(v, f"{what}.thread_ids[{k!r}]")
    dropped_by_thread = {}
    for k, v in _dict(other.get("dropped_by_thread") or {}, f"{what}.dropped_by_thread").items():
        try:
            tid = int(k)
        except ValueError:
            raise _Bad(f"{what}.dropped_by_thread: key {k!r} is not a thread id") from None
        dropped_by_thread[tid] = _int(v, f"{what}.dropped_by_thread[{k!r}]")
    anchor = other.get("clock_anchor")
    if anchor is not None:
        anchor = _dict(anchor, f"{what}.clock_anchor")
        _int(_get(anchor, "monotonic_ns", f"{what}.clock_anchor"), f"{what}.clock_anchor.monotonic_ns")
        _int(_get(anchor, "wall_ns", f"{what}.clock_anchor"), f"{what}.clock_anchor.wall_ns")
    return _Process(
        pid=_int(_get(other, "pid", what), f"{what}.pid"),
        origin_ns=_int(_get(other, "origin_ns", what), f"{what}.origin_ns"),
        start_ns=_int(_get(other, "start_ns", what), f"{what}.start_ns"),
        stop_ns=_int(_get(other, "stop_ns", what), f"{what}.stop_ns"),
        dropped=_int(other.get("dropped", 0), f"{what}.dropped"),
        dropped_by_thread=dropped_by_thread,
        thread_ids=thread_ids,
        metadata=_dict(other.get("metadata") or {}, f"{what}.metadata"),
        clock_anchor=anchor,
        shift_ns=_int(other.get("shift_ns", 0), f"{what}.shift_ns"),
        original_pid=other.get("original_pid"),
        source=other.get("source"),
        process_name=other.get("process_name"),
    )


def _frametrace_other(top: dict, saw_events: bool) -> dict:
    """otherData.frametrace of a Chrome document, checked."""
    if not saw_events:
        if "traceEvents" in top:
            raise _Bad("traceEvents is not a list")
        raise _Bad("not a trace: no traceEvents (neither a Chrome trace nor frametrace's "
                   "portable format)")
    other = top.get("otherData")
    if not isinstance(other, dict) or not isinstance(other.get("frametrace"), dict):
        raise _Bad("a Chrome trace not written by frametrace (no otherData.frametrace)")
    ft = other["frametrace"]
    if ft.get("format", FORMAT) != FORMAT or ft.get("version", VERSION) != VERSION:
        raise _Bad(f"unsupported otherData.frametrace format {ft.get('format')!r} "
                   f"version {ft.get('version')!r}")
    return ft


def _processes(ft: dict) -> tuple[list[_Process], bool]:
    """The processes of otherData.frametrace, and whether it is a merge."""
    if ft.get("merged"):
        inputs = ft.get("inputs")
        if not isinstance(inputs, list) or not inputs:
            raise _Bad("otherData.frametrace.inputs: a non-empty list expected in a merged trace")
        procs = [_process(_dict(p, f"otherData.frametrace.inputs[{i}]"),
                          f"otherData.frametrace.inputs[{i}]") for i, p in enumerate(inputs)]
        pids = [p.pid for p in procs]
        if len(set(pids)) != len(pids):
            raise _Bad("otherData.frametrace.inputs: two processes with the same pid")
        _int(_get(ft, "origin_ns", "otherData.frametrace"), "otherData.frametrace.origin_ns")
        return procs, True
    return [_process(ft, "otherData.frametrace")], False


def read_other_data(path: PathLike) -> dict:
    """``otherData.frametrace`` of a Chrome trace frametrace wrote, read
    without keeping its events (ValueError if it is not one)."""
    path = os.fspath(path)
    try:
        ft = _tail_other(path)
        if ft is not None:
            return _frametrace_other({"otherData": {"frametrace": ft}}, True)
        top, saw = _read(path, None, skip_events=True)
        return _frametrace_other(top, saw)
    except _Bad as exc:
        raise ValueError(f"{path}: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to be a trace") from None


# ---- Chrome -> Trace ---------------------------------------------------------------------


class _Plan:
    """How a Chrome file's events become Events, from its otherData.frametrace:
    the origin of its times and the thread id of each (pid, Chrome tid)."""

    def __init__(self, ft: dict):
        self.ft = ft
        self.procs, self.merged = _processes(ft)
        self.by_pid = {p.pid: p for p in self.procs}
        self.origin = (_int(ft.get("origin_ns"), "otherData.frametrace.origin_ns")
                       if self.merged else self.procs[0].origin_ns)
        # Thread ids: the file's, made distinct across the processes of a merge.
        self.tid_map: dict[tuple[int, int], int] = {}
        used: set[int] = set()
        for p in self.procs:
            mine: dict[int, int] = {}
            for ctid, thread_id in p.thread_ids.items():
                new = thread_id
                if self.merged and new in used:
                    # A forked process's main thread has its parent's ident.
                    new = ctid if ctid not in used else p.pid << 64 | thread_id
                used.add(new)
                mine[ctid] = new
                self.tid_map[(p.pid, ctid)] = new
            p.thread_ids = mine
        # No event ends after its tracer's stop (the latched stop), in this
        # trace's times.
        self.stop_of = {p.pid: p.stop_ns + p.shift_ns for p in self.procs}
        self.earliest_stop = min(self.stop_of.values())

    def check_end(self, pid: int, end: int, n: int) -> None:
        """Raises if an event of pid (traceEvents[n]) ending at end (in this
        trace's times) ends after its tracer's stop."""
        stop = self.stop_of.get(pid if self.merged else self.procs[0].pid)
        if stop is not None and end > stop:
            raise _Bad(f"traceEvents[{n}]: ends {end - stop} ns after the tracer's stop "
                       f"(otherData.frametrace stop_ns): no event of frametrace does")

    def thread_id(self, pid: int, ctid: int) -> int:
        """The thread id of an event of (pid, Chrome tid).  A tid missing from
        thread_ids (a thread whose threading ident an earlier thread of the
        trace had, which write_chrome could not tell apart; or a thread with
        ranges and no Python events) keeps its Chrome tid as id."""
        if not self.merged:
            pid = self.procs[0].pid  # one process: its events' pid is not checked
        elif pid not in self.by_pid:
            raise _Bad(f"events of pid {pid}, none of the merged processes "
                       f"(otherData.frametrace.inputs)")
        return self.tid_map.get((pid, ctid), ctid)


def _where(where: str, what: str) -> tuple[str, int]:
    filename, colon, line = where.rpartition(":")
    if not colon or not line.isdigit() or not line.isascii():
        raise _Bad(f"{what}: \"path:line\" expected, not {_show(where)}")
    return filename, int(line)


def _span(ev: dict, what: str) -> tuple[int, int, int, int]:
    """(pid, tid, ts, end) of a complete event, ns from the origin."""
    pid = _int(_get(ev, "pid", what), f"{what}.pid")
    tid = _int(_get(ev, "tid", what), f"{what}.tid")
    ts = _ns(_get(ev, "ts", what), f"{what}.ts")
    dur = _ns(_get(ev, "dur", what), f"{what}.dur")
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
        """where: an event's args.file; what: the event (for the error)."""
        loc = self.files.get(where)
        if loc is None:
            loc = self.files[where] = _where(where, f"{what}.args.file")
        return loc


def _parse_event(ev: Any, n: int, strings: _Strings) -> Optional[tuple[str, tuple]]:
    """traceEvents[n] checked as load() reads it, whoever reads it (load and
    merge accept the same events): ("call", (kind, pid, tid, ts, end, name,
    (filename, lineno), open_at_start, open_at_stop, open_at_loss)), ("range", (name, pid,
    tid, ts, end, open_at_start, open_at_end)), ("step", (name, step, pid,
    ts, end)), ("thread_name", (pid, tid, name, thread_id)),
    ("process_name", (pid, name)), or None: not frametrace's, left out.
    Times in ns from the file's origin."""
    what = f"traceEvents[{n}]"
    if type(ev) is not dict:
        raise _Bad(f"{what}: an object expected, not {_show(ev)}")
    ph = ev.get("ph")
    if ph == "X":
        cat = ev.get("cat")
        if cat == "python" or cat == "c":
            pid, tid, ts, end = _span(ev, what)
            name = ev.get("name")
            if type(name) is not str:
                raise _Bad(f"{what}.name: a string expected, not {_show(name)}")
            args = ev.get("args")
            if type(args) is not dict:
                raise _Bad(f"{what}.args: an object expected, not {_show(args)}")
            where = _str(_get(args, "file", f"{what}.args"), f"{what}.args.file")
            return "call", ("py" if cat == "python" else "c", pid, tid, ts, end,
                            strings.name(name), strings.loc(where, what),
                            _bool(args.get("open_at_start", False), f"{what}.args.open_at_start"),
                            _bool(args.get("open_at_stop", False), f"{what}.args.open_at_stop"),
                            _bool(args.get("open_at_loss", False), f"{what}.args.open_at_loss"))
        if cat == "range":
            what += " (range)"
            pid, tid, ts, end = _span(ev, what)
            args = ev.get("args") or {}
            if type(args) is not dict:
                raise _Bad(f"{what}.args: an object expected, not {_show(args)}")
            # On a track of its own since issue 18: its thread's tid in args.
            if "thread_tid" in args:
                tid = _int(args["thread_tid"], f"{what}.args.thread_tid")
            return "range", (_str(ev.get("name"), f"{what}.name"), pid, tid, ts, end,
                             _bool(args.get("open_at_start", False), f"{what}.args.open_at_start"),
                             _bool(args.get("open_at_end", False), f"{what}.args.open_at_end"))
        if cat == "step":
            what += " (step)"
            pid, _tid, ts, end = _span(ev, what)
            args = _dict(ev.get("args") or {}, f"{what}.args")
            name = _str(ev.get("name"), f"{what}.name")
            step = args.get("step")
            if step is None:
                step = int(name[5:]) if name.startswith("step#") and name[5:].isdigit() else 0
            return "step", (name, _int(step, f"{what}.args.step"), pid, ts, end)
        return None  # other categories: not frametrace's
    if ph == "M":
        name = ev.get("name")
        args = ev.get("args")
        if name == "thread_name" and isinstance(args, dict):
            what += " (thread_name)"
            return "thread_name", (_int(_get(ev, "pid", what), f"{what}.pid"),
                                   _int(_get(ev, "tid", what), f"{what}.tid"),
                                   _str(_get(args, "name", f"{what}.args"), f"{what}.args.name"),
                                   args.get("thread_id"), args.get("thread_serial"),
                                   args.get("native_thread_id"))
        if name == "process_name" and isinstance(args, dict):
            what += " (process_name)"
            return "process_name", (_int(_get(ev, "pid", what), f"{what}.pid"),
                                    _str(_get(args, "name", f"{what}.args"), f"{what}.args.name"))
        return None
    if not isinstance(ph, str):
        raise _Bad(f"{what}: no \"ph\" (event phase)")
    return None


class _ChromeEvents(_Sink):
    """Collects a Chrome document's events while it streams past, nested per
    thread: as Events when the plan is known (otherData.frametrace read from
    the end of the file first), else as tuples of times relative to the
    origin, made Events once the document has been read."""

    use_c = True  # False: the Python path alone (the tests compare both)

    def __init__(self, plan: Optional[_Plan] = None) -> None:
        self.plan = plan
        # Events, or (name, filename, lineno, kind, pid, tid, ts, end, depth, parent, oas, oast,
        # serial, oal)
        self.calls: list[Any] = []
        self.ranges: list[tuple] = []  # (name, pid, tid, ts, end, oas, oae)
        self.steps: list[tuple] = []  # (name, step, pid, ts, end)
        self.thread_names: dict[tuple[int, int], tuple[str, Any]] = {}  # (pid, tid) -> (name, thread_id)
        self.process_names: dict[int, str] = {}
        # (pid, tid) -> (pid, tid, thread_id, serial, stack, native_thread_id)
        self.threads: dict[tuple[int, int], tuple] = {}
        # (pid, tid) -> thread_serial: the one its thread_name event gives (write_chrome
        # writes each thread's), else (older files, a second process of a merge)
        # 1, 2, ... after the largest so far, in the order the file names or uses the threads.
        self.serials: dict[tuple[int, int], int] = {}
        self.used_serials: set[int] = set()
        self.max_serial = 0
        # (pid, tid) -> the real native id, where the thread_name event gives it (a
        # synthetic Chrome tid stands for a native id an earlier thread had).
        self.natives: dict[tuple[int, int], int] = {}
        self.strings = _Strings()
        self.n = 0
        self.origin = plan.origin if plan is not None else 0
        # Events end by their tracer's stop: checked as they come when the
        # plan is known, else the latest end of each pid (and its index).
        self.late = plan.earliest_stop if plan is not None else None
        self.last_end: dict[int, tuple[int, int]] = {}
        # For the C path (the plan known): the functions met ({py, c}: their
        # JSON text from the name's opening quote to args.file's closing
        # quote -> (name, filename, lineno, kind)) and the threads ((pid,
        # tid) -> ((thread_id, native, serial), stack)).
        self.infos: tuple[dict, dict] = ({}, {})
        self.cthreads: dict[tuple[int, int], tuple] = {}

    def c_fast(self) -> Optional[Callable[[str, int, int], tuple[int, int, int]]]:
        if not self.use_c:
            return None
        calls, infos_py, infos_c, threads = self.calls, *self.infos, self.cthreads
        origin = self.origin
        # The plan unknown, the C path's Events hold (pid, tid, serial) as
        # their thread until _chrome_trace() makes them Events again.
        late = self.plan.earliest_stop if self.plan is not None else (1 << 63) - 1

        def c(buf: str, pos: int, stop: int) -> tuple[int, int, int]:
            before, n = len(calls), self.n
            taken = _load_chrome_calls(buf, pos, stop, calls, infos_py, infos_c, threads, origin,
                                       late)
            if self.late is None:
                for i in range(before, len(calls)):
                    e = calls[i]
                    self._note_end(e.thread_id, e.end_ns, n + i - before)
            self.n += len(calls) - before
            return taken
        return c

    def _place(self, stack: list, ts: int, end: int, oas: bool, oast: bool,
               oal: bool) -> tuple[int, int]:
        """Depth and parent of the next event of a thread: the innermost
        event still enclosing it (and, for one open at the start, the stop
        or the loss of its thread, open there too).  Pushes it on the
        thread's stack."""
        calls = self.calls
        while stack:
            top = calls[stack[-1]]
            if (top[6] <= ts and end <= top[7]
                    and (top[10] or not oas) and (top[11] or not oast) and (top[13] or not oal)):
                break
            stack.pop()
        depth = len(stack)
        parent = stack[-1] if stack else -1
        stack.append(len(calls))
        return depth, parent

    def _serial(self, key: tuple[int, int], wanted: Any = None) -> int:
        serial = self.serials.get(key)
        if serial is None:
            if type(wanted) is int and wanted > 0 and wanted not in self.used_serials:
                serial = wanted
            else:
                serial = self.max_serial + 1
            self.serials[key] = serial
            self.used_serials.add(serial)
            self.max_serial = max(self.max_serial, serial)
        return serial

    def _thread(self, pid: int, tid: int) -> tuple:
        """(pid, tid, thread_id, serial, stack of the thread's open events,
        native_thread_id)."""
        key = (pid, tid)
        t = self.threads.get(key)
        if t is None:
            thread_id = self.plan.thread_id(pid, tid) if self.plan is not None else pid
            t = self.threads[key] = (pid, tid, thread_id, self._serial(key), [],
                                     self.natives.get(key, tid))
            self.cthreads[key] = ((thread_id, t[5], t[3]) if self.plan is not None else
                                  (pid, tid, t[3]), t[4])
        return t

    def _note_end(self, pid: int, end: int, n: int) -> None:
        last = self.last_end.get(pid)
        if last is None or end > last[0]:
            self.last_end[pid] = (end, n)

    def on_event(self, ev: Any, key: Optional[str] = None) -> None:
        n = self.n
        self.n += 1
        parsed = _parse_event(ev, n, self.strings)
        if parsed is None:
            return
        what, data = parsed
        if what == "call":
            kind, pid, tid, ts, end, name, loc, oas, oast, oal = data
            ts += self.origin
            end += self.origin
            _pid, _tid, thread_id, serial, stack, native = self._thread(pid, tid)
            if self.late is None:
                self._note_end(pid, end, n)
            elif end > self.late:
                self.plan.check_end(pid, end, n)  # type: ignore[union-attr]
            depth, parent = self._place(stack, ts, end, oas, oast, oal)
            if self.plan is not None:
                self.calls.append(Event((name, loc[0], loc[1], kind, thread_id, native, ts, end,
                                         depth, parent, oas, oast, serial, oal)))
            else:
                self.calls.append((name, loc[0], loc[1], kind, pid, tid, ts, end, depth, parent,
                                   oas, oast, serial, oal))
            if key is not None:  # the C path takes this function's next events
                self.infos[kind == "c"][key] = (name, loc[0], loc[1], kind)
        elif what == "range":
            self.ranges.append(data)
        elif what == "step":
            self.steps.append(data)
        elif what == "thread_name":
            pid, tid, name, thread_id, serial, native = data
            self.thread_names[(pid, tid)] = (name, thread_id)
            if type(native) is int and native >= 0 and (pid, tid) not in self.threads:
                self.natives[(pid, tid)] = native
            self._serial((pid, tid), serial)
        else:
            pid, name = data
            self.process_names[pid] = name


def _chrome_trace(col: _ChromeEvents, ft: dict) -> Trace:
    if col.plan is not None:
        if col.plan.ft != ft:
            raise _Bad("otherData.frametrace is not the one found at the end of the file")
        plan = col.plan
    else:
        plan = _Plan(ft)
        for pid, (end, n) in sorted(col.last_end.items(), key=lambda item: item[1][1]):
            plan.check_end(pid, plan.origin + end, n)
    procs, merged, origin = plan.procs, plan.merged, plan.origin
    calls = col.calls
    if col.plan is None:
        # Tuples of times relative to the origin: Events now.
        thread_of = {key: plan.thread_id(*key) for key in col.threads}
        native_of = {key: t[5] for key, t in col.threads.items()}
        calls[:] = [Event((name, filename, lineno, kind, thread_of[(pid, ctid)],
                           native_of[(pid, ctid)],
                           origin + ts, origin + end, depth, parent, oas, oast, serial, oal))
                    for (name, filename, lineno, kind, pid, ctid, ts, end, depth, parent, oas, oast,
                         serial, oal) in calls]
    ranges = [RangeRecord(name, plan.thread_id(pid, ctid), origin + ts, origin + end, oas, oae)
              for name, pid, ctid, ts, end, oas, oae in col.ranges]
    steps = [StepRecord(name, step, origin + ts, origin + end)
             for name, step, _pid, ts, end in col.steps]

    names: dict[Any, str] = {}
    for (pid, ctid), (tname, _thread_id) in col.thread_names.items():
        t = plan.tid_map.get((pid if merged else procs[0].pid, ctid))
        if t is None:
            continue  # the steps track, or a thread without events
        names[t] = f"{tname} [pid {pid}]" if merged else tname

    dropped_by_thread: dict[int, int] = {}
    for p in procs:
        for ctid, n in p.dropped_by_thread.items():
            t = plan.thread_id(p.pid, ctid)
            dropped_by_thread[t] = dropped_by_thread.get(t, 0) + n

    # Each thread its own, in serial order: those named and those with events.
    from ._tracer import ThreadInfo
    threads = []
    keys = set(col.serials) & (set(col.threads) | set(col.thread_names))
    for key in sorted(keys, key=col.serials.__getitem__):
        pid, ctid = key
        t = plan.tid_map.get((pid if merged else procs[0].pid, ctid))
        if t is None and key not in col.threads:
            continue  # the steps track
        own: Optional[str] = col.thread_names[key][0] if key in col.thread_names else None
        if own is not None and merged:
            own = f"{own} [pid {pid}]"
        p = plan.by_pid.get(pid, procs[0])
        threads.append(ThreadInfo((col.serials[key], plan.thread_id(pid, ctid),
                                   col.natives.get(key, ctid), own,
                                   p.dropped_by_thread.get(ctid))))

    if not merged:
        p = procs[0]
        # A window that traced no Python (python_steps=0) says so.
        traced = p.metadata.get("python_traced", True) is not False
        return Trace(
            events=calls, ranges=ranges, steps=steps,
            session_start_ns=p.origin_ns,
            session_end_ns=_int(p.metadata.get("session_end_ns", p.stop_ns),
                                "otherData.frametrace.metadata.session_end_ns"),
            tracer_start_ns=p.start_ns if traced else None,
            tracer_stop_ns=p.stop_ns if traced else None,
            clock_anchor=p.clock_anchor,
            dropped=p.dropped, dropped_by_thread=dropped_by_thread, pid=p.pid,
            thread_names=names, cycle=_int(p.metadata.get("cycle", 0), "otherData.frametrace.metadata.cycle"),
            threads=threads,
            distributed=_rank_info(p.metadata.get("distributed")),
        )
    processes: list[dict[str, Any]] = []
    ends = []
    for p in procs:
        end = p.metadata.get("session_end_ns", p.stop_ns)
        ends.append((end if type(end) is int else p.stop_ns) + p.shift_ns)
        processes.append({
            "pid": p.pid,
            "original_pid": p.original_pid if p.original_pid is not None else p.pid,
            "source": p.source,
            "process_name": col.process_names.get(p.pid, p.process_name),
            "thread_ids": dict(p.thread_ids),
            "shift_ns": p.shift_ns,
            "tracer_start_ns": p.start_ns + p.shift_ns,
            "tracer_stop_ns": p.stop_ns + p.shift_ns,
            "dropped": p.dropped,
            "dropped_by_thread": {p.thread_ids.get(k, k): n for k, n in p.dropped_by_thread.items()},
            "metadata": p.metadata,
        })
    return MergedTrace(
        events=calls, ranges=ranges, steps=steps,
        session_start_ns=origin,
        session_end_ns=max(ends),
        tracer_start_ns=min(p.start_ns + p.shift_ns for p in procs),
        tracer_stop_ns=max(p.stop_ns + p.shift_ns for p in procs),
        dropped=sum(p.dropped for p in procs), dropped_by_thread=dropped_by_thread,
        pid=procs[0].pid, thread_names=names, processes=processes, threads=threads,
    )


# ---- portable JSON -> Trace -------------------------------------------------------------


def _rank_info(value: Any) -> Optional[dict]:
    """otherData.frametrace.metadata.distributed: the process's rank."""
    if value is None:
        return None
    info = _dict(value, "otherData.frametrace.metadata.distributed")
    if info.get("rank") is not None:
        _int(info["rank"], "otherData.frametrace.metadata.distributed.rank")
    return _plain_numbers(info)


def _plain_numbers(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_numbers(v) for v in value]
    return value


def _portable_trace(doc: dict) -> Trace:
    if doc.get("version") != VERSION:
        raise _Bad(f"unsupported frametrace trace version {doc.get('version')!r}")
    md = _dict(doc.get("metadata") or {}, "metadata")
    fields = _get(doc, "event_fields", "the document")
    # Files written before thread_serial and open_at_loss have the first 12.
    names = next((names for names in (EVENT_FIELDS, EVENT_FIELDS[:12])
                  if isinstance(fields, list) and sorted(map(str, fields)) == sorted(names)), None)
    if names is None:
        raise _Bad(f"event_fields: the {len(EVENT_FIELDS)} fields {', '.join(EVENT_FIELDS)} "
                   f"(or the first 12 of them) expected, not {_show(fields)}")
    order = [fields.index(f) for f in names]
    checks: list[Callable[[Any, str], Any]] = [
        _str, _str, _int, _kind, _int, _int, _int, _int, _int, _int, _bool, _bool, _int, _bool]
    raw_events = _get(doc, "events", "the document")
    if not isinstance(raw_events, list):
        raise _Bad(f"events: a list expected, not {_show(raw_events)}")
    serials: dict[tuple[int, int], int] = {}  # for old files: threads in order of appearance
    events = []
    for i, raw in enumerate(raw_events):
        if not isinstance(raw, list) or len(raw) != len(names):
            raise _Bad(f"events[{i}]: a list of {len(names)} fields expected, not {_show(raw)}")
        values = [check(raw[j], f"events[{i}].{f}") for check, j, f in zip(checks, order, names)]
        if not -1 <= values[9] < i:
            raise _Bad(f"events[{i}].parent: {values[9]} is not -1 or an earlier event")
        if len(names) == 12:
            serial = serials.setdefault((values[4], values[5]), len(serials) + 1)
            values += [serial, False]
        elif values[12] < 0:
            raise _Bad(f"events[{i}].thread_serial: {values[12]} is negative")
        events.append(Event(values))

    def record(cls: Any, i: int, raw: Any, what: str) -> Any:
        raw = _dict(raw, f"{what}[{i}]")
        try:
            rec = cls(**raw)
        except TypeError as exc:
            raise _Bad(f"{what}[{i}]: {exc}") from None
        for f, v in rec._asdict().items():
            (_str if f == "name" else _bool if f.startswith("open_") else _int)(v, f"{what}[{i}].{f}")
        return rec

    ranges = [record(RangeRecord, i, r, "ranges") for i, r in enumerate(doc.get("ranges") or [])]
    steps = [record(StepRecord, i, s, "steps") for i, s in enumerate(doc.get("steps") or [])]

    def opt_int(*keys: str) -> Optional[int]:
        for k in keys:
            if md.get(k) is not None:
                return _int(md[k], f"metadata.{k}")
        return None

    def by_thread(key: str, check: Callable[[Any, str], Any]) -> dict:
        out = {}
        for k, v in _dict(md.get(key) or {}, f"metadata.{key}").items():
            try:
                out[int(k)] = check(v, f"metadata.{key}[{k!r}]")
            except ValueError:
                raise _Bad(f"metadata.{key}: key {k!r} is not a thread id") from None
        return out

    start = opt_int("tracer_start_ns", "start_ns")
    stop = opt_int("tracer_stop_ns", "stop_ns")
    first = min((e.start_ns for e in events), default=0)
    last = max((e.end_ns for e in events), default=0)
    session_start = opt_int("session_start_ns")
    session_end = opt_int("session_end_ns")
    return Trace(
        events=events, ranges=ranges, steps=steps,
        session_start_ns=session_start if session_start is not None else (start if start is not None else first),
        session_end_ns=session_end if session_end is not None else (stop if stop is not None else last),
        tracer_start_ns=start, tracer_stop_ns=stop,
        dropped=opt_int("dropped") or 0,
        dropped_by_thread=by_thread("dropped_by_thread", _int),
        pid=opt_int("pid") or 0,
        thread_names=by_thread("thread_names", _str),
        cycle=opt_int("cycle") or 0,
        threads=_portable_threads(md, events),
    )


def _portable_threads(md: dict, events: list) -> list:
    """Trace.threads of a portable file: its metadata.threads, or (older
    files) one per thread_serial of the events, named by thread_names."""
    from ._tracer import ThreadInfo

    raw = md.get("threads")
    if raw is not None:
        if not isinstance(raw, list):
            raise _Bad(f"metadata.threads must be a list, not {type(raw).__name__}")
        out = []
        for i, t in enumerate(raw):
            what = f"metadata.threads[{i}]"
            if not isinstance(t, list) or len(t) != 5:
                raise _Bad(f"{what} must be [serial, thread_id, native_thread_id, name, dropped]")
            name, dropped = t[3], t[4]
            out.append(ThreadInfo((_int(t[0], f"{what}[0]"), _int(t[1], f"{what}[1]"),
                                   _int(t[2], f"{what}[2]"),
                                   None if name is None else _str(name, f"{what}[3]"),
                                   None if dropped is None else _int(dropped, f"{what}[4]"))))
        return out
    names = md.get("thread_names")
    if not isinstance(names, dict):
        names = {}
    seen: dict[int, Any] = {}
    for e in events:
        if e.thread_serial not in seen:
            seen[e.thread_serial] = e
    return [ThreadInfo((serial, e.thread_id, e.native_thread_id,
                        names.get(str(e.thread_id)), None))
            for serial, e in sorted(seen.items())]


def _kind(value: Any, what: str) -> str:
    if value not in ("py", "c"):
        raise _Bad(f"{what}: \"py\" or \"c\" expected, not {_show(value)}")
    return value


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
    plan = None
    try:
        ft = _tail_other(path)
    except RecursionError:
        ft = None  # the full read below says what is wrong
    if ft is not None:
        try:
            plan = _Plan(_frametrace_other({"otherData": {"frametrace": ft}}, True))
        except _Bad:
            plan = None  # reported below, once the whole document has been read
    col = _ChromeEvents(plan)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of new objects, no cycles: no collections meanwhile
    try:
        with _named_errors(path):
            top, saw_events = _read(path, col, progress)
            if not saw_events and top.get("format") == FORMAT:
                return _portable_trace(top)
            return _chrome_trace(col, _frametrace_other(top, saw_events))
    finally:
        if gc_was_enabled:
            gc.enable()


# ---- the end of a file -------------------------------------------------------------------


def _chrome_head(head: bytes) -> bool:
    """Whether a file's first bytes may be a Chrome trace's (an object with
    traceEvents): else its end is not looked for (a gzip bomb is not
    inflated twice)."""
    return (head.lstrip(b" \t\n\r").startswith(b"{")
            and (b'"traceEvents"' in head or _OTHER_FIRST.match(head) is not None))


_OTHER_FIRST = re.compile(rb'[ \t\n\r]*\{[ \t\n\r]*"otherData"[ \t\n\r]*:[ \t\n\r]*')


def _head_other(head: bytes, more: Callable[[int], bytes]) -> Optional[dict]:
    """otherData of a document that starts with it (write_chrome's since
    issue 18), from head and what more() reads after it; None if not."""
    match = _OTHER_FIRST.match(head)
    if match is None:
        return None
    decoder = json.JSONDecoder(parse_float=decimal.Decimal, parse_int=_parse_int)
    while True:
        # A multi-byte character cut at the end only fails this attempt.
        text = head[match.end():].decode("utf-8", errors="ignore")
        try:
            return decoder.raw_decode(text)[0]
        except json.JSONDecodeError:
            pass
        chunk = more(1 << 20) if len(head) <= _MAX_VALUE else b""
        if not chunk:
            return None  # the full read says what is wrong
        head += chunk


def _tail_other(path: str) -> Optional[dict]:
    """otherData.frametrace from the start of the file (where write_chrome
    puts it) or, in files written before issue 18, from its end, without
    parsing the events; None when not found there (or the file does not
    start as a JSON object: the full read says what is wrong, from its
    first bytes)."""
    keep = 1 << 20
    try:
        with open(path, "rb") as raw:
            if raw.read(2) == b"\x1f\x8b":
                raw.seek(0)
                with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                    tail = gz.read(1 << 16)
                    if not _chrome_head(tail):
                        return None
                    if _OTHER_FIRST.match(tail):
                        return _frametrace_of(_head_other(tail, gz.read))
                    while True:
                        chunk = gz.read(1 << 22)
                        if not chunk:
                            break
                        tail = (tail + chunk)[-keep:]
            else:
                raw.seek(0)
                head = raw.read(1 << 16)
                if not _chrome_head(head):
                    return None
                if _OTHER_FIRST.match(head):
                    return _frametrace_of(_head_other(head, raw.read))
                raw.seek(0, os.SEEK_END)
                raw.seek(max(0, raw.tell() - keep))
                tail = raw.read()
        text = tail.decode("utf-8", errors="replace")
        i = text.rfind('"otherData"')
        if i < 0:
            return None
        j = _WS.match(text, i + len('"otherData"')).end()  # type: ignore[union-attr]
        if text[j:j + 1] != ":":
            return None
        j = _WS.match(text, j + 1).end()  # type: ignore[union-attr]
        other, end = json.JSONDecoder(parse_float=decimal.Decimal,
                                      parse_int=_parse_int).raw_decode(text, j)
        if not re.fullmatch(r"[ \t\n\r]*\}[ \t\n\r]*", text[end:]):
            return None
    except (OSError, EOFError, zlib.error, ValueError, _BigInt, RecursionError):
        return None
    return _frametrace_of(other)


def _frametrace_of(other: Any) -> Optional[dict]:
    ft = other.get("frametrace") if isinstance(other, dict) else None
    return ft if isinstance(ft, dict) else None


from .merge import merge  # noqa: E402  (merge reads with this module)
