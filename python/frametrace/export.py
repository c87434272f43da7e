"""Writing traces to files.

Until the viewer formats land, one portable format: a JSON document
(``.json``, or gzip-compressed ``.json.gz``) holding the events, the ranges
and steps of a session, and metadata::

    {"format": "frametrace", "version": 1,
     "metadata": {"pid": ..., "start_ns": ..., "stop_ns": ..., ...},
     "event_fields": ["name", "filename", ...],
     "events": [[...], ...],
     "ranges": [{"name": ..., "thread_id": ..., "start_ns": ..., "end_ns": ...}],
     "steps": [{"name": "step#0", "start_ns": ..., "end_ns": ...}]}
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from typing import IO, Any, Iterable, Mapping, Optional, Sequence

from ._output import open_output, output_path
from ._tracer import Event

FORMAT = "frametrace"
VERSION = 1
EVENT_FIELDS: tuple[str, ...] = tuple(Event.__match_args__)


def trace_document(
    events: Sequence[Event],
    *,
    metadata: Mapping[str, Any] | None = None,
    ranges: Iterable[Mapping[str, Any]] = (),
    steps: Iterable[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The JSON-ready document of a trace."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "metadata": dict(metadata or {}),
        "event_fields": list(EVENT_FIELDS),
        "events": [list(ev) for ev in events],
        "ranges": [dict(r) for r in ranges],
        "steps": [dict(s) for s in steps],
    }


def write_json(path: str | os.PathLike[str], document: Mapping[str, Any]) -> str:
    """Writes document to path (gzip-compressed if it ends in .gz); returns
    the path written.  Like every writer here, the file replaces path only
    once complete (frametrace._output)."""
    path = os.fspath(path)
    level = 9 if path.endswith(".gz") else None  # gzip.open's default
    with open_output(path, "w", compresslevel=level, encoding="utf-8") as fh:
        json.dump(document, fh, separators=(",", ":"))
    return path


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads a document written by write_json, checking that it is one."""
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable frametrace trace: {exc}") from exc
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to be a frametrace trace") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path}: not a frametrace trace (no \"format\": \"{FORMAT}\")")
    if doc.get("version") != VERSION:
        raise ValueError(f"{path}: unsupported frametrace trace version {doc.get('version')!r}")
    return doc


# ---- Chrome trace event JSON (Perfetto UI, chrome://tracing) ----------------

STEPS_TID = 0  # the track of a session's steps


