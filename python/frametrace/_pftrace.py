"""Reading back a .pftrace frametrace wrote (``load()``'s other format):
the file read whole (gzip-compressed: at most 64 times its size, at least
8 MiB, as the JSON reader bounds a value), decoded in C
(``_tracer._load_perfetto``, csrc/load_perfetto.c), and its metadata
(the ``otherData.frametrace`` its Chrome JSON would have, plus what the
JSON says in events: thread and process names, ranges, steps) checked
here.  The Trace is built by the same code as from Chrome JSON (the
loader's ``_ChromeEvents`` and ``_chrome_trace``), so both files of one
recording load to equal Traces (but for other tools' slices' args, which
a .pftrace does not hold)."""
from __future__ import annotations

import gzip
import os
import zlib
from typing import Any, Callable, Optional

from ._reader import (_GZIP_RATIO, _MAX_VALUE, _Bad, _BigInt, _by_thread, _check, _decoder,
                      _frametrace_other, _get, Progress)
from ._tracer import _load_perfetto
from .export import SLICE_TRACKS_TID_BASE, Slice

# A Trace's first byte: field 1 (TracePacket), length-delimited.
_PACKET = b"\x0a"


def sniff(path: str) -> bool:
    """Whether path (gzip-compressed or not) starts as a protobuf trace."""
    try:
        with open(path, "rb") as raw:
            head = raw.read(2)
            raw.seek(0)
            if head != b"\x1f\x8b":
                return head[:1] == _PACKET
            with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                return gz.read(1) == _PACKET
    except (EOFError, zlib.error, gzip.BadGzipFile):
        return False


def read(path: str, progress: Progress = None) -> Optional[bytes]:
    """The (decompressed) bytes of path if it is a protobuf trace, else
    None (the JSON reader's); bounded as the JSON reader bounds a value."""
    with open(path, "rb") as raw:
        size = os.fstat(raw.fileno()).st_size
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        if not compressed:
            if raw.read(1) != _PACKET:
                return None
            raw.seek(0)
            data = raw.read()
            if progress is not None:
                progress(size, size)
            return data
        limit = max(_MAX_VALUE, size * _GZIP_RATIO)
        with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            try:
                if gz.read(1) != _PACKET:
                    return None
            except (EOFError, zlib.error, gzip.BadGzipFile):
                return None  # the JSON reader says what is wrong
            chunks, total = [_PACKET], 1
            try:
                while True:
                    chunk = gz.read(1 << 22)
                    if not chunk:
                        break
                    total += len(chunk)
                    if total > limit:
                        raise _Bad(f"decompresses to more than {limit} bytes ({_GZIP_RATIO} "
                                   f"times the file): no trace frametrace wrote")
                    chunks.append(chunk)
                    if progress is not None:
                        progress(min(raw.tell(), size), size)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise _Bad(f"truncated or corrupted gzip data ({exc})") from None
        return b"".join(chunks)


def load(path: str, data: bytes, events_of: Callable[[dict], Any],
         trace_of: Callable[[Any], Any]) -> Any:
    """The Trace of data, path's bytes: events_of(ft) is the loader's
    collector of a file whose otherData.frametrace is ft, trace_of(col)
    its Trace."""
    col: Any = None
    keys: dict = {}  # track uuid -> the (pid, tid) key of the slices there

    def on_header(meta: Optional[bytes], process: Optional[tuple], threads: list,
                  tracks: list) -> dict:
        nonlocal col
        if meta is None:
            raise _Bad("a Perfetto trace not written by frametrace (no frametrace metadata): "
                       "load() reads the .pftrace frametrace writes")
        try:
            text = meta.decode("utf-8")
            ft, end = _decoder().raw_decode(text)
        except (UnicodeDecodeError, ValueError, _BigInt, RecursionError):
            raise _Bad("frametrace's metadata is not JSON") from None
        if end != len(text):
            raise _Bad("frametrace's metadata is not JSON")
        ft = _frametrace_other({"otherData": {"frametrace": ft}}, True)
        if ft.get("merged"):
            raise _Bad("frametrace's metadata of a merged trace (merge writes Chrome JSON only)")
        col = events_of(ft)
        return _header(col, ft, process, threads, tracks, keys)

    calls: list = []
    slices, max_end = _load_perfetto(data, path, calls, on_header)
    col.calls = calls
    col.n = len(calls)
    plan = col.plan
    pid = plan.procs[0].pid
    if calls and max_end > plan.earliest_stop:
        plan.check_end(pid, max_end, len(calls) - 1)
    for uuid, name, cat, start, end in slices:
        key = keys.get(uuid)
        if key is not None:
            col.slices.append((key, Slice(name, cat, start, end, None)))
    return trace_of(col)


def _header(col: Any, ft: dict, process: Optional[tuple], threads: list, tracks: list,
            keys: dict) -> dict:
    """Fills col with what the file says beside the calls, as the Chrome
    file's metadata events would, and keys with each track's (pid, tid);
    {thread track uuid: (thread_id, native_thread_id, thread_serial)}."""
    what = "frametrace metadata"
    plan = col.plan
    pid = plan.procs[0].pid
    names = _by_thread(ft.get("thread_names") or {}, str, f"{what}.thread_names")
    serials = _by_thread(ft.get("thread_serials") or {}, int, f"{what}.thread_serials")
    natives = _by_thread(ft.get("native_thread_ids") or {}, int, f"{what}.native_thread_ids")
    if process is not None:
        col.process_names[pid] = _get(ft, "process_name", str, what, process[1])
    thread_of = {}
    for uuid, _pid, tid, name in threads:
        key = (pid, tid)
        if key in col.threads:
            raise _Bad(f"two thread tracks of tid {tid}")
        serial = col.thread_named(key, names.get(tid, name if name is not None else
                                                 f"thread {tid}"),
                                  serials.get(tid), natives.get(tid))
        thread = (plan.thread_id(pid, tid), col.natives.get(key, tid), serial)
        col.threads[key] = (thread, [])
        thread_of[uuid] = thread
        keys[uuid] = key
    # The steps' and ranges' tracks first (read from the metadata, with what
    # the tracks do not show), then those of other tools' slices.
    first = _get(ft, "session_tracks", int, what, 0)
    for k, (uuid, name) in enumerate(tracks[first:]):
        key = (pid, SLICE_TRACKS_TID_BASE + k)
        col.thread_named(key, name if name is not None else f"tid {key[1]}", None, None)
        keys[uuid] = key
    origin = plan.origin
    for i, r in enumerate(_check(ft.get("ranges") or [], list, f"{what}.ranges")):
        if not (type(r) is list and len(r) == 6):
            raise _Bad(f"{what}.ranges[{i}]: [name, tid, start_ns, end_ns, open_at_start, "
                       f"open_at_end] expected")
        kinds = (str, int, int, int, bool, bool)
        name, tid, start, end, oas, oae = (_check(v, t, f"{what}.ranges[{i}]")
                                           for v, t in zip(r, kinds))
        col.ranges.append((name, pid, tid, start - origin, end - origin, oas, oae))
    for i, s in enumerate(_check(ft.get("steps") or [], list, f"{what}.steps")):
        if not (type(s) is list and len(s) == 4):
            raise _Bad(f"{what}.steps[{i}]: [name, step, start_ns, end_ns] expected")
        name, step, start, end = (_check(v, t, f"{what}.steps[{i}]")
                                  for v, t in zip(s, (str, int, int, int)))
        col.steps.append((name, step, pid, start - origin, end - origin))
    return thread_of
