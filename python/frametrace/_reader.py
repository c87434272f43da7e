"""The one reader of trace files, for ``load()`` and ``merge``: the JSON
document streamed (its values read with ``json.JSONDecoder.raw_decode``,
the elements of its event arrays one at a time, the lines laid out as
write_chrome writes them handed to a C path), the checks of its values,
``otherData.frametrace`` and the Chrome events, as both accept them."""
from __future__ import annotations

import codecs
import contextlib
import decimal
import gzip
import io
import itertools
import json
import math
import os
import queue
import re
import threading
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Union, cast

from .export import FORMAT, VERSION

PathLike = Union[str, "os.PathLike[str]"]
Progress = Optional[Callable[[int, int], None]]
"""progress(done, total): bytes of the file read so far, of its size."""

_CHUNK = 1 << 20  # characters read at a time
_WS = re.compile(r"[ \t\n\r]*")
# Bounds on what a file that is no trace (a gzip bomb) can make us hold:
# the largest value read whole (all but the elements of the event arrays:
# otherData grows with the threads, about 80 bytes each), the members of
# the top-level object, the digits of an integer (int64 and uint64 have at
# most 20).  A value may be as large as the file, or, compressed, 64 times
# the file (what frametrace writes compresses 5 to 10 times; loading a
# trace holds some 30 times its .json.gz in Events), at least 8 MiB.
_MAX_VALUE = 8 << 20
_GZIP_RATIO = 64
_MAX_MEMBERS = 1000
_MAX_DIGITS = 20
_AFTER_VALUE = frozenset(" \t\n\r,}]")
_OTHER_KEY = re.compile(r'"otherData"[ \t\n\r]*:[ \t\n\r]*')


class _Bad(ValueError):
    """A problem of the file, raised as ValueError(f"{path}: {problem}")."""


class _BigInt(Exception):
    """An integer too long to be any of a trace's (args: its digits)."""


def _constant(text: str) -> Any:
    raise _Bad(f"not JSON: {text} (no JSON number; no trace has one)")


def _decoder() -> json.JSONDecoder:
    """Numbers read with bounded work: integers of at most 20 digits, the
    others as Decimal (exact, whatever their exponent: see _plain)."""
    return json.JSONDecoder(parse_float=decimal.Decimal, parse_int=_parse_int,
                            parse_constant=_constant)


def _parse_int(text: str) -> int:
    # Before int(): converting thousands of digits is quadratic.
    if len(text) - text.startswith("-") > _MAX_DIGITS:
        raise _BigInt(len(text) - text.startswith("-"))
    return int(text)


def _inflater() -> tuple[Any, type[BaseException]]:
    """(the gzip module, its inflate error): ISA-L's (the data extra's
    isal, about three times as fast) where it is installed, else the
    standard library's."""
    try:
        from isal import igzip, isal_zlib
    except ImportError:
        return gzip, zlib.error
    # (isal's stub declares error an instance, not the class it is)
    return igzip, cast("type[BaseException]", isal_zlib.error)


class _Inflated:
    """A gzip file's text, inflated and decoded on a thread of its own a
    few chunks ahead: zlib lets go of the GIL, and so does the parser's C
    path, so the inflating and the parsing of what came before it run on
    two cores.  read() as a text file's; its errors are raised where the
    text they stop is read."""

    AHEAD = 2  # chunks held inflated: what this adds to the reader's memory

    def __init__(self, raw: Any) -> None:
        self.chunks: queue.Queue = queue.Queue(self.AHEAD)
        self.eof = False
        self.ended: Optional[BaseException] = None  # what every later read gives
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._inflate, args=(raw,), daemon=True,
                                       name="frametrace-inflate")
        self.thread.start()

    def _inflate(self, raw: Any) -> None:
        gzip_module, inflate_error = _inflater()
        decode = codecs.getincrementaldecoder("utf-8")().decode
        try:
            with gzip_module.GzipFile(fileobj=raw, mode="rb") as unzipped:
                while not self.done.is_set():
                    chunk = unzipped.read(_CHUNK)
                    text = decode(chunk, final=not chunk)
                    if text or not chunk:
                        self._put(text)
                    if not chunk:
                        return
        except (EOFError, inflate_error, gzip.BadGzipFile) as exc:
            self._put(_Bad(f"truncated or corrupted gzip data ({exc})"))
        except OSError as exc:
            self._put(_Bad(f"corrupted gzip data ({exc})"))
        except BaseException as exc:  # the reader raises it (UnicodeDecodeError too)
            self._put(exc)

    def _put(self, item: Any) -> None:
        while not self.done.is_set():  # (the timeout: a check of done meanwhile)
            try:
                self.chunks.put(item, timeout=0.1)
                return
            except queue.Full:
                pass

    def read(self, size: int) -> str:
        """At least size characters (fewer only at the end), "" at the end."""
        parts: list[str] = []
        have = 0
        while have < size and not self.eof:
            if self.ended is not None:
                raise self.ended
            item = self.chunks.get()
            if isinstance(item, BaseException):
                self.ended = item
                raise item
            self.eof = not item
            parts.append(item)
            have += len(item)
        return "".join(parts)

    def close(self) -> None:
        self.done.set()
        # Room for the put the thread may be in: it ends at once, whatever
        # was read of the file (a reader that stops at the header).
        while True:
            try:
                self.chunks.get_nowait()
            except queue.Empty:
                break
        self.thread.join()


