"""What the commands share: the one error type, the tracer's options as
flags (run and attach), reading a trace with progress, and the few counts
and number types several commands print or parse."""
from __future__ import annotations

import argparse
from typing import Any, Callable, Optional, TypeVar

from .._output import say
from ..export import TerminalProgress as Progress

_N = TypeVar("_N", int, float)

PROG = "frametrace"
SUMMARY_LIMIT = 10  # rows of the summary run and attach print


class CommandError(Exception):
    """A command failed: main() prints ``frametrace COMMAND: message`` on
    stderr and exits with status."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.message = message
        self.status = status


# ---- the tracer's options (run and attach) ---------------------------------------------

# Flag, frametrace.Options field, and whether the flag takes a value.
TRACER_FLAGS = (("--buffer-size", "buffer_size", True), ("--max-memory", "max_memory", True),
                ("--no-c-calls", "c_calls", False), ("--backend", "backend", True),
                ("--ignore", "ignore", True), ("--include", "include", True))


def tracer_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the tracer's options (TRACER_FLAGS) to parser; none has a
    default (None: not given), frametrace.Options has them."""
    from .._tracer import DEFAULT_BUFFER_SIZE, DEFAULT_MAX_MEMORY
    from ..tracer import BACKENDS

    group = parser.add_argument_group("tracer options")
    helps = {
        "buffer_size": dict(type=int, metavar="N", help=(
            f"ring capacity in records per thread, a call and a return two (default "
            f"{DEFAULT_BUFFER_SIZE:,}; run's: what --max-memory holds)")),
        "max_memory": dict(type=int, metavar="BYTES", help=(
            f"bytes all threads' rings may hold together (default {DEFAULT_MAX_MEMORY:,})")),
        "c_calls": dict(action="store_false", default=None,
                        help="do not record calls of C functions"),
        "backend": dict(choices=BACKENDS, help=(
            "how calls are seen (default auto: sys.monitoring where there is one)")),
        "ignore": dict(action="append", metavar="PATTERN", help=(
            "do not record the functions PATTERN (a dotted name or a glob) matches "
            "(repeatable)")),
        "include": dict(action="append", metavar="PATTERN", help=(
            "record only the functions PATTERN matches (repeatable; --ignore removes from "
            "them)")),
    }
    for flag, name, _ in TRACER_FLAGS:
        group.add_argument(flag, dest=name, **helps[name])  # type: ignore[arg-type]


def tracer_options(ns: argparse.Namespace) -> Any:
    """The frametrace.Options of the flags given (tracer_arguments);
    CommandError naming a bad one."""
    from ..tracer import Options

    try:
        return Options(**{name: getattr(ns, name) for _, name, _ in TRACER_FLAGS
                          if getattr(ns, name) is not None})
    except (TypeError, ValueError) as exc:
        raise CommandError(str(exc)) from None


def tracer_flags_given(ns: argparse.Namespace) -> list[str]:
    return [flag for flag, name, _ in TRACER_FLAGS if getattr(ns, name) is not None]


# ---- traces --------------------------------------------------------------------------------


def load(path: str) -> Any:
    """The trace at path, read with progress on a terminal; OSError or
    ValueError saying what is wrong."""
    from ..loader import load as load_trace

    progress = Progress(f"{PROG}: reading {path}")
    try:
        return load_trace(path, progress=progress)
    finally:
        progress.close()


def count_threads(events: list) -> int:
    """How many threads recorded: each OS thread once (thread_serial), also
    those whose thread_id an earlier thread had."""
    return len({(e.thread_serial, e.thread_id if not e.thread_serial else 0) for e in events})


def report_dropped(dropped: int, options: Any, dropped_records: Optional[int] = None,
                   held: Optional[int] = None) -> None:
    """Says how many events were lost and which setting would have kept
    them (``Options.to_keep``; held: the bytes the rings held at the stop,
    when known)."""
    from .._tracer import MAX_BUFFER_SIZE

    if not dropped:
        return
    lost = dropped_records if dropped_records else 2 * dropped  # a call and a return
    name, value = options.to_keep(lost, held)
    if name == "max_memory":
        say(f"{PROG}: {dropped:,} events were lost entirely (the oldest): the threads' rings "
            f"together reached --max-memory {options.max_memory:,} bytes; --max-memory "
            f"{value:,} would have kept them")
        return
    hint = (f"--buffer-size {value:,} would have kept them" if value is not None
            else f"even --buffer-size {MAX_BUFFER_SIZE:,}, the most, would not have kept them all")
    say(f"{PROG}: {dropped:,} events were lost entirely (the oldest): a thread's ring reached "
        f"--buffer-size {options.buffer_size:,} records (a call and a return are two); {hint}")


def run_options(options: Any, buffer_size_given: bool) -> Any:
    """run's options: without --buffer-size, a thread's ring may grow to
    the whole --max-memory, so that an ordinary program is kept whole."""
    from .._tracer import MAX_BUFFER_SIZE
    from ..tracer import Options

    if buffer_size_given:
        return options
    fields = options.as_dict()
    fields["buffer_size"] = min(MAX_BUFFER_SIZE, options.max_memory // 8)
    return Options(**fields)


def ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"


# ---- number arguments ------------------------------------------------------------------------


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def bounded(kind: Callable[[str], _N], expected: str, ok: Callable[[_N], bool],
            bounds: str) -> Callable[[str], _N]:
    """An argparse type: the text read by kind (else "{expected} expected")
    and checked by ok (else "must be {bounds}")."""
    def parse(text: str) -> _N:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{expected} expected, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text}")
        return value
    return parse


positive_float = bounded(float, "a number of seconds", lambda v: 0 < v < float("inf"), "> 0")
