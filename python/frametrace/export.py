"""Writing traces to files.

Every path writes Chrome trace event JSON (``write_chrome``; ``.json``,
``.json.gz``), Perfetto's protobuf trace (``write_perfetto``;
``.pftrace``, ``.pftrace.gz``) or a Parquet dataset (a ``.parquet``
directory, ``frametrace._dataset``), by the path's extension
(``write_trace``).
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
import sys
import tempfile
import time
import warnings
from typing import IO, Any, Callable, Iterable, Mapping, NamedTuple, Optional, Sequence

from ._output import output_path
from . import _tracer
from ._ranks import distributed_info
from ._ranks import process_name as _rank_name

# What otherData.frametrace of the Chrome JSON written says it is.
FORMAT = "frametrace"
VERSION = 1


def _json_document(path: str, what: str) -> Any:
    """The JSON document in path (gzip-compressed if it ends in .gz);
    ValueError naming path and what it should have been if it is none."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable {what}: {exc}") from exc
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply to be a {what}") from None


# ---- Chrome trace event JSON (Perfetto UI, chrome://tracing) ----------------

# Tracks of their own in Chrome JSON: a tid no OS thread has (Linux's
# are below 2**22; the synthetic tids of threads whose native id an
# earlier thread had start at 2**30).  Perfetto's JSON importer takes tid
# 0 for the main thread, and drops a slice that partly overlaps another of
# its track: steps and ranges do not share the Python frames' track.
STEPS_TID = (1 << 29) - 1
RANGES_TID_BASE = 1 << 29  # + k: the ranges of the k-th thread that has some
# Tracks of slices from other tools (frametrace.torch: GPU streams, ops of
# threads frametrace did not trace, ops that do not nest in the frames).
SLICE_TRACKS_TID_BASE = (1 << 29) + (1 << 20)  # + k: the k-th such track
# Perfetto's UI shows slices up to this depth (deeper ones stay unterminated).
PERFETTO_MAX_DEPTH = 512
# The formats by extension (write_trace).
_FORMATS = {".json": "chrome", ".json.gz": "chrome", ".pftrace": "perfetto",
            ".pftrace.gz": "perfetto", ".parquet": "parquet"}


def output_format(path: str | os.PathLike[str]) -> str:
    """trace_format(path), where a trace is to be written: a device or FIFO
    that exists (/dev/stdout, a pipe) takes Chrome JSON whatever its name."""
    try:
        return trace_format(path)
    except ValueError:
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                return "chrome"
        except OSError:
            pass
        raise


def trace_format(path: str | os.PathLike[str]) -> str:
    """"chrome", "perfetto" or "parquet", by path's extension (.json,
    .json.gz, .pftrace, .pftrace.gz, .parquet); ValueError for any other."""
    name = os.fspath(path)
    if not isinstance(name, str):
        raise TypeError(f"a trace path must be a str or os.PathLike[str], not {type(name).__name__}")
    for ext in sorted(_FORMATS, key=len, reverse=True):
        if name.rstrip(os.sep).endswith(ext):
            return _FORMATS[ext]
    raise ValueError(f"{name}: unknown trace extension: use .json, .json.gz (Chrome trace JSON), "
                     f".pftrace, .pftrace.gz (Perfetto) or .parquet (a dataset: a directory)")


def check_writable_format(path: str | os.PathLike[str]) -> str:
    """output_format(path), refusing before any work a format whose extra
    is not installed (ImportError naming it): what run and attach check
    before the program runs."""
    fmt = output_format(path)
    if fmt == "parquet":
        from ._dataset import check_available

        check_available()
    return fmt


class Slice(NamedTuple):
    """A slice another tool recorded (torch.profiler's ops and kernels:
    ``frametrace.torch``), on the tracer's clock (CLOCK_MONOTONIC ns).
    On a traced thread's track it must nest with that thread's frames."""

    name: str
    category: str
    start_ns: int
    end_ns: int
    args: Optional[dict] = None


