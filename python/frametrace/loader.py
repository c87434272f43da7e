"""Reading traces back: ``frametrace.loader.load(path)`` gives the
``frametrace.Trace`` of a file frametrace wrote (JSON or .pftrace, or
either gzip-compressed, whatever its name says), a ``MergedTrace`` for a
file ``frametrace merge`` wrote.  What a loaded Trace holds and what is
refused: docs/viewing.md, "Reading a trace back"; how the file is
streamed: docs/internals.md, "Reading a trace back".
"""
from __future__ import annotations

import contextlib
import gc
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from ._reader import (PathLike, Progress, _Bad, _check, _frametrace_other, _get,
                      _int, _named_errors, _plain, _processes, _ns, _read, _Sink,
                      _tail_other, _tail_other_text)
from . import _pftrace
from ._tracer import Event, Stats, ThreadInfo, _load_chrome_calls
from .export import _OWN_MEMBERS, Slice
from .merge import merge
from ._trace import RangeRecord, StepRecord, Trace

__all__ = ["MergedTrace", "load", "merge", "read_other_data"]


@dataclass
class MergedTrace(Trace):
    """A trace of several processes (a file ``frametrace merge`` wrote)."""

    processes: list = field(default_factory=list)
    """One dict per process: pid (in this trace), original_pid, source (the
    file merged), process_name, thread_ids ({Chrome tid: thread_id in this
    trace}), shift_ns (added to the process's own monotonic times),
    tracer_start_ns and tracer_stop_ns (in this trace's times), stats
    (frametrace.Stats), metadata."""


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


# The reader's one switch: its C path on (the product) or off (the Python
# path alone, the reference), flipped only through python_reader().
_c_reader = True


@contextlib.contextmanager
def python_reader() -> Iterator[None]:
    """Testing hook: within it, load() reads every event with the Python
    path alone, the reference the tests compare the C path with."""
    global _c_reader
    before, _c_reader = _c_reader, False
    try:
        yield
    finally:
        _c_reader = before


class _ChromeEvents(_Sink):
    """Collects a Chrome document's events while it streams past: Events,
    nested per thread."""

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
        # Other tools' complete events (torch's ops): ((pid, tid), Slice), in file order.
        self.slices: list[tuple[tuple[int, int], Slice]] = []
        # For the C path: the functions met ({py, c}: their JSON text from the
        # name's opening quote to args.file's closing quote -> (name, filename, lineno, kind)).
        self.infos: tuple[dict, dict] = ({}, {})

    def c_fast(self) -> Optional[Callable[[str, int, int], tuple[int, int, int]]]:
        if not _c_reader:
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

    def thread_named(self, key: tuple[int, int], name: str, serial: Any, native: Any) -> int:
        """A thread_name event of (pid, tid) key (the .pftrace reader's
        thread descriptors too): its serial."""
        self.thread_names[key] = name
        if type(native) is int and native >= 0 and key not in self.threads:
            self.natives[key] = native
        return self._serial(key, serial)

    def _slice(self, ev: dict, n: int) -> None:
        """traceEvents[n], a complete event of another tool, as a Slice."""
        what = f"traceEvents[{n}]"
        cat = _get(ev, "cat", str, what, "")
        what += f" ({cat})"
        # Not _span: another tool's op may begin before the window's origin.
        pid, tid = _get(ev, "pid", int, what), _get(ev, "tid", int, what)
        ts, dur = (_ns(_get(ev, k, None, what), f"{what}.{k}") for k in ("ts", "dur"))
        if dur < 0:
            raise _Bad(f"{what}.dur: negative ({ev['dur']})")
        end = ts + dur
        args = ev.get("args")
        args = _plain(_check(args, dict, f"{what}.args")) if args else None
        self.slices.append(((pid, tid), Slice(self.strings.name(_get(ev, "name", str, what, "")),
                                              cat, ts + self.plan.origin, end + self.plan.origin,
                                              args)))

    def thread(self, pid: int, tid: int) -> tuple[tuple[int, int, int], list[int]]:
        """The thread of Chrome ids (pid, tid): ((thread_id,
        native_thread_id, serial), stack of its open events' indices)."""
        thread = self.threads.get((pid, tid))
        if thread is None:
            thread = self.threads[(pid, tid)] = (
                (self.plan.thread_id(pid, tid), self.natives.get((pid, tid), tid),
                 self._serial((pid, tid))), [])
        return thread

    def place(self, thread: tuple, info: tuple, ts: int, end: int, flags: tuple,
              key: Optional[str]) -> None:
        """A call of function info (name, filename, lineno, kind), checked,
        nested in its thread; key: its key text (see c_fast) or None."""
        # The innermost event still open that encloses this one (and, for
        # one open at the start, the stop or the loss of its thread, open
        # there too) is its parent.
        oas, oast, oal = flags
        stack, calls = thread[1], self.calls
        while stack:
            top = calls[stack[-1]]
            if (top.start_ns <= ts and end <= top.end_ns and (top.open_at_start or not oas)
                    and (top.open_at_stop or not oast) and (top.open_at_loss or not oal)):
                break
            stack.pop()
        calls.append(Event((*info, thread[0][0], thread[0][1], ts, end, len(stack),
                            stack[-1] if stack else -1, oas, oast, thread[0][2], oal)))
        stack.append(len(calls) - 1)
        if key is not None:  # the C path takes this function's next events
            self.infos[info[3] == "c"][key] = info

    def on_event(self, ev: Any, key: Optional[str] = None) -> None:
        parsed = super().on_event(ev, key)
        if parsed is None:
            if ev.get("ph") == "X":
                self._slice(ev, self.n - 1)
            return
        what, data = parsed
        n = self.n - 1
        if what == "call":
            kind, pid, tid, ts, end, name, (filename, lineno), oas, oast, oal = data
            ts, end = ts + self.plan.origin, end + self.plan.origin
            if end > self.plan.earliest_stop:
                self.plan.check_end(pid, end, n)
            self.place(self.thread(pid, tid), (name, filename, lineno, kind), ts, end,
                       (oas, oast, oal), key)
        elif what == "range":
            self.ranges.append(data)
        elif what == "step":
            self.steps.append(data)
        elif what == "thread_name":
            pid, tid, name, _thread_id, serial, native = data
            self.thread_named((pid, tid), name, serial, native)
        else:
            self.process_names[data[0]] = data[1]