# ---- the JSON document, streamed ----------------------------------------------------


class _Reader:
    """A JSON file read in chunks: each value with raw_decode, the top-level
    object and its arrays around them one piece at a time."""

    def __init__(self, path: str, progress: Progress = None):
        self.raw = open(path, "rb")
        try:
            self.gzip = self.raw.read(2) == b"\x1f\x8b"
            self.raw.seek(0)
            self.size = os.fstat(self.raw.fileno()).st_size
            self.max_value = max(_MAX_VALUE, self.size * (_GZIP_RATIO if self.gzip else 1))
            self.text: Any = (_Inflated(self.raw) if self.gzip else
                              io.TextIOWrapper(self.raw, encoding="utf-8", newline=""))
        except BaseException:
            self.raw.close()
            raise
        self.progress = progress
        self.buf, self.pos, self.base, self.eof = "", 0, 0, False  # base: characters before buf
        self.decoder = _decoder()

    def __enter__(self) -> "_Reader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.text.close()
        self.raw.close()

    def fill(self, size: int = _CHUNK) -> None:
        try:
            chunk = self.text.read(size)  # (a gzip file's errors: _Bad, from _Inflated)
        except UnicodeDecodeError as exc:
            raise _Bad(f"not UTF-8 text ({exc.reason})") from None
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
                if end - self.pos > self.max_value:
                    raise self.too_large()
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
            if len(self.buf) - self.pos > self.max_value:
                raise self.too_large()
            self.fill(size)  # twice as much each time: a long value is parsed again a few times
            size *= 2

    def known_value(self, known: tuple[str, Any]) -> Any:
        """The next value: known's (its text, its value) when the file has
        that text there (not parsed again), else read as value() reads it."""
        text, value = known
        self.peek()
        while len(self.buf) - self.pos < len(text) + 1 and not self.eof:
            self.fill(max(_CHUNK, len(text)))
        end = self.pos + len(text)
        # The character after it must end the value (no number goes on).
        if (len(text) <= self.max_value and self.buf.startswith(text, self.pos)
                and (end == len(self.buf) or self.buf[end] in _AFTER_VALUE)):
            self.pos = end
            return value
        return self.value()

    def too_large(self) -> _Bad:
        return _Bad(f"not a trace: a JSON value of more than {self.max_value} characters at "
                    f"{self.where()} (" + (f"{_GZIP_RATIO} times the compressed file's "
                                           f"{self.size} bytes" if self.gzip else "the file")
                    + ")")

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
            hint = (" (a Chrome trace in array form, not written by frametrace)"
                    if kind == "an array" else "")
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
    its C path (c_fast()) takes.  This one only checks them."""

    def __init__(self) -> None:
        self.n = 0
        self.strings = _Strings()

    def c_fast(self) -> Optional[Callable[[str, int, int], tuple[int, int, int]]]:
        """c(buf, pos, stop): takes in C the events it can from pos (those
        starting before stop), and returns (where it stopped, and the start
        and end of that line's key text when only its function, thread or
        pid was new to it, else -1, -1); or None."""
        return None

    def on_event(self, ev: Any, key: Optional[str] = None) -> Any:
        """ev: traceEvents[self.n]; key: its key text (see c_fast), which
        the C path takes from now on once ev is checked."""
        self.n += 1
        return _parse_event(ev, self.n - 1, self.strings)


def _read(path: str, sink: Optional[_Sink], progress: Progress = None,
          skip_events: bool = False, other: Optional[tuple[str, Any]] = None
          ) -> tuple[dict[str, Any], bool]:
    """The top-level members of the document but traceEvents, whose elements
    go to sink (skip_events: only parsed), and whether traceEvents was an
    array.  other: otherData's text and value as _tail_other_text read them
    (a value of many threads is not parsed twice)."""
    top: dict[str, Any] = {}
    saw_events = False
    with _Reader(path, progress) as r:
        for key, array in r.members():
            if key == "traceEvents" and array:
                saw_events = True
                _events(r, None if skip_events else sink)
            elif array:
                # Another array (torch's deviceProperties: one per GPU), read
                # element by element: a file of many small elements is
                # refused before it takes more memory than the file.
                values: list[Any] = []
                for _ in r.elements(key):
                    if len(values) == _MAX_MEMBERS:
                        raise _Bad(f"not a trace: more than {_MAX_MEMBERS} elements in the "
                                   f"top-level array {key!r} (at {r.where()})")
                    values.append(r.value())
                top[key] = values
            elif key == "otherData" and other is not None:
                top[key] = r.known_value(other)
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
    write_chrome puts it) or the end of the file (where earlier versions
    put it), the events not read; None when not there."""
    found = _tail_other_text(path)
    return None if found is None else _frametrace_of(found[1])