def _check_slices(thread_slices: Optional[Mapping[int, Sequence[Slice]]],
                  slice_tracks: Sequence[tuple], serials: Sequence[int]) -> tuple[dict, list]:
    """thread_slices ({thread serial: [Slice]}) and slice_tracks ([(track
    name, [Slice])]) checked, each list sorted by start, longest first."""
    known = set(serials)
    by_serial: dict[int, list] = {}
    for serial, items in (thread_slices or {}).items():
        if serial not in known:
            raise ValueError(f"thread_slices: no traced thread has serial {serial!r}")
        by_serial[serial] = sorted(_spans("thread_slices", items, Slice._fields[:4]),
                                   key=lambda x: (x.start_ns, -x.end_ns))
    tracks = []
    for i, track in enumerate(slice_tracks or ()):
        if not (isinstance(track, tuple) and len(track) == 2 and isinstance(track[0], str)):
            raise TypeError(f"slice_tracks[{i}] must be a (name, [Slice]) tuple")
        tracks.append((track[0], sorted(_spans("slice_tracks", track[1], Slice._fields[:4]),
                                        key=lambda x: (x.start_ns, -x.end_ns))))
    return by_serial, tracks


def _slice_lists(pid: int, thread_slices: Optional[Mapping[int, Sequence[Slice]]],
                 slice_tracks: Sequence[tuple], tid_of_serial: Mapping[int, int]
                 ) -> tuple[list, list]:
    """What the C writer writes of other tools' slices: (the metadata
    events naming the tracks of their own, SLICE_TRACKS_TID_BASE + k;
    [(tid, [Slice])]: each slice checked, sorted and written there without
    the GIL, after the frames)."""
    lists: list = []
    for serial, items in (thread_slices or {}).items():
        if serial not in tid_of_serial:
            raise ValueError(f"thread_slices: no traced thread has serial {serial!r}")
        if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
            raise TypeError(f"thread_slices must be a list of records, not {type(items).__name__}")
        # A list is passed as it is: the C writer reads it in turns,
        # sharing the GIL, and copes with its changing meanwhile.
        lists.append((tid_of_serial[serial], items if type(items) is list else list(items)))
    lines = []
    for k, track in enumerate(slice_tracks or ()):
        if not (isinstance(track, tuple) and len(track) == 2 and isinstance(track[0], str)):
            raise TypeError(f"slice_tracks[{k}] must be a (name, [Slice]) tuple")
        if isinstance(track[1], (str, bytes)) or not isinstance(track[1], Iterable):
            raise TypeError(f"slice_tracks must be a list of records, not {type(track[1]).__name__}")
        tid = SLICE_TRACKS_TID_BASE + k
        lines.append(_chrome_event("M", "thread_name", "__metadata", pid, tid, args={"name": track[0]}))
        lists.append((tid, track[1] if type(track[1]) is list else list(track[1])))
    return lines, lists


def _args_text(args: Any) -> str:
    """A slice's args as the Chrome writers write them."""
    return json.dumps(args, separators=(",", ":"))


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


class _Job(NamedTuple):
    """What a writer reads of a Trace, checked."""

    trace: Any
    path: str
    pid: int
    process_name: Optional[str]
    rank: Optional[dict]
    ranges: list
    steps: list
    origin: int
    metadata: dict


