"""The ``frametrace`` command (also ``python -m frametrace``).

    frametrace run [options] script.py [args...]
    frametrace run [options] -m package.module [args...]
    frametrace attach PID [options]
    frametrace attach PID --dump [--reason TEXT] [--timeout SECONDS] [--no-signal]
    frametrace summary trace.json [options]
    frametrace flamegraph trace.json [-o out.svg]
    frametrace merge a.json b.json ... -o all.json
    frametrace convert a.json b.pftrace ... -o dataset.parquet
    frametrace view trace.json [--ui DIR] [--port N] [--no-browser]
    frametrace sql "QUERY" DATASET... [--format table|csv|json]
    frametrace ranks DATASET... [--svg heat.svg]
    frametrace compare BEFORE AFTER [--cycle N]

``frametrace COMMAND --help`` lists a command's options (argparse writes
its usage from the parser); ``run`` and ``attach`` take the tracer's
options (``frametrace.Options``) as flags, under "tracer options".

Each command is a module here with ``add_parser(sub)`` and ``run(ns)``
(``_run``, ``_attach``, ``_summary``, ``_flamegraph``, ``_merge``,
``_convert``, ``_view``, ``_sql``, ``_ranks``, ``_compare``); what they share is in
``_common``.  A command that fails
raises ``CommandError``, which main() prints once as ``frametrace COMMAND:
message`` on stderr, exiting with its status (2, or 130 for Ctrl-C).

Bad input (a missing script or module, a file that is not a trace
frametrace wrote) prints what is wrong on stderr and exits with 2.  Long
work shows its progress on stderr when stderr is a terminal.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from . import (_attach, _compare, _convert, _flamegraph, _merge, _ranks, _run, _sql, _summary,
               _view)
from ._common import PROG, CommandError, Progress
from ._common import tracer_options as _tracer_options  # noqa: F401 - the tests read flags back

__all__ = ["CommandError", "Progress", "main"]

# In the order --help lists them.
_COMMANDS = {"run": _run, "attach": _attach, "summary": _summary, "flamegraph": _flamegraph,
             "merge": _merge, "convert": _convert, "view": _view, "sql": _sql, "ranks": _ranks,
             "compare": _compare}


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command's parser, and its run subcommand's."""
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog=PROG, description="Trace every Python and C call of a program; look at traces.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="command")
    sub.required = True
    parsers = {name: command.add_parser(sub) for name, command in _COMMANDS.items()}
    return parser, parsers["run"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line argv (default sys.argv[1:]); returns the exit
    status.  With no argv, this process is the command: ``run`` waits for
    the program's non-daemon threads as Python's exit would."""
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, run_parser = _parser()
    try:
        if argv and argv[0] == "run":
            ns = _run.parse(parser, run_parser, argv[1:], own_process)
        else:
            ns = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        return _COMMANDS[ns.command].run(ns)
    except CommandError as exc:
        print(f"{PROG} {ns.command}: {exc.message}", file=sys.stderr)
        return exc.status
    except BrokenPipeError:
        if ns.command in ("run", "attach") or not own_process:
            raise  # the traced program's own, or a caller's stdout
        # A report's reader went away (``| head``): stop quietly, as a
        # pipe's writer does, with nothing left for the exit's flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
