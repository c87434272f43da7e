"""The ``frametrace`` command (also ``python -m frametrace``).

    frametrace run [-o trace.json] [--buffer-size N] [--no-c-calls] script.py [args...]
    frametrace run [options] -m package.module [args...]
    frametrace summary trace.json [--sort self|total|calls|mean|name] [--limit N] [--per-thread]
    frametrace flamegraph trace.json [-o out.svg]
    frametrace merge a.json b.json ... -o all.json

``run`` runs a program as ``python script.py`` (or ``python -m module``)
would: the same ``sys.argv``, as module ``__main__``, with ``sys.path[0]``
the script's directory (the current directory for ``-m``), and exits with
its exit code (an uncaught exception: its traceback and 1).  The program is
traced from just before its first line to just after its last (threads
still running then are cut there, flagged open_at_stop; ``atexit``
handlers are not traced).  The command's own frames and runpy's are kept
out of the trace; what runpy calls to read and compile the script (or to
find the module) shows as a few root events before ``exec`` runs the
program's ``<module>``.  The trace is written as Chrome trace JSON
(``frametrace.json`` by default; ``.json.gz`` compressed), then where it is
and a short summary are printed on stderr, so that the program's stdout
stays its own.

Bad input (a missing script or module, a file that is not a trace
frametrace wrote) prints what is wrong on stderr and exits with 2.  Long
work shows its progress on stderr when stderr is a terminal.
"""
from __future__ import annotations

import argparse
import os
import platform
import runpy
import sys
import time
import traceback
from typing import IO, Any, Optional, Sequence

from .export import TerminalProgress as Progress

PROG = "frametrace"
DEFAULT_OUTPUT = "frametrace.json"
RUN_SUMMARY_LIMIT = 10


# ---- progress -------------------------------------------------------------------------


def _error(command: str, message: str) -> int:
    print(f"{PROG} {command}: {message}", file=sys.stderr)
    return 2


# ---- run ------------------------------------------------------------------------------

_RUN_VALUE_OPTIONS = ("-o", "--output", "--buffer-size")
_RUN_FLAGS = ("--no-c-calls", "-h", "--help")


def _split_run(argv: Sequence[str]) -> tuple[list[str], Optional[str], Optional[str], list[str]]:
    """``run``'s own options, the script, the module, and the program's
    arguments: everything after the script (or ``-m module``) is the
    program's, as with ``python``."""
    own: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            i += 1
            break
        if a in _RUN_VALUE_OPTIONS:
            own += argv[i:i + 2]
            i += 2
            continue
        if a.startswith(("--output=", "--buffer-size=")) or (a.startswith("-o") and len(a) > 2):
            own.append(a)
            i += 1
            continue
        if a == "-m":
            if i + 1 >= len(argv):
                own.append(a)  # argparse says what is missing
                return own, None, None, []
            return own, None, argv[i + 1], list(argv[i + 2:])
        if a.startswith("-m") and len(a) > 2:
            return own, None, a[2:], list(argv[i + 1:])
        if a.startswith("-") and a != "-":
            own.append(a)  # a flag, or an unknown option argparse reports
            i += 1
            continue
        break
    if i < len(argv):
        return own, argv[i], None, list(argv[i + 1:])
    return own, None, None, []


def _exit_code(exc: SystemExit) -> int:
    """The exit status Python gives a SystemExit (printing its message, as
    Python does, when it is not an integer)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    print(code, file=sys.stderr)
    return 1


def _code_objects_on_stack() -> list[Any]:
    """The code objects of every frame now on this thread's stack: the
    command's own (and the interpreter's runpy), kept out of the trace."""
    codes = []
    frame: Any = sys._getframe(1)
    while frame is not None:
        codes.append(frame.f_code)
        frame = frame.f_back
    return codes


def _runpy_functions() -> list[Any]:
    """runpy's functions between the call and the program's first line."""
    funcs = []
    for name in ("run_path", "run_module", "_run_module_code", "_run_code", "_get_code_from_file",
                 "_get_main_module_details", "_get_module_details"):
        f = getattr(runpy, name, None)
        if callable(f) and hasattr(f, "__code__"):
            funcs.append(f)
    for cls_name in ("_TempModule", "_ModifiedArgv0"):
        cls = getattr(runpy, cls_name, None)
        for meth in ("__init__", "__enter__", "__exit__"):
            f = getattr(cls, meth, None)
            if hasattr(f, "__code__"):
                funcs.append(f)
    return funcs


def _trimmed_traceback(tb: Any, skip: set) -> Any:
    """tb without its first frames of code in skip (this command, runpy):
    the traceback starts in the program, as Python's would."""
    while tb is not None and tb.tb_frame.f_code in skip:
        tb = tb.tb_next
    return tb