def _prepare(trace: Any, path: str | os.PathLike[str], writer: str) -> _Job:
    """What every writer starts with: the trace (as_trace()) and its facts,
    checked (a clear TypeError, not an AttributeError from deep inside)."""
    from ._trace import _as_trace

    # Given a tracer, this call reads it: a clear() from another thread
    # meanwhile frees the records once the write ends.
    trace = _as_trace(trace, keep=False)
    trace._check()
    tracer = trace.tracer
    if tracer is not None and (tracer.stop_ns is None or tracer.active):
        raise RuntimeError(f"{writer}() needs a stopped tracer")
    pid = _check_int64("pid", trace.pid, minimum=0)
    process_name = trace.process_name
    if process_name is not None and not isinstance(process_name, str):
        raise TypeError(f"process_name must be a str, not {type(process_name).__name__}")
    extra = trace.extra_metadata
    if not isinstance(extra, Mapping):
        raise TypeError(f"Trace.extra_metadata must be a mapping, not {type(extra).__name__}")
    metadata = {**extra, "cycle": trace.cycle, "session_end_ns": trace.session_end_ns}
    if trace.parent_pid is not None:
        metadata = {"parent_pid": trace.parent_pid, **metadata}
    rank = _distributed(trace.distributed)
    if rank is not None:
        metadata = {"distributed": rank, **metadata}
    return _Job(trace, os.fspath(path), pid, process_name or _rank_name(rank), rank,
                _spans("ranges", trace.ranges, ("name", "thread_id", "start_ns", "end_ns")),
                _spans("steps", trace.steps, ("name", "step", "start_ns", "end_ns")),
                _check_int64("session_start_ns", trace.session_start_ns), metadata)


def _thread_name_list(trace: Any) -> list:
    """One name (or None) per thread of the trace's tracer, in serial order:
    the Trace's (Trace.threads, by serial), else the tracer's own."""
    given = {}
    for i, t in enumerate(trace.threads):
        if not isinstance(t, _tracer.ThreadInfo):
            raise TypeError(f"Trace.threads[{i}] must be a frametrace.ThreadInfo, not "
                            f"{type(t).__name__}")
        if t.name is not None and not isinstance(t.name, str):
            raise TypeError(f"Trace.threads[{i}].name must be a str or None, not "
                            f"{type(t.name).__name__}")
        given[t.serial] = t.name
    return [given.get(t.serial, t.name) for t in trace._records().threads]


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


def _warn_depth(path: str, max_depth: int) -> None:
    """Perfetto's UI leaves slices past its nesting limit unterminated."""
    if max_depth + 1 > PERFETTO_MAX_DEPTH:
        warnings.warn(f"{path}: calls nest {max_depth + 1} deep; Perfetto's UI shows "
                      f"{PERFETTO_MAX_DEPTH} levels (deeper slices appear unterminated there; "
                      f"the file holds them all)", RuntimeWarning, stacklevel=3)


def _chrome_tracks(pid: int, origin: int, thread_tid: Callable[[int], int],
                   thread_label: Callable[[int], str], ranges: list, steps: list) -> list:
    """The prelude's events of the steps' track and of each thread's ranges'
    track (tracks no OS thread has: see STEPS_TID)."""
    lines = []
    if steps:
        lines.append(_chrome_event("M", "thread_name", "__metadata", pid, STEPS_TID,
                                   args={"name": "steps"}))
    for s in steps:
        lines.append(_chrome_event("X", s.name, "step", pid, STEPS_TID,
                                   (s.start_ns - origin, s.end_ns - origin), args={"step": s.step}))
    tracks: dict[int, int] = {}
    for r in ranges:
        owner = thread_tid(r.thread_id)
        track = tracks.get(owner)
        if track is None:
            track = tracks[owner] = RANGES_TID_BASE + len(tracks)
            lines.append(_chrome_event("M", "thread_name", "__metadata", pid, track,
                                       args={"name": f"ranges: {thread_label(r.thread_id)}"}))
        # thread_tid: the track of the thread's frames, for load() and merge.
        args: dict[str, Any] = {"thread_tid": owner}
        args.update((k, True) for k in ("open_at_start", "open_at_end") if getattr(r, k, False))
        lines.append(_chrome_event("X", r.name, "range", pid, track,
                                   (r.start_ns - origin, r.end_ns - origin), args=args))
    return lines