def _chrome_trace(col: _ChromeEvents) -> Trace:
    plan = col.plan
    procs, merged, origin = plan.procs, plan.merged, plan.origin
    ranges = [RangeRecord(name, plan.thread_id(pid, ctid), origin + ts, origin + end, oas, oae)
              for name, pid, ctid, ts, end, oas, oae in col.ranges]
    steps = [StepRecord(name, step, origin + ts, origin + end)
             for name, step, _pid, ts, end in col.steps]
    threads = []
    serial_of: dict[tuple[int, int], int] = {}
    # Each thread its own, in serial order: those named and those with events.
    for key in sorted(col.threads.keys() | col.thread_names.keys(), key=col.serials.__getitem__):
        pid, ctid = key
        if (pid if merged else procs[0].pid, ctid) not in plan.tid_map and key not in col.threads:
            continue  # the steps track, or a track of other tools' slices
        serial_of[key] = col.serials[key]
        own = col.thread_names.get(key)
        threads.append(ThreadInfo((col.serials[key], plan.thread_id(pid, ctid),
                                   col.natives.get(key, ctid),
                                   f"{own} [pid {pid}]" if own is not None and merged else own,
                                   plan.by_pid.get(pid, procs[0]).dropped_by_thread.get(ctid))))
    slices: dict[int, list] = {}
    tracks: dict[tuple[int, int], list] = {}
    for key, x in col.slices:
        serial = serial_of.get(key)
        if serial is not None:
            slices.setdefault(serial, []).append(x)
        else:
            tracks.setdefault(key, []).append(x)
    slice_tracks = []
    for (pid, ctid), items in tracks.items():
        track = col.thread_names.get((pid, ctid), f"tid {ctid}")
        slice_tracks.append((f"{track} [pid {pid}]" if merged else track, items))
    common: dict[str, Any] = dict(events=col.calls, ranges=ranges, steps=steps, pid=procs[0].pid,
                                  threads=threads, slices=slices, slice_tracks=slice_tracks)
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
            stats=Stats((p.dropped, p.dropped_records)),
            cycle=_int(md.get("cycle", 0), "otherData.frametrace.metadata.cycle"),
            distributed=_rank_info(md.get("distributed")))
    processes: list[dict[str, Any]] = [{
        "pid": p.pid, "original_pid": p.original_pid if p.original_pid is not None else p.pid,
        "source": p.source, "process_name": col.process_names.get(p.pid, p.process_name),
        "thread_ids": dict(p.thread_ids), "shift_ns": p.shift_ns,
        "tracer_start_ns": p.start_ns + p.shift_ns, "tracer_stop_ns": p.stop_ns + p.shift_ns,
        "stats": Stats((p.dropped, p.dropped_records)),
        "metadata": p.metadata,
    } for p in procs]
    ends = [p.metadata.get("session_end_ns", p.stop_ns) for p in procs]
    return MergedTrace(
        **common, processes=processes, session_start_ns=origin,
        session_end_ns=max((end if type(end) is int else p.stop_ns) + p.shift_ns
                           for end, p in zip(ends, procs)),
        tracer_start_ns=min(p["tracer_start_ns"] for p in processes),
        tracer_stop_ns=max(p["tracer_stop_ns"] for p in processes),
        stats=Stats((sum(p.dropped for p in procs), sum(p.dropped_records for p in procs))))


