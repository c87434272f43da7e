"""``frametrace run``: runs a program under the tracer and writes its trace
(or, with ``--steps``, under a profiling session).  What it does, and the
options: docs/cli.md.

The program itself is run by ``_program``; the traces are written by
``_run_output``.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Any, Callable, Optional, Sequence

from .. import _children, _endings, _running
from .._dataset import is_dataset
from .._output import say, why_unwritable
from .._ranks import distributed_info, numbered, output_name
from .._ranks import process_name as rank_name
from ..export import check_writable_format
from ._common import (PROG, TRACER_FLAGS, CommandError, non_negative, run_options,
                      tracer_arguments, tracer_options)
from ._program import (check_program, code_objects_on_stack, compile_script, execute, exit_code,
                       is_zip, main_module, own_code, report_error, runpy_functions,
                       thread_shutdown, wait_for_threads)
from ._run_output import ChildFile, CycleWriter, report_cycles, write_run_trace

DEFAULT_OUTPUT = "frametrace.json"


def add_parser(sub: Any) -> argparse.ArgumentParser:
    run = sub.add_parser(
        "run", help="run a Python program under the tracer and write its trace",
        description="Run a program as python would, traced from its first line to its "
                    "last; write the trace and print a summary on stderr.")
    run.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="trace.json|.pftrace",
                     help=f"where to write the trace: .json, .json.gz, .pftrace, "
                          f".pftrace.gz (default {DEFAULT_OUTPUT}, or frametrace.pftrace "
                          f"for a large trace)")
    tracer_arguments(run)
    run.add_argument("--fork-traces", action="store_true",
                     help="each os.fork() child that returns into run writes its own trace "
                          "(OUTPUT with .PID)")
    run.add_argument("--follow-children", action="store_true",
                     help="trace the program's child processes too, each to OUTPUT with "
                          ".PID")
    run.add_argument("--flight-recorder", metavar="DIR",
                     help="run under a flight recorder dumping the last steps to DIR "
                          "(no -o trace)")
    run.add_argument("--steps", type=_parse_steps, metavar="SPEC",
                     help="trace only the steps frametrace.step() marks: N, or "
                          "wait=W,warmup=U,active=A[,repeat=R][,skip_first=S]")
    run.add_argument("--python-steps", type=non_negative, metavar="N",
                     help="with --steps: trace Python in only the first N active steps of "
                          "each cycle (the steps go on being timed)")
    run.add_argument("-m", dest="module", metavar="module",
                     help="run a module as a script, as python -m does")
    run.add_argument("script", nargs="?", help="the program (a .py file, a directory or a "
                                                "zip file with a __main__.py)")
    run.add_argument("args", nargs="*", help="the program's arguments")
    return run


def _parse_steps(text: str) -> Any:
    """--steps: ``N`` (the first N steps) or ``key=value,...`` with the keys
    of frametrace.schedule()."""
    from ..schedule import schedule

    text = text.strip()
    if text.isdigit():
        return schedule(wait=0, warmup=0, active=int(text), repeat=1)
    options: dict[str, int] = {"wait": 0, "warmup": 0}
    keys = ("skip_first", "wait", "warmup", "active", "repeat")
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in keys:
            raise argparse.ArgumentTypeError(
                f"{text!r}: give N (the first N steps) or key=value pairs with keys "
                f"{', '.join(keys)} (e.g. wait=1,warmup=1,active=3,repeat=2)")
        try:
            options[key] = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: {key} must be an integer, "
                                             f"not {value.strip()!r}") from None
    if "active" not in options:
        raise argparse.ArgumentTypeError(f"{text!r}: active=N is required")
    try:
        return schedule(**options)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


# ---- the command line: run's options, then the program's ------------------------------------

_RUN_VALUE_OPTIONS = ("-o", "--output", "--steps", "--python-steps", "--flight-recorder") + tuple(
    flag for flag, _, value in TRACER_FLAGS if value)


def parse(parser: argparse.ArgumentParser, run_parser: argparse.ArgumentParser,
          argv: Sequence[str], own_process: bool) -> argparse.Namespace:
    """run's arguments (argv, after "run") parsed: argparse reads run's own
    options, the program's arguments are kept as given (ns.args)."""
    own, script, module, args = _split_run(argv)
    target = ["-m", module] if module is not None else ["--", script] if script else []
    ns = parser.parse_args(["run"] + own + target)
    ns.script, ns.module, ns.args = script, module, args
    ns.steps_text = _option_text(own, "--steps")
    ns.own_process = own_process
    if script is None and module is None:
        run_parser.error("give the program to run: a script or -m module")
    return ns


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
        if a.startswith(tuple(o + "=" for o in _RUN_VALUE_OPTIONS if o.startswith("--"))) or (a.startswith("-o") and len(a) > 2):
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