def _thread_parts(pid: int, process_name: str | None, rows: Iterable[tuple]) -> tuple[list, dict]:
    """What both Chrome writers say of the process and its threads: the
    metadata events naming them, and otherData's per-thread maps, keyed like
    the events by Chrome tid (the loader maps both alike).  rows: (chrome
    tid, thread_id, native_thread_id, serial, name, dropped) per thread."""
    lines = [_chrome_event("M", "process_name", "__metadata", pid, 0,
                           args={"name": process_name or f"python {pid}"})]
    maps: dict[str, dict] = {"dropped_by_thread": {}, "thread_ids": {}, "thread_serials": {},
                             "native_thread_ids": {}}
    for ctid, thread_id, native, serial, name, dropped in rows:
        lines.append(_chrome_event("M", "thread_name", "__metadata", pid, ctid,
                                   args={"name": name, "thread_id": thread_id,
                                         "native_thread_id": native, "thread_serial": serial}))
        key = str(ctid)
        maps["dropped_by_thread"][key] = dropped
        # Each thread's own: its serial and its real native id (which a
        # synthetic Chrome tid stands for); an id not known is left out.
        maps["thread_serials"][key] = serial
        for field, value in (("thread_ids", thread_id), ("native_thread_ids", native)):
            if value is not None:
                maps[field][key] = value
    return lines, maps


def read_clock_anchor() -> dict:
    """One moment on both clocks, {"monotonic_ns", "wall_ns", "width_ns"}:
    the tightest of several bracketed reads (monotonic, wall, monotonic),
    the wall read paired with the bracket's midpoint; width_ns, the
    bracket's width, bounds the pair's error (tens of ns)."""
    mono, wall, width = _tracer._wall_anchor()
    return {"monotonic_ns": mono, "wall_ns": wall, "width_ns": width}


def _anchor(given: Mapping[str, int] | None) -> dict:
    if given is None:
        return read_clock_anchor()
    if not isinstance(given, Mapping):
        raise TypeError(f"clock_anchor must be a mapping, not {type(given).__name__}")
    out = {k: _check_int64(f"clock_anchor[{k!r}]", given.get(k)) for k in ("monotonic_ns", "wall_ns")}
    if given.get("width_ns") is not None:  # absent in older files
        out["width_ns"] = _check_int64("clock_anchor['width_ns']", given["width_ns"], minimum=0)
    return out


def _chrome_head(other: Mapping[str, Any], distributed: Mapping[str, Any] | None = None,
                 top_level: Mapping[str, Any] | None = None) -> str:
    """The members before traceEvents: otherData first, so that a reader
    has the metadata before the events; a rank's distributedInfo, the
    member torch.profiler writes, laid out as torch lays it out (Holistic
    Trace Analysis finds a file's rank by the text ``"rank": N``); then
    top_level's (other tools' members, frametrace.torch's), each on its
    own line as torch writes them."""
    rank = ('\n"distributedInfo":' + json.dumps(dict(distributed)) + ","
            if distributed is not None else "")
    more = "".join(f"\n{json.dumps(str(k))}:{json.dumps(v, separators=(',', ':'))},"
                   for k, v in _top_level(top_level).items())
    return ('"otherData":' + json.dumps({"frametrace": other}, separators=(",", ":"))
            + ',"displayTimeUnit":"ns",' + rank + more + "\n")


# Members frametrace writes itself, which top_level cannot replace.
_OWN_MEMBERS = frozenset(("otherData", "displayTimeUnit", "distributedInfo", "traceEvents"))


def _top_level(given: Mapping[str, Any] | None) -> dict:
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise TypeError(f"top_level must be a mapping, not {type(given).__name__}")
    for key in given:
        if not isinstance(key, str):
            raise TypeError(f"top_level keys must be str, not {type(key).__name__}")
        if key in _OWN_MEMBERS:
            raise ValueError(f"top_level[{key!r}]: a member frametrace writes itself")
    return dict(given)


def _distributed(given: Any) -> dict | None:
    """Trace.distributed checked: "auto" (this process's rank, if any),
    None, or a mapping with the rank."""
    if isinstance(given, str) and given == "auto":
        return distributed_info()
    if given is None:
        return None
    if not isinstance(given, Mapping):
        raise TypeError(f"distributed must be \"auto\", None or a mapping, not {type(given).__name__}")
    out = dict(given)
    rank = out.get("rank")
    if rank is not None:
        _check_int64("distributed['rank']", rank, minimum=0)
    return out