def _rank_info(value: Any) -> Optional[dict]:
    """otherData.frametrace.metadata.distributed: the process's rank."""
    if value is None:
        return None
    info = _check(value, dict, "otherData.frametrace.metadata.distributed")
    if info.get("rank") is not None:
        _int(info["rank"], "otherData.frametrace.metadata.distributed.rank")
    return _plain(info)


# ---- load ---------------------------------------------------------------------------------


def load(path: PathLike, *, progress: Progress = None) -> Trace:
    """The ``frametrace.Trace`` of a trace file: Chrome trace JSON
    frametrace wrote (``write_chrome``, ``Trace.save``, ``frametrace run``,
    ``frametrace merge``: a ``MergedTrace``) or the ``.pftrace`` frametrace
    writes (``write_perfetto``, ``Trace.to_perfetto``); ``.json`` or
    gzip-compressed.

    Raises ValueError naming the file and the problem for anything else
    (OSError when it cannot be opened).  progress, if given, is called as
    ``progress(done, total)`` now and then: bytes of the file read so far,
    of its size."""
    path = os.fspath(path)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of new objects, no cycles: no collections meanwhile
    try:
        with _named_errors(path):
            data = _pftrace.read(path, progress)
            if data is not None:
                return _pftrace.load(path, data, lambda ft: _ChromeEvents(_Plan(ft)), _chrome_trace)
            return load_chrome(path, progress, _ChromeEvents)
    finally:
        if gc_was_enabled:
            gc.enable()


def load_chrome(path: str, progress: Progress, sink: Callable[[_Plan], _ChromeEvents]) -> Trace:
    """The Trace of a Chrome JSON file (not a .pftrace), its events going
    to sink(plan) (load()'s, or convert's, which writes them in chunks);
    raises _Bad."""
    other = _tail_other_text(path)
    if other is None:
        # otherData.frametrace neither before the events nor at the end:
        # a first pass finds it (the events only checked), a second reads them.
        ft = _frametrace_other(*_read(path, _Sink(), _half(progress, 0)))
        progress = _half(progress, 1)
    else:
        ft = other[1]["frametrace"]
    col = sink(_Plan(_frametrace_other({"otherData": {"frametrace": ft}}, True)))
    top, saw_events = _read(path, col, progress, other=other)
    if _frametrace_other(top, saw_events) != ft:
        raise _Bad("otherData.frametrace is not the one read before its events")
    trace = _chrome_trace(col)
    if not isinstance(trace, MergedTrace):
        # Other tools' members (torch.profiler's, which frametrace.torch
        # writes): a save() writes them again.
        trace.chrome_top_level = {k: _plain(v) for k, v in top.items()
                                  if k not in _OWN_MEMBERS}
    return trace


def _half(progress: Progress, k: int) -> Progress:
    """progress of the k-th of two passes over the file."""
    if progress is None:
        return None
    whole = progress
    return lambda done, total: whole((k * total + done) // 2, total)