def _us_text(ns: int) -> str:
    """Nanoseconds as microseconds with exactly three decimals: the JSON
    number write_chrome writes for ts and dur (no float: every ns survives)."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _chrome_event(ph: str, name: str, cat: str, pid: int, tid: int,
                  start_end: tuple[int, int] | None = None, **fields: Any) -> str:
    """One trace event; start_end: its (ts, end) in ns from the origin,
    written as ts and dur."""
    head = json.dumps({"ph": ph, "name": name, "cat": cat, "pid": pid, "tid": tid},
                      separators=(",", ":"))
    times = ""
    if start_end is not None:
        ts, end = start_end
        times = f',"ts":{_us_text(ts)},"dur":{_us_text(end - ts)}'
    rest = json.dumps(fields, separators=(",", ":"))[1:-1] if fields else ""
    return head[:-1] + times + ("," + rest if rest else "") + "}"


def _prepare(path: str | os.PathLike[str], tracer: Any, pid: int | None,
             thread_names: Mapping[int, str] | None, process_name: str | None,
             ranges: Iterable[Any], steps: Iterable[Any],
             writer: str) -> tuple[str, int, dict, list, list]:
    """What both writers start with: the checks, the pid, the threads'
    names, and the ranges and steps as lists."""
    from ._tracer import Tracer

    if not isinstance(tracer, Tracer):
        raise TypeError(f"{writer}() writes a frametrace.Tracer's records, not "
                        f"{type(tracer).__name__}")
    if tracer.stop_ns is None or tracer.active:
        raise RuntimeError(f"{writer}() needs a stopped tracer")
    if pid is not None:
        _check_int64("pid", pid, minimum=0)
    if process_name is not None and not isinstance(process_name, str):
        raise TypeError(f"process_name must be a str, not {type(process_name).__name__}")
    ranges = _spans("ranges", ranges, ("name", "thread_id", "start_ns", "end_ns"))
    steps = _spans("steps", steps, ("name", "step", "start_ns", "end_ns"))
    if thread_names is not None and not isinstance(thread_names, Mapping):
        raise TypeError(f"thread_names must be a mapping {{thread_id: name}}, not "
                        f"{type(thread_names).__name__}")
    names = {}
    for tid, name in (thread_names or {}).items():
        if isinstance(tid, bool) or not isinstance(tid, int):
            raise TypeError(f"thread_names keys must be thread ids (int), not {type(tid).__name__}")
        if not isinstance(name, str):
            raise TypeError(f"thread_names[{tid!r}] must be a str, not {type(name).__name__}")
        names[tid] = name
    path = os.fspath(path)
    return path, os.getpid() if pid is None else pid, names, ranges, steps


def _thread_name_list(tracer: Any, names: Mapping[int, str]) -> list:
    """One name (or None) per traced thread, in serial order: the tracer's
    own for each thread, or one given by thread_id for a thread whose ident
    no other traced thread had (CPython reuses idents: a name by ident could
    be any of theirs)."""
    threads = tracer.threads
    per_ident: dict[int, int] = {}
    for t in threads:
        per_ident[t.thread_id] = per_ident.get(t.thread_id, 0) + 1
    out = []
    for t in threads:
        given = names.get(t.thread_id)
        out.append(given if given is not None and per_ident[t.thread_id] == 1 else t.name)
    return out


def _check_int64(what: str, value: Any, minimum: int = -(1 << 63)) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not minimum <= value < 1 << 63:
        raise ValueError(f"{what} must be between {minimum} and 2**63-1, got {value}")
    return value


def _spans(kind: str, items: Iterable[Any], fields: Sequence[str]) -> list:
    """ranges/steps checked: each a record with these fields, times int64."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TypeError(f"{kind} must be a list of records, not {type(items).__name__}")
    out = list(items)
    for i, item in enumerate(out):
        for f in fields:
            if not hasattr(item, f):
                raise TypeError(f"{kind}[{i}] must be a frametrace record with {', '.join(fields)}, "
                                f"not {type(item).__name__}")
        if not isinstance(item.name, str):
            raise TypeError(f"{kind}[{i}].name must be a str, not {type(item.name).__name__}")
        for f in ("start_ns", "end_ns"):
            _check_int64(f"{kind}[{i}].{f}", getattr(item, f))
    return out