def write_trace(trace: Any, path: str | os.PathLike[str], *, progress: Any = None) -> int:
    """Writes trace (a Trace, or what ``as_trace()`` takes) in the format
    path's extension names (``write_chrome``, ``write_perfetto`` or, for a
    ``.parquet`` dataset, ``frametrace._dataset.write_dataset``); returns
    how many Python/C events were written."""
    fmt = output_format(path)
    if fmt == "parquet":
        from ._dataset import write_dataset

        return write_dataset(trace, path, progress=progress)
    writer = write_chrome if fmt == "chrome" else write_perfetto
    return writer(trace, path, progress=progress)


def write_chrome(trace: Any, path: str | os.PathLike[str], *, progress: Any = None) -> int:
    """Writes a Trace (or what ``frametrace.as_trace()`` takes: a stopped
    tracer, a snapshot, a loaded trace) as Chrome trace event JSON
    (``.json.gz``: gzip-compressed), in C; returns how many Python/C events
    were written.  What the file holds besides the events (process name,
    ranges, steps, rank, slices, clock anchor, metadata, ``chrome_top_level``)
    comes from the Trace's fields.

    ``progress(done, total)`` is called every 2**20 events (see
    ``TerminalProgress``).  The file replaces path only once complete: an
    exception (from progress too) leaves path as it was.  The layout, and
    what writing does with the GIL: :doc:`/viewing`.
    """
    job = _prepare(trace, path, "write_chrome")
    trace = job.trace
    if trace.tracer is None:  # load()'s, or a window that traced no Python
        return _write_events(job, "chrome", progress)
    tracer = trace._records()
    path, pid, process_name, origin = job.path, job.pid, job.process_name, job.origin
    # Every traced thread, also one whose ident an earlier thread had, with
    # the C writer's tid: the native id where known, unique per thread
    # (a synthetic one where the OS reused a native id, see _export_tids).
    threads = tracer.threads
    chrome_tids = tracer._export_tids
    thread_names_list = _thread_name_list(trace)
    native = {t.thread_id: ctid for t, ctid in zip(threads, chrome_tids)}  # ranges: the latest
    label = {t.thread_id: name or f"thread {t.thread_id}"
             for t, name in zip(threads, thread_names_list)}

    lines, maps = _thread_parts(pid, process_name, [
        (ctid, t.thread_id, t.native_thread_id, t.serial, name or f"thread {t.thread_id}",
         t.dropped) for t, ctid, name in zip(threads, chrome_tids, thread_names_list)])
    lines += _chrome_tracks(pid, origin, lambda tid: native.get(tid, tid),
                            lambda tid: label.get(tid, f"thread {tid}"), job.ranges, job.steps)
    track_lines, slices = _slice_lists(pid, trace.slices, trace.slice_tracks,
                                       {t.serial: ctid for t, ctid in zip(threads, chrome_tids)})
    lines += track_lines
    other = _other_data(tracer, pid, origin, maps, trace.clock_anchor, job.metadata)
    head = _chrome_head(other, job.rank, trace.chrome_top_level)
    prelude = ",\n".join(lines)
    compress = path.endswith(".gz")
    with output_path(path) as where:
        try:
            count, depth = tracer._write_chrome(where, pid=pid, origin_ns=origin, head=head,
                                                prelude=prelude, compress=compress,
                                                progress=progress, name=path, slices=slices,
                                                args_text=_args_text)
        except RuntimeError as exc:
            if not compress or "zlib" not in str(exc):
                raise
            # Built without zlib: write plain to a file of our own, then compress here.
            with tempfile.NamedTemporaryFile(dir=os.path.dirname(where) if where != path else None,
                                             prefix=".frametrace.", suffix=".tmp") as plain:
                count, depth = tracer._write_chrome(plain.name, pid=pid, origin_ns=origin,
                                                    head=head, prelude=prelude, compress=False,
                                                    progress=progress, name=path, slices=slices,
                                                    args_text=_args_text)
                with open(where, "wb") as raw, gzip.GzipFile(os.path.basename(path), "wb",
                                                             fileobj=raw) as dst:
                    shutil.copyfileobj(plain, dst, 1 << 20)
    _warn_depth(path, depth)
    return count