def _check_program(script: Optional[str], module: Optional[str]) -> Optional[str]:
    """What is wrong with the program to run, or None."""
    if module is not None:
        import importlib.util

        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:
            return f"{exc} (while looking for module {module!r})"
        if spec is None:
            return f"No module named {module!r}"
        if spec.submodule_search_locations is not None:
            try:
                main_spec = importlib.util.find_spec(module + ".__main__")
            except (ImportError, ValueError):
                main_spec = None
            if main_spec is None:
                return (f"No module named {module + '.__main__'!r}; {module!r} is a package "
                        f"and cannot be directly executed")
        return None
    assert script is not None
    if os.path.isdir(script):
        if not os.path.exists(os.path.join(script, "__main__.py")):
            return f"can't find '__main__' module in {script!r}"
        return None
    try:
        with open(script, "rb"):
            pass
    except OSError as exc:
        return f"can't open file {script!r}: [Errno {exc.errno}] {exc.strerror}"
    return None


def _run(ns: argparse.Namespace, script: Optional[str], module: Optional[str],
         args: list[str]) -> int:
    from . import export, reports
    from .tracer import Tracer

    output = os.path.abspath(ns.output)
    try:
        tracer = Tracer(buffer_size=ns.buffer_size, c_calls=not ns.no_c_calls)
    except (TypeError, ValueError) as exc:
        return _error("run", str(exc))

    saved_argv, saved_path = sys.argv, list(sys.path)
    if module is not None:
        sys.argv = ["-m"] + args  # runpy makes argv[0] the module's file, as python -m does
        sys.path[0:1] = [os.getcwd()]
        command = ["python", "-m", module] + args
    else:
        assert script is not None
        sys.argv = [script] + args
        if os.path.isdir(script) or _is_zip(script):
            del sys.path[0:1]  # runpy puts the directory or zip file first
        else:
            sys.path[0:1] = [os.path.dirname(os.path.realpath(script))]
        command = ["python", script] + args
    try:
        problem = _check_program(script, module)
        if problem is not None:
            return _error("run", problem)

        if module is None:
            # What run_path imports and looks up first, done now: not traced.
            import pkgutil

            pkgutil.get_importer(script)  # type: ignore[arg-type]
        skip = set(_code_objects_on_stack())
        for func in _runpy_functions():
            skip.add(func.__code__)
        for code in skip:
            tracer._ignore(code)

        sys.stdout.flush()
        error: Optional[BaseException] = None
        try:
            tracer.start()
        except RuntimeError as exc:  # another profiler (coverage, cProfile) is installed
            return _error("run", str(exc))
        try:
            if module is not None:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(script, run_name="__main__")  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: B036 - the program's SystemExit and all
            tracer.stop()
            error = exc
        else:
            tracer.stop()
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path

    status = 0
    if isinstance(error, SystemExit):
        status = _exit_code(error)
    elif error is not None:
        tb = _trimmed_traceback(error.__traceback__, skip)
        error.__traceback__ = tb
        try:
            sys.stdout.flush()
        except Exception:  # noqa: BLE001 - the program may have closed it
            pass
        try:
            sys.excepthook(type(error), error, tb)
        except Exception:  # noqa: BLE001
            traceback.print_exception(type(error), error, tb)
        status = 130 if isinstance(error, KeyboardInterrupt) else 1
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass

    err = sys.stderr
    started = time.monotonic()
    progress = Progress(f"{PROG}: writing {output}")
    try:
        count = export.write_chrome(
            output, tracer,
            process_name=" ".join(["python"] + command[1:2 + (module is not None)]),
            metadata={"command": command, "exit_code": status, "cwd": os.getcwd(),
                      "python": platform.python_version()},
            progress=progress,
        )
    except OSError as exc:
        progress.close()
        print(f"{PROG} run: could not write the trace to {output}: {exc}", file=err)
        return status or 2
    progress.close()
    seconds = time.monotonic() - started
    events = tracer.getEvents()
    threads = len({e.thread_id for e in events})
    print(f"{PROG}: {count:,} events of {threads} thread{'s' if threads != 1 else ''} "
          f"written to {output} ({seconds:.2f} s)", file=err)
    if tracer.dropped:
        print(f"{PROG}: {tracer.dropped:,} events were dropped (the oldest, per thread: "
              f"--buffer-size is {tracer.buffer_size:,} events)", file=err)
    table = reports.summary(events, limit=RUN_SUMMARY_LIMIT, thread_names=tracer.thread_names)
    print(table, file=err)
    tracer.clear()
    return status


