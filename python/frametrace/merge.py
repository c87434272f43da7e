"""Merging the Chrome traces of several processes into one file on one
timeline: ``frametrace.merge.merge(inputs, output)`` (the ``frametrace
merge`` command; also ``frametrace.loader.merge``).  Each input is read with
the loader's reader and event checks, so merge writes nothing ``load()``
rejects; ``load()`` reads the result back as a ``MergedTrace``."""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from typing import Any, Callable, Optional

from . import _pftrace
from ._output import _write_error, open_output
from ._tracer import _merge_chrome_lines
from .export import FORMAT, VERSION, _us_text
from ._reader import (PathLike, Progress, _Bad, _frametrace_other, _int, _named_errors, _plain,
                      _ns, _parse_event, _processes, _read, _Sink, _Strings, _tail_other)
from .torch import is_torch_chrome, torch_chrome_as_frametrace

__all__ = ["merge"]


class _MergeSink(_Sink):
    """Writes the events of one input to the merged file: pids mapped, ts
    moved by shift_ns, everything else as it was."""

    def __init__(self, out: Callable[[str], None], pids: dict, default_pid: Optional[int],
                 shift_ns: int, renames: dict, first: bool):
        self.out = out
        self.pids = pids  # old pid -> new pid
        self.default_pid = default_pid  # one process: any pid becomes it
        self.shift = shift_ns
        self.renames = renames  # new pid -> suffix for its process_name
        self.sep = "" if first else ",\n"
        self.strings = _Strings()  # checked as load() checks them
        self.process_names: dict[int, str] = {}
        self.n = 0
        self.count = 0  # Python/C events
        # For the C path: the names and locations checked (their JSON text
        # from the name's opening quote to args.file's closing quote), and
        # the new pid's text of each pid.
        self.known: dict[str, None] = {}
        self.new_pids: dict[int, str] = {}

    def c_fast(self) -> Optional[Callable[[str, int, int], tuple[int, int, int]]]:
        known, new_pids, shift = self.known, self.new_pids, self.shift

        def c(buf: str, pos: int, stop: int) -> tuple[int, int, int]:
            pos, text, count, start, end = _merge_chrome_lines(buf, pos, stop, known, new_pids,
                                                               shift, self.sep)
            if count:
                self.out(text)
                self.sep = ",\n"
                self.n += count
                self.count += count
            return pos, start, end
        return c

    def _pid(self, pid: int, what: str) -> int:
        new = self.pids.get(pid, self.default_pid)
        if new is None:
            raise _Bad(f"{what}: pid {pid} is none of the file's processes")
        return new

    def on_event(self, ev: Any, key: Optional[str] = None) -> None:
        n = self.n
        self.n = n + 1
        what = f"traceEvents[{n}]"
        # Checked as load() checks it: merge writes nothing load() rejects.
        parsed = _parse_event(ev, n, self.strings)
        ev = dict(ev)
        if "pid" in ev:
            ev["pid"] = self._pid(_int(ev["pid"], f"{what}.pid"), what)
            if key is not None and parsed is not None and parsed[0] == "call":
                # The C path takes the next events of this name, location and pid.
                self.known[key] = None
                self.new_pids[parsed[1][1]] = str(ev["pid"])
        if parsed is not None and parsed[0] == "call":
            self.count += 1
        ts = ev.pop("ts", None)
        dur = ev.pop("dur", None)
        if parsed is not None and parsed[0] == "process_name":
            name = parsed[1][1]
            self.process_names[ev["pid"]] = name
            if ev["pid"] in self.renames:
                ev["args"] = dict(ev["args"], name=name + self.renames[ev["pid"]])
        text = json.dumps(_plain(ev), separators=(",", ":"))
        extra = ""
        if ts is not None:
            extra += ',"ts":' + _us_text(_ns(ts, f"{what}.ts") + self.shift)
        if dur is not None:
            extra += ',"dur":' + _us_text(_ns(dur, f"{what}.dur"))
        if extra:
            text = text[:-1] + extra + "}" if len(ev) else "{" + extra[1:] + "}"
        self.out(self.sep + text)
        self.sep = ",\n"


def _spool_dir(output: str) -> Optional[str]:
    """Beside the output when it goes to a directory's file (its file system
    has room for it), else the default temporary directory (a device, a
    FIFO)."""
    try:
        if not stat.S_ISREG(os.stat(output).st_mode):
            return None
    except OSError:
        pass  # not there yet: a file of its directory
    directory = os.path.dirname(os.path.abspath(output))
    return directory if os.access(directory, os.W_OK) else None