def _other_data(tracer: Any, pid: int, origin: int, maps: dict,
                clock_anchor: Mapping[str, int] | None, metadata: Mapping[str, Any] | None) -> dict:
    """otherData.frametrace of a tracer's trace: what reading it back needs
    (a .pftrace holds it too)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "origin_ns": origin,
        "start_ns": tracer.start_ns,
        "stop_ns": tracer.stop_ns,
        "pid": pid,
        "dropped": tracer.stats.dropped,  # events lost entirely
        "dropped_records": tracer.stats.dropped_records,
        # The clock's own uncertainty: each anchor converting ticks to ns is
        # off by at most half its width.
        "anchor_widths_ns": list(tracer.anchor_widths_ns),
        **maps,
        # For merging traces of several processes: this moment on both clocks.
        "clock_anchor": _anchor(clock_anchor),
        "metadata": dict(metadata or {}),
    }


def _write_events(job: _Job, output: str, progress: Any) -> int:
    """A Trace without tracer records (one load() read, or a session window
    that traced no Python), from its Events, by the C writers of
    write_chrome and write_perfetto (output: "chrome" or "perfetto"), laid
    out as they lay out a tracer's; returns how many Python/C events."""
    trace, path, pid, origin = job.trace, job.path, job.pid, job.origin
    if getattr(trace, "processes", None):
        raise ValueError("a merged trace (of several processes) is written by frametrace merge, "
                         "from the files it merged")
    events = trace.events
    events = events if type(events) is list else list(events)
    # One Chrome tid per thread (serial), by the rule of a tracer's.
    infos = {t.serial: t for t in trace.threads}
    for e in events:
        if isinstance(e, _tracer.Event) and e.thread_serial not in infos:
            infos[e.thread_serial] = _ThreadOf(e)
    for t in infos.values():
        _check_thread(t, events)
    threads = [infos[serial] for serial in sorted(infos)]
    # An id left unknown (None) is 0 there: the tid rule's next choice.
    tids = _tracer._export_tids([(t.serial, t.thread_id or 0, t.native_thread_id or 0)
                                 for t in threads])
    tid_of = {t.serial: tid for t, tid in zip(threads, tids)}
    names = [t.name or f"thread {t.thread_id}" for t in threads]
    lines, maps = _thread_parts(pid, job.process_name, [
        (tid, t.thread_id, t.native_thread_id, t.serial, name, t.dropped or 0)
        for t, tid, name in zip(threads, tids, names)])
    traced = trace.tracer_stop_ns is not None
    stop = trace.tracer_stop_ns if traced else trace.session_end_ns
    if not traced:  # a list of Events made into a Trace: the session held them
        stop = max([stop] + [e.end_ns for e in events
                             if isinstance(e, _tracer.Event) and type(e.end_ns) is int])
    other = {
        "format": FORMAT, "version": VERSION, "origin_ns": origin,
        "start_ns": trace.tracer_start_ns if traced else origin, "stop_ns": stop,
        "pid": pid, "dropped": trace.stats.dropped,
        "dropped_records": trace.stats.dropped_records, **maps,
        "metadata": {**job.metadata, "python_traced": traced},
    }
    # The trace's own (a new one would not fit the times of a loaded trace);
    # none: merge refuses the file rather than misplace it.
    if trace.clock_anchor is not None:
        other["clock_anchor"] = _anchor(trace.clock_anchor)
    kw: dict[str, Any] = {"events": events, "threads": list(tid_of.items()),
                          "stop_ns": stop if traced else None, "pid": pid,
                          "progress": progress, "name": path,
                          "compress": path.endswith(".gz")}
    if output == "chrome":
        label = {t.thread_id: name for t, name in zip(threads, names)}  # ranges: the latest
        by_ident = {t.thread_id: tid for t, tid in zip(threads, tids)}
        lines += _chrome_tracks(pid, origin, lambda tid: by_ident.get(tid, tid),
                                lambda tid: label.get(tid, f"thread {tid}"), job.ranges, job.steps)
        track_lines, slices = _slice_lists(pid, trace.slices, trace.slice_tracks, tid_of)
        kw.update(format="chrome", origin_ns=origin,
                  head=_chrome_head(other, job.rank, trace.chrome_top_level),
                  prelude=",\n".join(lines + track_lines), slices=slices, args_text=_args_text)
    else:
        thread_names = [t.name for t in threads]
        tracks, per_thread = _perfetto_tracks(other, job, threads, tids, thread_names)
        kw.update(format="perfetto", process_name=job.process_name or f"python {pid}",
                  thread_names=thread_names, tracks=tracks, thread_slices=per_thread,
                  frametrace=json.dumps(other, separators=(",", ":")))
    with output_path(path) as where:
        count, depth = _tracer._write_events(where, **kw)
    _warn_depth(path, depth)
    return count