def _option_text(own: Sequence[str], option: str) -> str:
    """The text given to option (its last use), as typed."""
    text = ""
    for i, a in enumerate(own):
        if a == option and i + 1 < len(own):
            text = own[i + 1]
        elif a.startswith(option + "="):
            text = a[len(option) + 1:]
    return text


# ---- running ---------------------------------------------------------------------------------


def _check_output(output: str) -> None:
    """Refuses, before the program runs, an output its trace could not be
    written to."""
    path = output_name(output)
    if is_dataset(path):  # a folder: checked as the first file in it would be made
        path = os.path.join(path, "events", "part")
    why = why_unwritable(path)
    if why is not None:
        raise ValueError(f"-o {output}: {why}")


def _children_pattern(output: str, info: Any) -> str:
    """The glob the children's files of --follow-children match (ChildFile
    names them)."""
    if "{pid}" in output:
        return output_name(output.replace("{pid}", "*"), info)
    return numbered(output_name(output, info), "*")


def run(ns: argparse.Namespace) -> int:
    """Runs the parsed run command (see parse); the exit status."""
    endings = _endings.Endings()
    try:
        return _run_program(ns, ns.script, ns.module, ns.args, endings)
    finally:
        endings.close()  # a SIGTERM that came while the trace was written ends it here