def _anchor_offset(ft: dict, what: str) -> Optional[int]:
    """wall - monotonic of a file's clock anchor (None: it has none)."""
    anchor = ft.get("clock_anchor")
    if anchor is None:
        return None
    if not isinstance(anchor, dict):
        raise _Bad(f"{what}: otherData.frametrace.clock_anchor must be an object")
    mono = _int(anchor.get("monotonic_ns"), f"{what}: otherData.frametrace.clock_anchor.monotonic_ns")
    wall = _int(anchor.get("wall_ns"), f"{what}: otherData.frametrace.clock_anchor.wall_ns")
    return wall - mono


def merge(inputs: list, output: PathLike, *, progress: Progress = None) -> dict:
    """Merges Chrome traces frametrace wrote (of several processes, or of
    merges) into one file at output (``.json.gz``: compressed), each process
    on its own track, all on one timeline: each file's timestamps are moved
    by the difference between the wall-clock time of its origin (from the
    ``clock_anchor`` it records) and the earliest one.  A pid already taken
    by an earlier input is replaced by the next free number (the process
    name says so).  The file has an ``otherData.frametrace`` that
    ``load()`` reads back (a ``MergedTrace``), with ``inputs``: for each
    process its source file, pid and original_pid, origin, tracer start and
    stop, dropped count, thread ids, clock anchor, metadata, and
    ``shift_ns`` (added to its own monotonic times to give the merged
    trace's).  The .pftrace files frametrace writes are read with
    ``load()`` and rewritten as Chrome JSON first.  A file without a clock
    anchor is placed by its CLOCK_MONOTONIC times, as of the same machine
    as the anchored inputs (``inputs[].aligned_by`` says so).

    Works on the JSON, streaming each input once more after reading the
    metadata at its end: memory stays small whatever the sizes.  Returns
    the merged ``otherData.frametrace``.  torch.profiler's Chrome traces
    (``export_chrome_trace``) are taken too, placed by their
    ``baseTimeNanoseconds`` (a process track of their own, named
    "torch.profiler PID").  ValueError (naming the file) for
    an input that is not a Chrome trace frametrace or torch.profiler wrote; the output is
    only replaced once everything is written.  progress(done, total): bytes
    of the inputs read, of their total size."""
    paths = [os.fspath(p) for p in inputs]
    if not paths:
        raise ValueError("merge: no input files")
    output = os.fspath(output)
    if output.endswith((".pftrace", ".pftrace.gz")):
        raise ValueError(f"{output}: merge writes Chrome trace JSON: name the output .json or "
                         f".json.gz")

    with tempfile.TemporaryDirectory(prefix="frametrace-merge.") as converted:
        return _merge(paths, output, progress, converted)