def _check_thread(t: Any, events: list) -> None:
    """ValueError naming the first event of thread t (else the thread) if
    its serial is no int or its ids are neither ids nor None."""
    def is_id(v: Any) -> bool:
        return v is None or (type(v) is int and 0 <= v < 1 << 64)
    if type(t.serial) is int and is_id(t.thread_id) and is_id(t.native_thread_id):
        return
    i = next((i for i, e in enumerate(events) if isinstance(e, _tracer.Event)
              and (e.thread_serial, e.thread_id, e.native_thread_id)
              == (t.serial, t.thread_id, t.native_thread_id)), None)
    raise ValueError(f"{'threads' if i is None else f'events[{i}]'}: a thread's serial must "
                     "be an int, and its thread_id and native_thread_id ids (ints from 0) or "
                     f"None, not {t.serial!r}, {t.thread_id!r}, {t.native_thread_id!r}")


class _ThreadOf:
    """What an Event says of its thread, where the trace lists none."""

    def __init__(self, e: Any):
        self.serial = e.thread_serial
        self.thread_id = e.thread_id
        self.native_thread_id = e.native_thread_id
        self.name = None
        self.dropped = 0


# ---- Perfetto's native protobuf trace (.pftrace) ----------------------------

def write_perfetto(trace: Any, path: str | os.PathLike[str], *, progress: Any = None) -> int:
    """Writes a Trace (or what ``frametrace.as_trace()`` takes) as
    Perfetto's protobuf trace (``.pftrace``; ``.gz`` compressed), in C;
    returns how many Python/C events were written.  What it holds besides
    the events, ``progress`` and the file's replacement are as for
    ``write_chrome``; a rank names the process "rank N".  The layout and
    the clocks: :doc:`/viewing`.
    """
    job = _prepare(trace, path, "write_perfetto")
    trace = job.trace
    path, pid, process_name = job.path, job.pid, job.process_name
    tracer = trace._records()
    if tracer is None:
        return _write_events(job, "perfetto", progress)
    thread_names_list = _thread_name_list(trace)
    chrome_tids = tracer._export_tids
    _lines, maps = _thread_parts(pid, process_name, [
        (ctid, t.thread_id, t.native_thread_id, t.serial, name or f"thread {t.thread_id}",
         t.dropped) for t, ctid, name in zip(tracer.threads, chrome_tids, thread_names_list)])
    other = _other_data(tracer, pid, job.origin, maps, trace.clock_anchor, job.metadata)
    tracks, per_thread = _perfetto_tracks(other, job, tracer.threads, chrome_tids,
                                          thread_names_list)
    compress = path.endswith(".gz")
    with output_path(path) as where:
        count, depth = tracer._write_perfetto(
            where, pid=pid, process_name=process_name or f"python {pid}",
            thread_names=thread_names_list, tracks=tracks, compress=compress,
            progress=progress, name=path, thread_slices=per_thread,
            frametrace=json.dumps(other, separators=(",", ":")))
    _warn_depth(path, depth)
    return count


