"""Where run's traces are written and what it says about them: the whole
run's trace, each cycle of ``--steps`` and each child's of
``--follow-children``."""
from __future__ import annotations

import os
import shlex
import time
from typing import Any, Optional

from .._output import reason, say
from .._ranks import numbered, output_name
from .._ranks import process_name as rank_name
from ..export import write_trace
from ._common import PROG, SUMMARY_LIMIT, Progress, count_threads, report_dropped


# Past this many events, run's default output is .pftrace: their Chrome
# JSON (about 110 bytes an event) would be more than the Perfetto UI opens,
# the .pftrace about a seventh of it.
JSON_EVENTS_THE_UI_OPENS = 5_000_000


def write_run_trace(tracer: Any, output: str, process_name: str, metadata: dict,
                    status: int, chosen: bool = True, children: Optional[str] = None) -> int:
    """Writes the stopped tracer's trace to output and prints where and a
    summary; the exit status.  chosen: the user named output (else a trace
    too large for JSON in the UI is written as .pftrace beside it).
    children: where the children's traces went (--follow-children), told
    with the command that merges them with this one."""
    from .. import reports, view
    from .._trace import as_trace

    events = tracer.ring_bytes // 16  # two 8-byte records an event, about
    if not chosen and output.endswith(".json") and events > JSON_EVENTS_THE_UI_OPENS:
        output = output[:-len(".json")] + ".pftrace"
        say(f"{PROG}: about {events:,} events, more than the Perfetto UI opens as JSON: "
            f"writing {os.path.basename(output)} (Perfetto's own format; -o NAME.json for "
            f"JSON)")
    started = time.monotonic()
    progress = Progress(f"{PROG}: writing {output}")
    trace = as_trace(tracer)
    trace.process_name, trace.extra_metadata = process_name, metadata
    try:
        count = write_trace(trace, output, progress=progress)
    except OSError as exc:
        progress.close()
        say(f"{PROG} run: could not write the trace to {output}: {reason(exc)}")
        return status or 2
    progress.close()
    seconds = time.monotonic() - started
    threads = count_threads(trace.events)
    say(f"{PROG}: {count:,} events of {threads} thread{'s' if threads != 1 else ''} "
        f"written to {output} ({seconds:.2f} s)")
    report_dropped(tracer.stats.dropped, tracer.options, tracer.stats.dropped_records,
                   tracer.ring_bytes)
    table = reports.summary(trace, limit=SUMMARY_LIMIT)
    say(str(table))
    say(view.open_hint(output))
    if children is not None:
        parent = shlex.quote(os.path.relpath(output))
        # Quoted around its *, which the shell is to expand.
        pattern = "*".join(shlex.quote(part) for part in os.path.relpath(children).split("*"))
        say(f"{PROG}: the children's traces are {pattern} (each child's pid in its name); "
            f"to see them with this one on one timeline: {PROG} merge {parent} {pattern} "
            f"-o merged.json")
    tracer.clear()
    return status


class CycleWriter:
    """run --steps's on_trace_ready: writes each cycle's trace as
    ``<output stem>.<cycle><ext>`` while the program runs (on the session's
    writer thread), says so on stderr then, and never raises into the
    program (failed writes are reported at the end).  Keeps counts, the
    first failures and the first cycle's summary, nothing of each cycle: a
    job of any length stays as large."""

    MAX_FAILED = 20  # failures told one by one; the rest counted

    def __init__(self, output: str):
        self.output = output
        self.process_name = ""
        self.metadata: dict = {}
        self.written = 0
        self.failed: list[tuple[str, str]] = []  # (path, error), the first MAX_FAILED
        self.failed_count = 0
        self.summary: Any = None  # of the first cycle written
        self.summary_cycle = -1
        self.pid = os.getpid()

    def path(self, cycle: int, distributed: Any = "auto") -> str:
        return numbered(output_name(self.output, distributed), cycle)

    def __call__(self, trace: Any) -> None:
        if os.getpid() != self.pid:
            return  # a forked child's: the parent writes the cycles
        path = self.path(trace.cycle, trace.distributed)
        started = time.monotonic()
        progress = Progress(f"{PROG}: writing {path}")
        try:
            trace.process_name = rank_name(trace.distributed, self.process_name) or trace.process_name
            trace.extra_metadata = self.metadata
            count = write_trace(trace, path, progress=progress)
        except (OSError, RuntimeError, ValueError) as exc:
            self.fail(path, reason(exc))
            return
        finally:
            progress.close()
        seconds = time.monotonic() - started
        threads = len(trace.threads)
        self.written += 1
        say(f"{PROG}: steps {trace.steps[0].step}-{trace.steps[-1].step} (cycle {trace.cycle}): "
            f"{count:,} events of {threads} thread{'s' if threads != 1 else ''} written to "
            f"{path} ({seconds:.2f} s)")
        # Events a cycle lost: the session's warning says so, at its close.
        if self.summary is None and trace.tracer is not None:
            from .. import reports

            # The one cycle whose events are built: its summary is printed at the end.
            self.summary = reports.summary(trace, limit=SUMMARY_LIMIT)
            self.summary_cycle = trace.cycle
        if trace.tracer is not None:
            trace.tracer.clear()  # the file has it

    def fail(self, path: str, problem: str) -> None:
        self.failed_count += 1
        if len(self.failed) < self.MAX_FAILED:
            self.failed.append((path, problem))


def report_cycles(writer: CycleWriter, session: Any, steps_text: str, status: int) -> int:
    """Says what the cycles' writes did at the end of run --steps; the
    exit status."""
    for path, problem in writer.failed:
        say(f"{PROG} run: could not write the trace to {path}: {problem}")
    if writer.failed_count > len(writer.failed):
        say(f"{PROG} run: {writer.failed_count - len(writer.failed):,} more cycles could not "
            f"be written")
    if not writer.written and not writer.failed:
        calls = session.step_num
        say(f"{PROG} run: no trace written: --steps {steps_text} records none of the "
            f"program's {calls + 1} step{'s' if calls else ''} (it called frametrace.step() "
            f"{calls} time{'s' if calls != 1 else ''})")
        return status or 2
    if writer.summary is not None:
        say(f"{PROG}: summary of cycle {writer.summary_cycle}:")
        say(str(writer.summary))
    if writer.written:
        from .. import view

        say(view.open_hint(writer.path(writer.summary_cycle)))
    return status or (2 if writer.failed else 0)


class ChildFile:
    """run --follow-children's writer of a child's trace (see
    frametrace._children), in the child: OUTPUT's name with the child's
    pid before the extension (unless OUTPUT has {pid}).  A class at module
    level: it pickles, for children started with spawn or forkserver."""

    def __init__(self, output: str, metadata: dict):
        self.output = output
        self.metadata = metadata

    def __call__(self, trace: Any) -> None:
        path = output_name(self.output, trace.distributed, trace.pid)
        if "{pid}" not in self.output:
            path = numbered(path, trace.pid)
        if trace.steps:  # a child that steps: a trace per cycle of the schedule
            path = numbered(path, trace.cycle)
        trace.extra_metadata = self.metadata
        count = write_trace(trace, path)
        say(f"{PROG}: {count:,} events of child process {trace.pid} written to {path}")