def _merge(paths: list, output: str, progress: Progress, converted: str) -> dict:
    # Pass 1: what each file says of itself.  A torch.profiler trace is
    # converted first to a Chrome trace merge takes.
    files = []
    sources = {}  # the file read -> the file named (a torch one, converted)
    for k, path in enumerate(paths):
        with _named_errors(path):
            if _pftrace.sniff(path):
                # A .pftrace frametrace wrote: as the Chrome JSON of its Trace.
                from .loader import load

                read = load(path).to_chrome(os.path.join(converted, f"pftrace.{k}.json"))
                sources[read] = path
                path = read
            ft = _tail_other(path)
            if ft is None:
                top, saw = _read(path, None, skip_events=True)
                if is_torch_chrome(top):
                    read = torch_chrome_as_frametrace(path, os.path.join(converted, f"torch.{k}.json"))
                    sources[read] = path
                    path = read
                    ft = _tail_other(path)
                else:
                    ft = _frametrace_other(top, saw)
            ft = _frametrace_other({"otherData": {"frametrace": ft}}, True)
            _plain(ft)  # raises here, naming the file, for a number merged_other cannot hold
            procs, merged = _processes(ft)
            origin = _int(ft.get("origin_ns"), "otherData.frametrace.origin_ns")
            offset = _anchor_offset(ft, "the trace")
        files.append([path, ft, procs, merged, origin, offset])
    # A file without a clock anchor is on the machine's CLOCK_MONOTONIC:
    # placed by an anchored file's offset.
    known = next((f[5] for f in files if f[5] is not None), 0)
    unanchored = {f[0] for f in files if f[5] is None}
    for f in files:
        f[5] = f[4] + (known if f[5] is None else f[5])  # the wall-clock time of its ts 0

    common_wall = min(f[5] for f in files)
    reference = min(range(len(files)), key=lambda i: files[i][5])
    ref_origin = files[reference][4]

    # New pids and the inputs' descriptions.
    taken = {p.pid for f in files for p in f[2]}
    assigned: set[int] = set()
    plans = []
    described: list[dict[str, Any]] = []
    for path, ft, procs, merged, origin, wall in files:
        offset = wall - common_wall  # ns added to the file's ts
        file_shift = ref_origin + offset - origin  # own monotonic -> merged monotonic
        pids: dict[int, int] = {}
        renames: dict[int, str] = {}
        for p in procs:
            new = p.pid
            if new in assigned:  # an earlier input's: the next number no input has
                new += 1
                while new in assigned or new in taken:
                    new += 1
            assigned.add(new)
            pids[p.pid] = new
            original = p.original_pid if p.original_pid is not None else p.pid
            if new != p.pid:
                renames[new] = (f" (pid {original} of "
                                f"{os.path.basename(p.source or sources.get(path, path))})")
            described.append({
                "source": p.source or sources.get(path, path),
                "pid": new,
                "original_pid": original,
                "process_name": p.process_name,
                "origin_ns": p.origin_ns,
                "start_ns": p.start_ns,
                "stop_ns": p.stop_ns,
                "dropped": p.dropped,
                "dropped_records": p.dropped_records,
                "dropped_by_thread": {str(k): v for k, v in p.dropped_by_thread.items()},
                "thread_ids": {str(k): v for k, v in p.thread_ids.items()},
                "clock_anchor": p.clock_anchor,
                "metadata": p.metadata,
                "shift_ns": p.shift_ns + file_shift,
                **({"aligned_by": "CLOCK_MONOTONIC (the file has no clock anchor: the same "
                                  "machine's clock is assumed)"} if path in unanchored else {}),
            })
        plans.append((path, ft, pids, None if merged else pids[procs[0].pid], offset, renames))

    paths = [f[0] for f in files]
    total = sum(os.path.getsize(p) for p in paths)
    done_before = 0
    count = 0
    level = 1 if output.endswith(".gz") else None
    # The events go to a spool first: the merged otherData, written before
    # them (readers need it first), counts them.
    with tempfile.TemporaryFile("w+", encoding="utf-8", dir=_spool_dir(output)) as fh:
        pending: list[str] = []
        pending_size = 0

        def out(text: str) -> None:
            # Events one by one (the Python path) or in batches (the C path).
            nonlocal pending_size
            pending.append(text)
            pending_size += len(text)
            if pending_size >= 1 << 20:
                spool("".join(pending))
                pending.clear()
                pending_size = 0

        def spool(text: str) -> None:
            try:
                fh.write(text)
            except OSError as exc:  # its file system is the output's, usually
                raise _write_error(exc, output) from None

        first = True
        for i, (path, ft, pids, default_pid, offset, renames) in enumerate(plans):
            sink = _MergeSink(out, pids, default_pid, offset, renames, first)
            size = os.path.getsize(path)
            step = None
            if progress is not None:
                base = done_before

                def step(done: int, _total: int, base: int = base) -> None:
                    progress(base + done, total)  # type: ignore[misc]
            with _named_errors(sources.get(path, path)):
                top, saw = _read(path, sink, step)
                again = _frametrace_other(top, saw)
            if again != ft:
                raise ValueError(f"{path}: otherData.frametrace is not the one read before "
                                 f"its events")
            first = first and sink.sep == ""
            count += sink.count
            done_before += size
            for d in described:
                if d["pid"] in sink.process_names and d["process_name"] is None:
                    d["process_name"] = sink.process_names[d["pid"]]
        spool("".join(pending))
        pending.clear()
        merged_other = {
            "format": FORMAT,
            "version": VERSION,
            "merged": True,
            "origin_ns": ref_origin,
            "start_ns": min(d["start_ns"] + d["shift_ns"] for d in described),
            "stop_ns": max(d["stop_ns"] + d["shift_ns"] for d in described),
            "pid": described[0]["pid"],
            "dropped": sum(d["dropped"] for d in described),
            "dropped_records": sum(d["dropped_records"] for d in described),
            "thread_ids": {},
            "clock_anchor": {"monotonic_ns": ref_origin, "wall_ns": common_wall},
            "metadata": {"merged_from": [sources.get(p, p) for p in paths], "events": count},
            "inputs": described,
        }
        fh.seek(0)
        with open_output(output, "w", compresslevel=level, encoding="utf-8") as dst:
            dst.write('{"otherData":' + json.dumps({"frametrace": _plain(merged_other)},
                                                   separators=(",", ":"))
                      + ',"displayTimeUnit":"ns","traceEvents":[\n')
            shutil.copyfileobj(fh, dst, 1 << 20)
            dst.write("\n]}\n")
    return merged_other