def _perfetto_tracks(other: dict, job: _Job, threads: Sequence[Any], tids: Sequence[int],
                     thread_names_list: list) -> tuple[list, list | None]:
    """What a .pftrace holds beside the calls: other (otherData.frametrace)
    completed with what a Chrome file says in events, the threads' track
    names (thread_names_list, one per thread, completed in place), and the
    trace's tracks and the threads' own slices as the C writer takes them.
    threads: each with thread_id, native_thread_id and serial; tids their
    Chrome tids."""
    trace, pid, process_name, ranges, steps = job.trace, job.pid, job.process_name, job.ranges, job.steps
    # (name, category, spans): spans (name, start, end[, category]).
    tracks: list[tuple[str, int, list[tuple]]] = []
    if steps:
        tracks.append(("steps", 1, [(s.name, s.start_ns, s.end_ns) for s in steps]))
    by_thread: dict = {}
    for r in ranges:
        by_thread.setdefault(r.thread_id, []).append((r.name, r.start_ns, r.end_ns))
    latest = {t.thread_id: name for t, name in zip(threads, thread_names_list) if name}
    owner = {t.thread_id: ctid for t, ctid in zip(threads, tids)}
    other.update(
        process_name=process_name or f"python {pid}",
        thread_names={str(ctid): name or f"thread {t.thread_id}"
                      for t, ctid, name in zip(threads, tids, thread_names_list)},
        ranges=[[r.name, owner.get(r.thread_id, r.thread_id), r.start_ns, r.end_ns,
                 bool(getattr(r, "open_at_start", False)), bool(getattr(r, "open_at_end", False))]
                for r in ranges],
        steps=[[s.name, s.step, s.start_ns, s.end_ns] for s in steps],
        session_tracks=(1 if steps else 0) + len({r.thread_id for r in ranges}))
    # A thread descriptor holds no args: a synthetic tid's real one goes in
    # the thread's name.
    for i, (t, tid) in enumerate(zip(threads, tids)):
        if t.native_thread_id and tid != t.native_thread_id:
            thread_names_list[i] = (f"{thread_names_list[i] or f'thread {t.thread_id}'} "
                                    f"[tid {t.native_thread_id}]")
    for tid, spans in by_thread.items():
        tracks.append((f"ranges: {latest.get(tid, tid)}", 0, spans))
    by_serial, extra_tracks = _check_slices(trace.slices, trace.slice_tracks,
                                            [t.serial for t in threads])
    for name, items in extra_tracks:
        tracks.append((name, 0, [(x.name, x.start_ns, x.end_ns, x.category) for x in items]))
    per_thread = None
    if by_serial:
        per_thread = [[(x.name, x.start_ns, x.end_ns, x.category) for x in by_serial.get(t.serial, ())]
                      for t in threads]
    return tracks, per_thread


class TerminalProgress:
    """A ``progress(done, total)`` callback printing "label: NN%" on stream
    (default stderr), only when it is a terminal, and only once the work has
    taken more than ``delay`` seconds: short work and logs print nothing.
    A stream that fails (closed, gone) is given up, never raised from: the
    work it shows goes on."""

    def __init__(self, label: str, stream: Optional[IO[str]] = None, delay: float = 1.0):
        self.label = label
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        try:
            self.enabled = bool(isatty and isatty())
        except (OSError, ValueError):  # a closed stream
            self.enabled = False
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
        self._write(f"\r{self.label}: {percent}%")

    def close(self) -> None:
        """Ends the line, if anything was shown."""
        if self.shown:
            self.shown = False
            self._write(f"\r{self.label}: 100%\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.enabled = self.shown = False