def _is_zip(path: str) -> bool:
    import zipfile

    try:
        return os.path.isfile(path) and zipfile.is_zipfile(path)
    except OSError:
        return False


# ---- summary, flamegraph, merge ---------------------------------------------------------


def _load(command: str, path: str) -> Any:
    from .loader import load

    progress = Progress(f"{PROG}: reading {path}")
    try:
        return load(path, progress=progress)
    finally:
        progress.close()


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"


def _summary(ns: argparse.Namespace) -> int:
    from . import reports
    from .loader import MergedTrace

    try:
        trace = _load("summary", ns.trace)
    except (OSError, ValueError) as exc:
        return _error("summary", str(exc))
    threads = len({e.thread_id for e in trace.events})
    what = (f"{len(trace.processes)} processes" if isinstance(trace, MergedTrace)
            else f"pid {trace.pid}")
    span = ""
    if trace.tracer_start_ns is not None and trace.tracer_stop_ns is not None:
        span = f", traced for {_ms(trace.tracer_stop_ns - trace.tracer_start_ns)}"
    extra = f", {len(trace.ranges)} ranges, {len(trace.steps)} steps" if trace.ranges or trace.steps else ""
    dropped = f", {trace.dropped:,} dropped" if trace.dropped else ""
    print(f"{ns.trace}: {what}, {len(trace.events):,} events, {threads} "
          f"thread{'s' if threads != 1 else ''}{span}{extra}{dropped}")
    table = reports.summary(trace, sort=ns.sort, limit=ns.limit or None, per_thread=ns.per_thread)
    print(table)
    return 0


def _flamegraph(ns: argparse.Namespace) -> int:
    from . import reports

    output = ns.output or _default_svg(ns.trace)
    try:
        trace = _load("flamegraph", ns.trace)
    except (OSError, ValueError) as exc:
        return _error("flamegraph", str(exc))
    try:
        reports.write_flamegraph_svg(trace, output, title=ns.title or os.path.basename(ns.trace))
    except OSError as exc:
        return _error("flamegraph", f"could not write {output}: {exc}")
    print(f"{PROG}: flame graph of {len(trace.events):,} events written to {output}",
          file=sys.stderr)
    return 0