def _run_program(ns: argparse.Namespace, script: Optional[str], module: Optional[str],
                 args: list[str], endings: _endings.Endings) -> int:
    from ..flight import FlightRecorder
    from ..session import Profile
    from ..tracer import Tracer

    output = os.path.abspath(ns.output)
    pid = os.getpid()
    options = tracer_options(ns)
    try:
        try:  # the format follows the extension: refused before the run
            check_writable_format(output)
        except ImportError as exc:
            raise CommandError(f"-o {ns.output}: {exc}") from None
        if ns.flight_recorder is None:
            _check_output(output)
        if ns.fork_traces and ns.steps is not None:
            raise ValueError("--fork-traces does not go with --steps")
        if ns.follow_children:
            ns.fork_traces = False  # what it did, --follow-children does too
        recorder = None
        if ns.flight_recorder is not None:
            for given, name in ((ns.steps is not None, "--steps"),
                                (ns.fork_traces, "--fork-traces"),
                                (ns.follow_children, "--follow-children"),
                                (ns.output != DEFAULT_OUTPUT, "-o")):
                if given:
                    raise ValueError(f"--flight-recorder does not go with {name}")
            recorder = FlightRecorder(ns.flight_recorder, options=options)
        else:
            options = run_options(options, ns.buffer_size is not None)
        tracer = Tracer(options=options)
        if ns.python_steps is not None and ns.steps is None:
            raise ValueError("--python-steps needs --steps")
        writer = CycleWriter(output) if ns.steps is not None else None
        session = None if ns.steps is None else Profile(
            schedule=ns.steps, python_steps=ns.python_steps, on_trace_ready=writer,
            options=options)
    except (TypeError, ValueError) as exc:
        raise CommandError(str(exc)) from None

    saved_argv, saved_path = sys.argv, list(sys.path)
    plan = None
    end_program: Optional[Callable[[], None]] = None
    if module is not None:
        sys.argv = ["-m"] + args  # runpy makes argv[0] the module's file, as python -m does
        sys.path[0:1] = [os.getcwd()]
        command = ["python", "-m", module] + args
    else:
        assert script is not None
        sys.argv = [script] + args
        if os.path.isdir(script) or is_zip(script):
            del sys.path[0:1]  # runpy puts the directory or zip file first
        else:
            sys.path[0:1] = [os.path.dirname(os.path.realpath(script))]
        command = ["python", script] + args
    process_name = " ".join(["python"] + command[1:2 + (module is not None)])
    metadata = {"command": command, "cwd": os.getcwd(), "python": platform.python_version()}
    try:
        problem = check_program(script, module)
        if problem is not None:
            raise CommandError(problem)

        prepared = None
        if module is None:
            if os.path.isdir(script) or is_zip(script):  # type: ignore[arg-type]
                # What run_path imports and looks up first, done now: not traced.
                import pkgutil

                pkgutil.get_importer(script)  # type: ignore[arg-type]
            else:
                # Read and compiled before tracing starts: the trace begins
                # with the program's first line.
                try:
                    code = compile_script(script)  # type: ignore[arg-type]
                except SyntaxError as exc:
                    exc.__traceback__ = None  # as python reports it: no frames of ours
                    return report_error(exc, set())
                except (OSError, ValueError) as exc:
                    raise CommandError(f"can't read {script!r}: {exc}") from None
                prepared = main_module(code, script)  # type: ignore[arg-type]
        skip = set(code_objects_on_stack())
        skip.update(own_code())
        skip.add(_ForkTracers.tracer.__code__)
        for func in runpy_functions():
            skip.add(func.__code__)
        plan = None
        if ns.follow_children:
            skip.update(_children.parent_code())
            plan = _children.Plan(options, ChildFile(output, metadata), tuple(skip),
                                  ns.steps, ns.python_steps)
            _children.enable(plan)

        def report(status: int) -> int:
            """Writes the trace (its cycles: reports them) once recording has
            stopped; the exit status."""
            if session is None:
                info = distributed_info()
                return write_run_trace(tracer, output_name(output, info),
                                        rank_name(info) or process_name,
                                        dict(metadata, exit_code=status), status,
                                        chosen=ns.output != DEFAULT_OUTPUT,
                                        children=(_children_pattern(output, info)
                                                  if ns.follow_children else None))
            assert writer is not None
            return report_cycles(writer, session, ns.steps_text, status)

        def end_abruptly(status: int, why: str) -> int:
            """The program ended without coming back here (see _endings):
            the end below, from where it ended."""
            if session is None:
                tracer.stop()
            else:
                try:
                    session.__exit__(None, None, None)
                except Exception as exc:  # noqa: BLE001 - the process ends next: told
                    say(f"{PROG} run: the session failed: {exc!r}")
            say(f"{PROG} run: the program {why}")
            try:
                return report(status)
            except BaseException as exc:  # noqa: B036 - the process ends next, whatever happens
                say(f"{PROG} run: the trace could not be written: {exc!r}")
                return status or 2

        if recorder is None:  # a flight recorder's dumps are written as they are taken
            skip.update((report.__code__, end_abruptly.__code__) + endings.own_code())
            endings.arm(end_abruptly, tracer.stop if session is None else session.stop)
        sys.stdout.flush()
        forks = _ForkTracers(tracer, skip) if ns.fork_traces else None
        end_program = _running.register_program(forks)
        shutdown = thread_shutdown(ns.own_process)
        if recorder is not None:
            for skipped in skip:
                recorder.tracer._ignore(skipped)
            try:
                recorder.__enter__()
            except (RuntimeError, ValueError) as exc:
                raise CommandError(str(exc)) from None
            error = execute(script, module, prepared)
            error = wait_for_threads(shutdown, error)
            if error is not None and not (isinstance(error, SystemExit)
                                          and exit_code(error) == 0):
                recorder.dump(f"exception {type(error).__name__}")
            recorder.__exit__(None, None, None)
        elif session is None:
            for skipped in skip:
                tracer._ignore(skipped)
            try:
                tracer.start()
            except RuntimeError as exc:  # another profiler (coverage, cProfile) is installed
                raise CommandError(str(exc)) from None
            error = execute(script, module, prepared)
            error = wait_for_threads(shutdown, error)
            if forks is not None:
                tracer = forks.tracer()
            tracer.stop()
            endings.claim()  # after the stop: no call of it in the trace
        else:
            assert writer is not None
            session.ignore_code(tuple(skip))
            writer.process_name = process_name
            writer.metadata = dict(metadata, steps=ns.steps_text)
            try:
                session.__enter__()
            except RuntimeError as exc:
                raise CommandError(str(exc)) from None
            error = execute(script, module, prepared)
            error = wait_for_threads(shutdown, error)
            session.stop()
            endings.claim()
            session.__exit__(None, None, None)
    finally:
        if end_program is not None:
            end_program()
        if plan is not None:
            _children.disable(plan)
        sys.argv = saved_argv
        sys.path[:] = saved_path

    if os.getpid() != pid and ns.follow_children:
        _children.finish()  # a forked child's trace ends here, not in this command's code
    status = report_error(error, skip)
    if os.getpid() != pid:
        # A forked child of the program, back here through SystemExit:
        # never the parent's file, nor its summary.
        if forks is None:
            return status
        child = os.getpid()
        return write_run_trace(tracer, numbered(output_name(output), child),
                                f"{rank_name(distributed_info(), process_name)} (child {child})",
                                dict(metadata, exit_code=status, parent_pid=pid), status)
    if recorder is not None:
        for path in recorder.dumps:
            say(f"{PROG} run: flight recorder dump: {path}")
        for failure in recorder.errors:
            say(f"{PROG} run: flight recorder error: {failure}")
        if not recorder.dumps and not recorder.errors:
            say(f"{PROG} run: flight recorder: nothing dumped")
        return status
    return report(status)


