"""The Trace: what one recording holds (a stopped tracer's records, or the
Events of a loaded file) with the facts every writer and report reads
(ranges, steps, threads, rank, clock anchor...), and ``as_trace()``, which
turns what a user holds into one.

    trace = frametrace.as_trace(tracer)      # a snapshot, load()'s: alike
    trace.save("run.pftrace")
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional, Union

from . import _tracer
from ._ranks import distributed_info, output_name

PathLike = Union[str, "os.PathLike[str]"]


class RangeRecord(NamedTuple):
    """A ``frametrace.range`` span.  open_at_start: entered before the window
    began (starts at the window start); open_at_end: still open when the
    window ended (ends at the window end)."""

    name: str
    thread_id: int
    start_ns: int
    end_ns: int
    open_at_start: bool = False
    open_at_end: bool = False


class StepRecord(NamedTuple):
    """One step of the loop, from the previous ``prof.step()`` to this one."""

    name: str  # "step#N"
    step: int
    start_ns: int
    end_ns: int


@dataclass
class Trace:
    """One recording and its facts: a session's active window, a stopped
    tracer or a snapshot (``as_trace()``), or a file ``load()`` read.
    Every writer and report reads it."""

    # None (the default): built from tracer when first read.
    events: list = field(default=None, repr=False)  # type: ignore[arg-type]
    """Python/C events from ``Tracer.getEvents()``: none ends after
    tracer_stop_ns.  Built from the tracer on first use (None when made:
    those of ``tracer``, or none without one), so that a handler that only
    writes a file (``to_chrome``, ``to_perfetto``) builds no Event."""
    ranges: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    session_start_ns: int = 0
    """Start of the active window."""
    session_end_ns: int = 0
    """End of the active window: later than the tracer's stop when Python
    tracing was limited to the first steps."""
    tracer_start_ns: Optional[int] = None
    tracer_stop_ns: Optional[int] = None
    """When Python tracing stopped (None: the window traced no Python)."""
    stats: _tracer.Stats = _tracer.Stats((0, 0))
    """frametrace.Stats(dropped, dropped_records): events (function
    executions) lost entirely, all threads (each thread's:
    ``threads[i].dropped``), and records lost; ``tracer.stats`` once
    stopped."""
    pid: int = 0
    cycle: int = 0
    """Which cycle of the schedule (0-based)."""
    tracer: Optional[_tracer.Tracer] = field(default=None, repr=False, compare=False)
    """The stopped tracer the events came from (None: no Python tracing);
    the exporters stream from its records, which the Trace keeps: a later
    ``clear()`` of the tracer does not change it."""
    threads: list = field(default_factory=list)
    """[frametrace.ThreadInfo(serial, thread_id, native_thread_id, name,
    dropped)], one per traced OS thread in serial order: each its own name
    and loss, whatever the reuse of thread ids."""
    clock_anchor: Optional[dict] = None
    """{"monotonic_ns", "wall_ns", "width_ns"}: one moment on both clocks,
    which places the trace's monotonic times on the wall clock
    (``frametrace merge``, ``frametrace.torch``): read at the window's
    close as the tightest of several bracketed reads, width_ns the
    bracket's width (absent in files of earlier versions), or from the
    file load() read."""
    slices: dict = field(default_factory=dict)
    """{thread serial: [frametrace.export.Slice]}: other tools' slices that
    nest with that thread's frames (torch's ops: ``frametrace.torch``),
    written on the thread's track."""
    slice_tracks: list = field(default_factory=list)
    """[(track name, [Slice])]: other tools' slices on tracks of their own
    (GPU streams, ops of threads not traced)."""
    distributed: Optional[dict] = None
    """The process's rank in a distributed job (``{"backend", "rank",
    "world_size", "local_rank", "local_world_size"}``), None without one:
    read at the window's close (from torch.distributed or the environment),
    or from the file load() read.  With one, the trace's process is named
    "rank N" and ``save()`` names its file per rank."""
    process_name: Optional[str] = None
    """The name the written trace gives its process (None: "rank N" for a
    rank, else "python PID")."""
    parent_pid: Optional[int] = None
    """Set in the trace of a child process traced with
    ``trace_children=True``: its parent's pid."""
    extra_metadata: dict = field(default_factory=dict)
    """More members (JSON-ready) of the written file's
    ``otherData.frametrace.metadata`` (``frametrace run``: the command)."""
    chrome_top_level: dict = field(default_factory=dict)
    """More top-level members of the Chrome JSON written (JSON-ready):
    ``frametrace.torch`` gives torch.profiler's (``schemaVersion``,
    ``deviceProperties``, ``baseTimeNanoseconds``), which Holistic Trace
    Analysis and TensorBoard's profiler read; load() gives the file's."""

    def __post_init__(self) -> None:
        self._records()

    def _records(self) -> Any:
        """The tracer the writers and the events read: once self.tracer
        has stopped, a tracer sharing its records (Tracer._shared()), made
        once, so that a later clear() of self.tracer, or a new tracer,
        leaves this Trace whole; before that (or after a clear()), the
        tracer itself."""
        tracer = self.tracer
        kept = self.__dict__.get("_kept")
        if kept is not None and kept[0] is tracer:
            return kept[1]
        if (not isinstance(tracer, _tracer.Tracer) or tracer.active
                or tracer.stop_ns is None):
            return tracer
        try:
            shared = tracer._shared()
        except RuntimeError:  # cleared: reading it says so
            return tracer
        self.__dict__["_kept"] = (tracer, shared)
        return shared

    def _get_events(self) -> list:
        events = self.__dict__.get("_events")
        if events is None:
            tracer = self._records()
            if tracer is not None and not isinstance(tracer, _tracer.Tracer):
                raise TypeError(f"Trace.tracer must be a frametrace.Tracer or None, not "
                                f"{type(tracer).__name__}")
            events = tracer.getEvents() if tracer is not None else []
            self.__dict__["_events"] = events
        return events

    def _set_events(self, events: Optional[list]) -> None:
        self.__dict__["_events"] = events

    def _check(self) -> None:
        """What the writers read, checked: a clear TypeError, not an
        AttributeError from deep inside."""
        tracer = self.tracer
        if tracer is not None and not isinstance(tracer, _tracer.Tracer):
            raise TypeError(f"Trace.tracer must be a frametrace.Tracer or None, not "
                            f"{type(tracer).__name__}")
        self.metadata()

    def metadata(self) -> dict:
        if not isinstance(self.stats, _tracer.Stats):
            raise TypeError(f"Trace.stats must be a frametrace.Stats, not "
                            f"{type(self.stats).__name__}")
        return {
            "pid": self.pid,
            "cycle": self.cycle,
            "session_start_ns": self.session_start_ns,
            "session_end_ns": self.session_end_ns,
            "tracer_start_ns": self.tracer_start_ns,
            "tracer_stop_ns": self.tracer_stop_ns,
            "dropped": self.stats.dropped,
            "dropped_records": self.stats.dropped_records,
            "threads": [list(t) for t in self.threads],
            **({"distributed": self.distributed} if self.distributed is not None else {}),
            **({"parent_pid": self.parent_pid} if self.parent_pid is not None else {}),
            **({"anchor_widths_ns": list(self._records().anchor_widths_ns)}
               if isinstance(self.tracer, _tracer.Tracer) else {}),
        }

    def to_chrome(self, path: PathLike) -> str:
        """Writes the trace as Chrome trace event JSON (Perfetto UI,
        chrome://tracing; ``.json.gz`` compressed): the Python/C events,
        the ranges and the steps; returns the path."""
        from .export import write_chrome

        write_chrome(self, path)
        return os.fspath(path)

    def to_perfetto(self, path: PathLike) -> str:
        """Writes the trace as Perfetto's native protobuf trace (.pftrace):
        much smaller than JSON, and what the Perfetto UI prefers; returns
        the path."""
        from .export import write_perfetto

        write_perfetto(self, path)
        return os.fspath(path)

    def summary(self, sort: str = "self", limit: Optional[int] = 30, *,
                per_thread: bool = False, group_by_input_shape: bool = False,
                print: bool = True) -> Any:
        """A table per function: calls, total, self and mean time, share of
        the traced time; functions capped at the stop are marked.  With
        torch's ops (``frametrace.torch``), their table too, as torch's
        ``key_averages().table()`` (a row per op and input shapes with
        group_by_input_shape).  Printed unless print=False; returned
        either way (frametrace.reports)."""
        from .reports import summary

        table = summary(self, sort=sort, limit=limit, per_thread=per_thread,
                        group_by_input_shape=group_by_input_shape)
        if print:
            table.print()
        return table

    def to_pstats(self, path: PathLike) -> str:
        """Writes a file pstats.Stats() loads (snakeviz and other pstats
        viewers too); returns the path."""
        from .reports import write_pstats

        return write_pstats(self, path)

    def to_collapsed(self, path: PathLike) -> str:
        """Writes collapsed stacks ("a;b;c 1234", self time in us) for
        flamegraph.pl and speedscope; returns the path."""
        from .reports import write_collapsed

        return write_collapsed(self, path)

    def to_flamegraph_svg(self, path: PathLike, *, title: str = "frametrace") -> str:
        """Writes a self-contained SVG flame graph; returns the path."""
        from .reports import write_flamegraph_svg

        return write_flamegraph_svg(self, path, title=title)

    def save(self, path: PathLike, *, progress: Any = None) -> str:
        """Writes the trace in the format its extension names: Chrome trace
        JSON (``.json``, ``.json.gz``), Perfetto's protobuf trace
        (``.pftrace``, ``.pftrace.gz``) or a Parquet dataset (``.parquet``:
        a directory, :doc:`/data`); ValueError for any other.  Returns the
        path written.  ``{pid}`` and ``{rank}`` in path are replaced, and a
        rank's trace gets ``.rankN`` before the extension without
        ``{rank}`` (:doc:`/distributed`; a dataset's ranks share it).
        ``progress`` as for ``frametrace.export.write_chrome``."""
        from .export import write_trace

        path = output_name(os.fspath(path), self.distributed, self.pid)
        for field_name, record in (("ranges", RangeRecord), ("steps", StepRecord)):
            for i, item in enumerate(getattr(self, field_name)):
                if not isinstance(item, record):
                    raise TypeError(f"Trace.{field_name}[{i}] must be a frametrace."
                                    f"{record.__name__}, not {type(item).__name__}")
        write_trace(self, path, progress=progress)
        return os.fspath(path)