def _default_svg(path: str) -> str:
    base = path
    for suffix in (".gz", ".json"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base + ".svg"


def _merge(ns: argparse.Namespace) -> int:
    from .loader import merge

    progress = Progress(f"{PROG}: merging into {ns.output}")
    try:
        other = merge(ns.traces, ns.output, progress=progress)
    except ValueError as exc:
        return _error("merge", str(exc))
    except OSError as exc:
        return _error("merge", f"{exc}")
    finally:
        progress.close()
    inputs = other["inputs"]
    print(f"{PROG}: {other['metadata']['events']:,} events of {len(inputs)} "
          f"process{'es' if len(inputs) != 1 else ''} merged into {ns.output}", file=sys.stderr)
    for d in inputs:
        renamed = f" (was {d['original_pid']})" if d["pid"] != d["original_pid"] else ""
        start = d["start_ns"] + d["shift_ns"] - other["origin_ns"]
        print(f"  pid {d['pid']}{renamed}: {d['source']}, starts at +{_ms(start)}",
              file=sys.stderr)
    return 0


# ---- main --------------------------------------------------------------------------------


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command's parser, and its run subcommand's."""
    from . import __version__
    from ._tracer import DEFAULT_BUFFER_SIZE
    from .reports import SORT_KEYS

    parser = argparse.ArgumentParser(
        prog=PROG, description="Trace every Python and C call of a program; look at traces.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="command")
    sub.required = True

    run = sub.add_parser(
        "run", help="run a Python program under the tracer and write its trace",
        usage=f"{PROG} run [-o trace.json] [--buffer-size N] [--no-c-calls] "
              f"(script.py | -m module) [args ...]",
        description="Run a program as python would (same sys.argv, as __main__, its exit "
                    "code), traced from its first line to its last; write the trace as "
                    "Chrome trace JSON and print a summary on stderr.")
    run.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="trace.json",
                     help=f"where to write the trace (default {DEFAULT_OUTPUT}; "
                          f".json.gz: compressed)")
    run.add_argument("--buffer-size", type=int, default=DEFAULT_BUFFER_SIZE, metavar="N",
                     help=f"ring capacity in events per thread (default {DEFAULT_BUFFER_SIZE:,}); "
                          f"when full, the oldest events are dropped")
    run.add_argument("--no-c-calls", action="store_true",
                     help="do not record calls of C functions")
    run.add_argument("-m", dest="module", metavar="module",
                     help="run a module as a script, as python -m does")
    run.add_argument("script", nargs="?", help="the program (a .py file, a directory or a "
                                                "zip file with a __main__.py)")
    run.add_argument("args", nargs="*", help="the program's arguments")

    summ = sub.add_parser("summary", help="print a per-function table of a trace",
                          description="Print a per-function table of a trace file "
                                      "(calls, total, self and mean time, share).")
    summ.add_argument("trace", help="a trace frametrace wrote (.json or .json.gz)")
    summ.add_argument("--sort", choices=SORT_KEYS, default="self", help="order (default self)")
    summ.add_argument("--limit", type=_non_negative, default=30, metavar="N",
                      help="at most N functions (default 30; 0: all)")
    summ.add_argument("--per-thread", action="store_true", help="a table per thread")

    flame = sub.add_parser("flamegraph", help="write an SVG flame graph of a trace",
                           description="Write a self-contained SVG flame graph of a trace file.")
    flame.add_argument("trace", help="a trace frametrace wrote (.json or .json.gz)")
    flame.add_argument("-o", "--output", metavar="out.svg",
                       help="where to write it (default: the trace's name with .svg)")
    flame.add_argument("--title", help="the graph's title (default: the trace's file name)")

    merge = sub.add_parser(
        "merge", help="merge the traces of several processes into one timeline",
        description="Merge Chrome traces frametrace wrote (of several processes) into one "
                    "file, each process on its own track, aligned by the wall-clock time "
                    "each trace records.")
    merge.add_argument("traces", nargs="+", metavar="trace.json", help="the traces to merge")
    merge.add_argument("-o", "--output", required=True, metavar="all.json",
                       help="the merged trace (.json.gz: compressed)")
    return parser, run


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line argv (default sys.argv[1:]); returns the exit
    status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, run_parser = _parser()
    try:
        if argv and argv[0] == "run":
            own, script, module, args = _split_run(argv[1:])
            target = ["-m", module] if module is not None else ["--", script] if script else []
            ns = parser.parse_args(["run"] + own + target)
            if script is None and module is None:
                run_parser.error("give the program to run: a script or -m module")
            return _run(ns, script, module, args)
        ns = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if ns.command == "summary":
        return _summary(ns)
    if ns.command == "flamegraph":
        return _flamegraph(ns)
    if ns.command == "merge":
        return _merge(ns)
    parser.error(f"unknown command {ns.command!r}")
    return 2