class _ForkTracers:
    """run --fork-traces: each child forked by the program traces itself
    with a tracer of its own, started just after the fork (the inherited
    one stopped there, see csrc/lifecycle.c), and writes it at its end as
    OUTPUT with .PID before the extension.  Children that end with
    os._exit (multiprocessing's) never come back to write it."""

    def __init__(self, parent: Any, skip: set):
        global _FORK_HOOK
        self.options = parent.options
        self.skip = skip
        self.parent = parent
        self.child: Any = None
        if not _FORK_HOOK:  # once per process: at-fork hooks stay for good
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _FORK_HOOK = True

    def start_child(self) -> None:
        from ..tracer import Tracer

        tracer = Tracer(options=self.options)
        for skipped in self.skip:
            tracer._ignore(skipped)
        tracer._ignore(_after_fork_in_child)
        tracer._ignore(self.start_child.__func__)  # type: ignore[attr-defined]
        try:
            tracer.start()
        except RuntimeError:
            return  # another tracer, started at the fork, has the child
        self.child = tracer

    def tracer(self) -> Any:
        """This process's tracer: the parent's, or the child's."""
        return self.child if self.child is not None else self.parent


_FORK_HOOK = False  # the at-fork hook is set: for good


def _after_fork_in_child() -> None:
    # Registered after frametrace's own at-fork hooks: the inherited
    # tracer is stopped already.
    forks = _running.fork_tracers  # the run --fork-traces under way
    if _running.program_running and forks is not None:
        forks.start_child()