# The dataclass made its __init__, __eq__ and fields() with events a plain
# field; as a property it is built on first read and never stored twice.
Trace.events = property(Trace._get_events, Trace._set_events,  # type: ignore[assignment]
                        doc="The Python/C events (Tracer.getEvents()), built on first read.")


_ACCEPTED = ("a frametrace.Trace, a stopped frametrace.Tracer, a snapshot (Tracer.snapshot()), "
             "a loaded trace (frametrace.load()) or a list of frametrace.Event")


def as_trace(what: Any) -> Trace:
    """What a writer or a report reads, as a Trace: a Trace (itself; load()
    gives one), a stopped Tracer or a snapshot (its records, this process's
    pid and rank), or a list of Events (tracer.getEvents()).  TypeError for
    anything else, ValueError for a tracer still running or never run."""
    return _as_trace(what, keep=True)


def _as_trace(what: Any, keep: bool) -> Trace:
    """as_trace(); keep=False: a Trace for one call (a writer's), which
    reads a tracer given itself rather than keeping its records."""
    if isinstance(what, Trace):
        return what
    if isinstance(what, _tracer.Tracer):
        start, stop = what.start_ns, what.stop_ns
        if what.active or start is None or stop is None:
            state = "running" if what.active else "never started"
            raise ValueError(f"a frametrace.Tracer that is {state} has no trace yet: stop it "
                             f"first (accepted: {_ACCEPTED})")
        trace = Trace(tracer=what, session_start_ns=start, session_end_ns=stop,
                      tracer_start_ns=start, tracer_stop_ns=stop, stats=what.stats,
                      pid=os.getpid(), threads=what.threads, distributed=distributed_info())
        if not keep:
            trace.__dict__["_kept"] = (what, what)
        return trace
    if isinstance(what, (list, tuple)):
        return Trace(events=list(what))
    raise TypeError(f"expected {_ACCEPTED}, not {type(what).__name__}")