def write_chrome(
    path: str | os.PathLike[str],
    tracer: Any,
    *,
    pid: int | None = None,
    process_name: str | None = None,
    thread_names: Mapping[int, str] | None = None,
    ranges: Iterable[Any] = (),
    steps: Iterable[Any] = (),
    origin_ns: int | None = None,
    metadata: Mapping[str, Any] | None = None,
    progress: Any = None,
) -> int:
    """Writes a stopped tracer's events as Chrome trace event JSON, straight
    from its records in C (``.json.gz``: gzip-compressed); returns how many
    Python/C events were written.

    Each event is a complete event (``"ph": "X"``), ``cat`` "python" or "c",
    ``ts``/``dur`` in microseconds with three decimals from ``origin_ns``
    (default: the tracer's start), ``tid`` the OS thread id, ``args`` with
    ``file`` ("path:line") and the open_at_start/open_at_stop flags when set.
    Metadata events name the process and the threads; ranges (cat "range")
    and steps (cat "step", on a track of their own) are events too.
    ``otherData.frametrace`` keeps what reading the file back needs: the
    origin, start and stop times, the thread ids, and a wall-clock anchor.
    ``progress(done, total)`` is called every 2**20 events (see
    ``terminal_progress``; total is exact for the threads written, an
    estimate for the others).  The file replaces path only once complete:
    an exception (from progress too) leaves path as it was.  The events
    are replayed and written with the GIL released, one thread at a time:
    other threads run meanwhile, and a ``clear()`` from one of them returns
    at once while this write still writes every event.
    """
    if origin_ns is not None:
        _check_int64("origin_ns", origin_ns)
    path, pid, names, ranges, steps = _prepare(path, tracer, pid, thread_names, process_name,
                                               ranges, steps, "write_chrome")
    origin = tracer.start_ns if origin_ns is None else origin_ns
    # Every traced thread, also one whose ident an earlier thread had, with
    # the C writer's tid: the native id where known, unique per thread
    # (a synthetic one where the OS reused a native id, see _export_tids).
    threads = tracer.threads
    chrome_tids = tracer._export_tids
    thread_names_list = _thread_name_list(tracer, names)
    native = {t.thread_id: ctid for t, ctid in zip(threads, chrome_tids)}  # ranges: the latest

    lines = [_chrome_event("M", "process_name", "__metadata", pid, 0,
                           args={"name": process_name or f"python {pid}"})]
    for t, chrome_tid, name in zip(threads, chrome_tids, thread_names_list):
        lines.append(_chrome_event("M", "thread_name", "__metadata", pid, chrome_tid,
                                   args={"name": name or f"thread {t.thread_id}",
                                         "thread_id": t.thread_id,
                                         "native_thread_id": t.native_thread_id,
                                         "thread_serial": t.serial}))
    if steps:
        lines.append(_chrome_event("M", "thread_name", "__metadata", pid, STEPS_TID,
                                   args={"name": "steps"}))
    for s in steps:
        lines.append(_chrome_event("X", s.name, "step", pid, STEPS_TID,
                                   (s.start_ns - origin, s.end_ns - origin), args={"step": s.step}))
    for r in ranges:
        args = {k: True for k in ("open_at_start", "open_at_end") if getattr(r, k, False)}
        lines.append(_chrome_event("X", r.name, "range", pid, native.get(r.thread_id, r.thread_id),
                                   (r.start_ns - origin, r.end_ns - origin), args=args))
    other = {
        "format": FORMAT,
        "version": VERSION,
        "origin_ns": origin,
        "start_ns": tracer.start_ns,
        "stop_ns": tracer.stop_ns,
        "pid": pid,
        "dropped": tracer.dropped,  # events lost entirely
        "dropped_records": tracer.dropped_records,
        # Keyed like the events, by Chrome tid: the loader maps both alike.
        "dropped_by_thread": {str(ctid): t.dropped for t, ctid in zip(threads, chrome_tids)},
        "thread_ids": {str(ctid): t.thread_id for t, ctid in zip(threads, chrome_tids)},
        # Each thread's own: its serial and its real native id (which a
        # synthetic Chrome tid stands for).
        "thread_serials": {str(ctid): t.serial for t, ctid in zip(threads, chrome_tids)},
        "native_thread_ids": {str(ctid): t.native_thread_id for t, ctid in zip(threads, chrome_tids)},
        # For merging traces of several processes: this moment on both clocks.
        "clock_anchor": {"monotonic_ns": time.monotonic_ns(), "wall_ns": time.time_ns()},
        "metadata": dict(metadata or {}),
    }
    trailer = '"displayTimeUnit":"ns","otherData":' + json.dumps({"frametrace": other}, separators=(",", ":"))
    prelude = ",\n".join(lines)
    compress = path.endswith(".gz")
    with output_path(path) as where:
        try:
            return tracer._write_chrome(where, pid=pid, origin_ns=origin, prelude=prelude,
                                        trailer=trailer, compress=compress, progress=progress,
                                        name=path)
        except RuntimeError as exc:
            if not compress or "zlib" not in str(exc):
                raise
        # Built without zlib: write plain to a file of our own, then compress here.
        with tempfile.NamedTemporaryFile(dir=os.path.dirname(where) if where != path else None,
                                         prefix=".frametrace.", suffix=".tmp") as plain:
            count = tracer._write_chrome(plain.name, pid=pid, origin_ns=origin, prelude=prelude,
                                         trailer=trailer, compress=False, progress=progress,
                                         name=path)
            with open(where, "wb") as raw, gzip.GzipFile(os.path.basename(path), "wb",
                                                         fileobj=raw) as dst:
                shutil.copyfileobj(plain, dst, 1 << 20)
        return count