def _tail_other_text(path: str) -> Optional[tuple[str, Any]]:
    """otherData's text and value, as _tail_other finds them; None when
    otherData.frametrace is not there."""
    try:
        with _Reader(path) as r:
            for key, array in r.members():
                if key == "otherData":
                    r.peek()
                    start = r.base + r.pos  # a fill() meanwhile drops what was read
                    other = r.value()
                    text = r.buf[start - r.base:r.pos]
                    return (text, other) if _frametrace_of(other) is not None else None
                if array:
                    break
                r.value()
            else:
                return None
        if key != "traceEvents":
            return None  # no Chrome trace: its end not looked for (a gzip bomb inflated once)
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
        at = text.rfind('"otherData"')
        match = _OTHER_KEY.match(text, at) if at >= 0 else None
        if match is None:
            return None
        other, end = _decoder().raw_decode(text, match.end())
        if not re.fullmatch(r"[ \t\n\r]*\}[ \t\n\r]*", text[end:]):
            return None
    except (OSError, EOFError, zlib.error, ValueError, _BigInt, RecursionError):
        return None
    if _frametrace_of(other) is None:
        return None
    return text[match.end():end], other


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
    dropped_records: int
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
        pid=_get(other, "pid", int, what), origin_ns=_get(other, "origin_ns", int, what),
        start_ns=_get(other, "start_ns", int, what), stop_ns=_get(other, "stop_ns", int, what),
        dropped=_get(other, "dropped", int, what, 0),
        dropped_records=_get(other, "dropped_records", int, what, 0),
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
        raise _Bad("not a trace: no traceEvents (not a Chrome trace)")
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


# ---- Chrome events ---------------------------------------------------------------------


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
            if not colon or not line.isdigit() or not line.isascii() or len(line) > _MAX_DIGITS:
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
        if cat == "range":  # on a track of its own in later versions: its thread's tid in args
            return "range", (_check(name, str, f"{what}.name"), pid,
                             _get(args, "thread_tid", int, f"{what}.args", tid), ts, end,
                             flag("open_at_start"), flag("open_at_end"))
        if cat == "step":
            name = _check(name, str, f"{what}.name")
            step = args.get("step")
            if step is None:
                digits = name[5:] if name.startswith("step#") else ""
                step = int(digits) if digits.isdigit() and len(digits) <= _MAX_DIGITS else 0
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
        return "thread_name", (pid, _get(ev, "tid", int, what),
                               _get(args, "name", str, f"{what}.args"), args.get("thread_id"),
                               args.get("thread_serial"), args.get("native_thread_id"))
    if not isinstance(ph, str):
        raise _Bad(f"{what}: no \"ph\" (event phase)")
    return None  # other phases and categories: not frametrace's


def _plain(value: Any) -> Any:
    """value with its decimals made JSON numbers again (for json.dumps): a
    whole number of at most 20 digits an int, any other a float; one out
    of a float's range (int() of 1e999999999 would make a billion digits)
    raises."""
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and value.adjusted() < _MAX_DIGITS and value == value.to_integral_value():
            return int(value)
        number = float(value)
        if not math.isfinite(number):
            raise _Bad(f"a number out of range: {_show(value)}")
        return number
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
