"""``frametrace attach``: traces a running CPython 3.14+ process from
outside (``frametrace.remote``), or asks its flight recorder to dump
(``--dump``, ``frametrace.remote.dump``).  What it does, its refusals and
exit statuses: docs/attach.md.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any

from ..export import check_writable_format
from ._common import (PROG, SUMMARY_LIMIT, CommandError, load, positive, positive_float,
                      report_dropped, tracer_arguments, tracer_flags_given, tracer_options)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    att = sub.add_parser(
        "attach", help="trace a running CPython 3.14+ process for a while",
        description="Trace a running CPython 3.14+ process for a while without restarting "
                    "it, or (--dump) ask its flight recorder to dump now.")
    att.add_argument("pid", type=int, help="the process to trace")
    what = att.add_mutually_exclusive_group()
    what.add_argument("--duration", type=positive_float, metavar="SECONDS",
                      help="trace for this long (default 5)")
    what.add_argument("--steps", type=positive, metavar="N",
                      help="trace until the N-th call of frametrace.step() (or of "
                           "--step-function) in the target")
    att.add_argument("--step-function", metavar="module:qualname",
                     help="count the calls of this function as the steps (default 1)")
    att.add_argument("-o", "--output", metavar="trace.json",
                     help="where the target writes the trace (default frametrace-PID.json)")
    tracer_arguments(att)
    att.add_argument("--timeout", type=positive_float, default=10.0, metavar="SECONDS",
                     help="how long the target's main thread may take to run Python code "
                          "(default 10)")
    att.add_argument("--dump", action="store_true",
                     help="ask the process's flight recorder to dump now; print the dump's "
                          "path")
    att.add_argument("--reason", metavar="TEXT",
                     help="with --dump: the reason the dump's metadata names (default attach)")
    att.add_argument("--no-signal", action="store_true",
                     help="with --dump: never send the recorder's signal")
    return att


def run(ns: argparse.Namespace) -> int:
    """Runs the parsed attach command; the exit status."""
    from .. import reports
    from ..remote import AttachError
    from ..remote._attacher import Attach

    err = sys.stderr
    if ns.dump:
        return _dump(ns)
    for option, given in (("--reason", ns.reason is not None), ("--no-signal", ns.no_signal)):
        if given:
            raise CommandError(f"{option} goes only with --dump")
    if ns.output is not None:
        try:
            check_writable_format(ns.output)  # the target writes by the extension: refused here first
        except (ValueError, ImportError) as exc:
            raise CommandError(str(exc)) from None
    options = tracer_options(ns)
    try:
        session = Attach(ns.pid, duration=ns.duration, output=ns.output, steps=ns.steps,
                          step_function=ns.step_function, options=options, timeout=ns.timeout,
                          report=lambda message: print(f"{PROG}: {message}", file=err))
    except (TypeError, ValueError) as exc:
        raise CommandError(str(exc)) from None

    def interrupt(signum: int, frame: Any) -> None:
        # The first Ctrl-C while the target traces stops it early: it
        # writes what it has.  Otherwise (or the second): give up.
        if session.going and not session.stop_requested:
            session.request_stop()
            # Not print(): the handler may run inside one.
            os.write(err.fileno(), f"{PROG}: stopping: the target writes what was "
                                   f"recorded\n".encode())
            return
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        result = session.run()
    except AttachError as exc:
        raise CommandError(str(exc)) from None
    except KeyboardInterrupt:
        if session.going:
            raise CommandError(f"interrupted; the target writes what it recorded to "
                               f"{session.config['output']}", 130) from None
        raise CommandError("interrupted before tracing began", 130) from None
    finally:
        signal.signal(signal.SIGINT, previous)
    traced = (result.stop_ns - result.start_ns) / 1e9
    why = {"duration": "the duration ended", "steps": f"after {result.steps} steps",
           "stopped": "stopped early", "exit": "the process exited"}.get(result.reason,
                                                                            result.reason)
    print(f"{PROG}: {result.events:,} events of {result.threads} "
          f"thread{'s' if result.threads != 1 else ''} (and frametrace's) written to "
          f"{result.path} by process {result.pid} (traced for {traced:.3f} s: {why})", file=err)
    report_dropped(result.stats.dropped, options, result.stats.dropped_records)
    if not result.path.endswith((".pftrace", ".pftrace.gz")):
        try:
            trace = _load_written_by_another(result.path)
        except (OSError, ValueError) as exc:
            print(f"{PROG} attach: could not read the trace back: {exc}", file=err)
        else:
            events = _without_thread(trace.events, {
                t.thread_id for t in trace.threads if t.name == "frametrace attach"})
            at_start = sum(1 for e in events if e.open_at_start)
            at_stop = sum(1 for e in events if e.open_at_stop)
            print(f"{PROG}: {at_start:,} frames were running at the start (open_at_start), "
                  f"{at_stop:,} at the stop (open_at_stop)", file=err)
            trace.events = events
            print(reports.summary(trace, limit=SUMMARY_LIMIT), file=err)
    if result.target_exited:
        raise CommandError(f"process {result.pid} exited before the end: the trace has what "
                           f"was recorded until then")
    return 0


def _dump(ns: argparse.Namespace) -> int:
    """attach --dump."""
    from ..remote import AttachError
    from ..remote._dump import Dump

    given = [option for option, value in (("--duration", ns.duration), ("--steps", ns.steps),
                                          ("--step-function", ns.step_function),
                                          ("-o", ns.output)) if value is not None]
    given += tracer_flags_given(ns)
    if given:
        raise CommandError(f"--dump does not go with {given[0]}: the flight "
                           f"recorder's own settings and dump_dir apply")
    try:
        request = Dump(ns.pid, reason="attach" if ns.reason is None else ns.reason,
                        timeout=ns.timeout, use_signal=not ns.no_signal,
                        report=lambda message: print(f"{PROG}: {message}", file=sys.stderr))
    except (TypeError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    try:
        result = request.run()
    except AttachError as exc:
        raise CommandError(str(exc)) from None
    except KeyboardInterrupt:
        raise CommandError("interrupted" + ("; the flight recorder still writes its dump"
                                            if request.going else ""), 130) from None
    for path in result.paths:
        print(path)
    return 0


def _load_written_by_another(path: str) -> Any:
    """The trace another process (maybe another user's) wrote at path:
    read only as the regular file found there when opened, never through
    a link or from a FIFO or device put in its place (a read that never
    ends)."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path} is not a regular file")
        opened = f"/proc/self/fd/{fd}"
        try:
            return load(opened)
        except (OSError, ValueError) as exc:
            raise ValueError(str(exc).replace(opened, path)) from None
    finally:
        os.close(fd)


def _without_thread(events: list, threads: set) -> list:
    """events less those of threads (frametrace's, waiting), parents
    renumbered."""
    from .._tracer import Event

    if not threads:
        return events
    kept = [i for i, e in enumerate(events) if e.thread_id not in threads]
    index = {old: new for new, old in enumerate(kept)}
    out = []
    for i in kept:
        fields = list(events[i])
        fields[9] = index.get(fields[9], -1)  # parent
        out.append(Event(fields))
    return out