# ---- Perfetto's native protobuf trace (.pftrace) ----------------------------

def write_perfetto(
    path: str | os.PathLike[str],
    tracer: Any,
    *,
    pid: int | None = None,
    process_name: str | None = None,
    thread_names: Mapping[int, str] | None = None,
    ranges: Iterable[Any] = (),
    steps: Iterable[Any] = (),
    progress: Any = None,
) -> int:
    """Writes a stopped tracer's events as Perfetto's native protobuf trace
    (``.pftrace``; ``.gz`` compressed), straight from its records in C, with
    no protobuf library; returns how many Python/C events were written.

    TrackEvent packets: a track per process and per thread, each event a
    SLICE_BEGIN/SLICE_END pair on its thread's track, each thread on a
    packet sequence of its own that interns the names, source locations and
    categories it uses where it first uses them, and whose timestamps are
    deltas on an incremental clock; a session's steps and each thread's
    ranges on tracks of their own.  Timestamps are the tracer's
    CLOCK_MONOTONIC nanoseconds, declared so: the file's first packets are
    clock snapshots relating CLOCK_MONOTONIC to CLOCK_BOOTTIME (read
    together at start and at stop), which Perfetto takes as the trace's
    clock, as for system traces of the machine.  ``progress`` as for
    ``write_chrome``; the file replaces path only once complete.
    """
    path, pid, names, ranges, steps = _prepare(path, tracer, pid, thread_names, process_name,
                                               ranges, steps, "write_perfetto")
    tracks = []
    if steps:
        tracks.append(("steps", 1, [(s.name, s.start_ns, s.end_ns) for s in steps]))
    by_thread: dict = {}
    for r in ranges:
        by_thread.setdefault(r.thread_id, []).append((r.name, r.start_ns, r.end_ns))
    thread_names_list = _thread_name_list(tracer, names)
    latest = {t.thread_id: name for t, name in zip(tracer.threads, thread_names_list) if name}
    # A thread descriptor holds no args: a synthetic tid's real one goes in
    # the thread's name.
    for i, (t, tid) in enumerate(zip(tracer.threads, tracer._export_tids)):
        if t.native_thread_id and tid != t.native_thread_id:
            thread_names_list[i] = (f"{thread_names_list[i] or f'thread {t.thread_id}'} "
                                    f"[tid {t.native_thread_id}]")
    for tid, spans in by_thread.items():
        tracks.append((f"ranges: {names.get(tid) or latest.get(tid, tid)}", 0, spans))
    compress = path.endswith(".gz")
    with output_path(path) as where:
        return tracer._write_perfetto(where, pid=pid, process_name=process_name or f"python {pid}",
                                      thread_names=thread_names_list,
                                      tracks=tracks, compress=compress, progress=progress,
                                      name=path)


class TerminalProgress:
    """A ``progress(done, total)`` callback printing "label: NN%" on stream
    (default stderr), only when it is a terminal, and only once the work has
    taken more than ``delay`` seconds: short work and logs print nothing."""

    def __init__(self, label: str, stream: Optional[IO[str]] = None, delay: float = 1.0):
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.delay = delay
        self.started = time.monotonic()
        self.last = 0.0
        self.percent = -1
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        percent = 100 * done // max(total, 1)
        if now - self.started < self.delay or now - self.last < 0.25 or percent == self.percent:
            return
        self.last = now
        self.percent = percent
        self.shown = True
        self.stream.write(f"\r{self.label}: {percent}%")
        self.stream.flush()

    def close(self) -> None:
        """Ends the line, if anything was shown."""
        if self.shown:
            self.stream.write(f"\r{self.label}: 100%\n")
            self.stream.flush()
            self.shown = False
