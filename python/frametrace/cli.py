"""The ``frametrace`` command (also ``python -m frametrace``).

    frametrace run [options] script.py [args...]
    frametrace run [options] -m package.module [args...]
    frametrace attach PID [options]
    frametrace attach PID --dump [--reason TEXT] [--timeout SECONDS] [--no-signal]
    frametrace summary trace.json [options]
    frametrace flamegraph trace.json [-o out.svg]
    frametrace merge a.json b.json ... -o all.json

``frametrace COMMAND --help`` lists a command's options (argparse writes
its usage from the parser); ``run`` and ``attach`` take the tracer's
options (``frametrace.Options``) as flags, under "tracer options".

``run`` runs a program as ``python script.py`` (or ``python -m module``)
would: the same ``sys.argv``, as module ``__main__``, with ``sys.path[0]``
the script's directory (the current directory for ``-m``), and exits with
its exit code (an uncaught exception: its traceback and 1).  The program is
traced from just before its first line until its non-daemon threads have
ended, as Python waits for them (daemon threads still running then are cut
there, flagged open_at_stop; ``atexit`` handlers are not traced).  A child
the program forks that comes back here (``sys.exit()`` in the child)
writes nothing; with ``--fork-traces`` it writes its own trace, from the
fork on, as the output's name with ``.PID`` before the extension.
With ``--follow-children`` every child process (os.fork, multiprocessing
with fork, spawn or forkserver) traces its whole life and writes the same
name (see ``frametrace._children``).  In a rank of a distributed job
(torchrun's RANK, or torch.distributed initialised) the process is named
"rank N" and the output gets ``.rankN`` before its extension unless it
holds ``{rank}``; ``{pid}`` is replaced too.
The command's own frames and runpy's are kept
out of the trace.  A script file is read and compiled before tracing
starts and its code called as a function, so the main thread's trace has
one root, the program's ``<module>``; with ``-m``, a directory or a zip
file, what runpy calls to find and compile the code shows as a few root
events before ``exec`` runs it.  The trace is written as Chrome trace JSON
(``frametrace.json`` by default; ``.json.gz`` compressed), then where it is
and a short summary are printed on stderr, so that the program's stdout
stays its own (a closed or broken stderr loses those lines, never the
trace, nor the exit status).  A program ended by SIGTERM (when it set no
handler of its own) or by ``os._exit()`` from any thread has its trace
written too, then the process ends as it would have (see
``frametrace._endings``).  An output that could not be written (a
folder, a folder where no file can be created) is refused before the
program runs.

``run --steps SPEC`` runs the program under a profiling session
(``frametrace.profile``) instead: the program marks the end of each step of
its loop with ``frametrace.step()`` (a no-op when nothing is profiling, so
the program runs as well without frametrace), and only the steps SPEC
selects are traced.  SPEC is ``N`` (the first N steps: steps 0 to N-1) or a
schedule, ``wait=W,warmup=U,active=A[,repeat=R][,skip_first=S]`` with the
meaning of ``frametrace.schedule`` (omitted: wait and warmup 0, repeat 0:
cycles on until the program ends).  The trace of each cycle is written when
its last active step ends, while the program runs, as the output's name
with ``.CYCLE`` before the extension (``frametrace.0.json``, ...).  With
``--python-steps N``, Python is traced in only the first N active steps of
each cycle; the remaining ones are still timed as steps.  Nothing recorded:
a message, exit status 2 unless the program failed.

``attach PID`` traces a running CPython 3.14+ process for a while, from
outside, without restarting it (PEP 768 ``sys.remote_exec``; see
``frametrace.remote``): for ``--duration`` seconds (default 5), or until its
N-th ``frametrace.step()``, or the end of the N-th call of
``--step-function`` begun after the attach.  The target writes the trace
(``frametrace-PID.json`` by default, ``-o`` as seen from the current
directory), then where it is and a short summary are printed on stderr.
A target that cannot be traced (not CPython 3.14+, remote debugging
disabled, no permission, frametrace not importable there, a tracer already
running there), or whose main thread runs no Python code within
``--timeout`` seconds, is left untouched: the reason, exit status 2.  A
target that exits first writes what was recorded: exit status 2 too.
Ctrl-C stops the tracing early; the trace is still written.

``attach PID --dump`` asks the flight recorder running in the process
(``frametrace.flight_recorder``, ``frametrace run --flight-recorder``) to
dump its last steps now, waits until the dump is written and prints its
path on stdout; its metadata's reason is ``--reason`` (default "attach").
The request goes through ``sys.remote_exec`` (CPython 3.14+) and is served
by the recorder's writer thread.  When it cannot be (an older CPython,
remote debugging disabled, or the main thread blocked in a C call for
``--timeout`` seconds), the recorder's signal (SIGUSR2 by default), which
it names in a memfd of its own, is sent instead (``--no-signal``: not
sent, the error says which one would work): that dump's reason is
"signal SIGUSR2".  No flight recorder running there: a message, exit
status 2 (see ``frametrace.remote.dump``).

Bad input (a missing script or module, a file that is not a trace
frametrace wrote) prints what is wrong on stderr and exits with 2.  Long
work shows its progress on stderr when stderr is a terminal.
"""
from __future__ import annotations

import argparse
import builtins
import os
import platform
import runpy
import sys
import threading
import time
import traceback
import types
from typing import Any, Optional, Sequence

from . import _children, _endings
from ._output import reason, say, why_unwritable
from ._ranks import distributed_info, numbered, output_name
from ._ranks import process_name as rank_name
from .export import TerminalProgress as Progress
from .export import output_format, write_trace

PROG = "frametrace"
DEFAULT_OUTPUT = "frametrace.json"
RUN_SUMMARY_LIMIT = 10


# ---- progress -------------------------------------------------------------------------


def _error(command: str, message: str) -> int:
    print(f"{PROG} {command}: {message}", file=sys.stderr)
    return 2


# ---- run ------------------------------------------------------------------------------

# The tracer's options on the command line (run and attach): flag, Options
# field, and whether the flag takes a value.  _tracer_arguments() adds
# them, _tracer_options() reads them back.
_TRACER_FLAGS = (("--buffer-size", "buffer_size", True), ("--max-memory", "max_memory", True),
                 ("--no-c-calls", "c_calls", False), ("--backend", "backend", True),
                 ("--ignore", "ignore", True), ("--include", "include", True))
_RUN_VALUE_OPTIONS = ("-o", "--output", "--steps", "--python-steps", "--flight-recorder") + tuple(
    flag for flag, _, value in _TRACER_FLAGS if value)


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


def _exit_code(exc: SystemExit) -> int:
    """The exit status Python gives a SystemExit (printing its message, as
    Python does, when it is not an integer)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    say(str(code))
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


def _check_output(output: str) -> None:
    """Refuses, before the program runs, an output its trace could not be
    written to."""
    why = why_unwritable(output_name(output))
    if why is not None:
        raise ValueError(f"-o {output}: {why}")


def _run(ns: argparse.Namespace, script: Optional[str], module: Optional[str],
         args: list[str]) -> int:
    endings = _endings.Endings()
    try:
        return _run_program(ns, script, module, args, endings)
    finally:
        endings.close()  # a SIGTERM that came while the trace was written ends it here


def _run_program(ns: argparse.Namespace, script: Optional[str], module: Optional[str],
                 args: list[str], endings: _endings.Endings) -> int:
    from .flight import FlightRecorder
    from .session import Profile
    from .tracer import Tracer

    output = os.path.abspath(ns.output)
    pid = os.getpid()
    try:
        options = _tracer_options(ns)
        output_format(output)  # the format follows the extension: refused before the run
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
        tracer = Tracer(options=options)
        if ns.python_steps is not None and ns.steps is None:
            raise ValueError("--python-steps needs --steps")
        writer = _CycleWriter(output) if ns.steps is not None else None
        session = None if ns.steps is None else Profile(
            schedule=ns.steps, python_steps=ns.python_steps, on_trace_ready=writer,
            options=options)
    except (TypeError, ValueError) as exc:
        return _error("run", str(exc))

    saved_argv, saved_path = sys.argv, list(sys.path)
    plan = None
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
    process_name = " ".join(["python"] + command[1:2 + (module is not None)])
    metadata = {"command": command, "cwd": os.getcwd(), "python": platform.python_version()}
    try:
        problem = _check_program(script, module)
        if problem is not None:
            return _error("run", problem)

        prepared = None
        if module is None:
            if os.path.isdir(script) or _is_zip(script):  # type: ignore[arg-type]
                # What run_path imports and looks up first, done now: not traced.
                import pkgutil

                pkgutil.get_importer(script)  # type: ignore[arg-type]
            else:
                # Read and compiled before tracing starts: the trace begins
                # with the program's first line.
                try:
                    code = _compile_script(script)  # type: ignore[arg-type]
                except SyntaxError as exc:
                    exc.__traceback__ = None  # as python reports it: no frames of ours
                    return _report_error(exc, set())
                except (OSError, ValueError) as exc:
                    return _error("run", f"can't read {script!r}: {exc}")
                prepared = _main_module(code, script)  # type: ignore[arg-type]
        skip = set(_code_objects_on_stack())
        skip.add(_execute.__code__)
        skip.add(_wait_for_threads.__code__)
        skip.add(_threads_left.__code__)
        skip.add(_ForkTracers.tracer.__code__)
        for func in _runpy_functions():
            skip.add(func.__code__)
        plan = None
        if ns.follow_children:
            skip.update(_children.parent_code())
            plan = _children.Plan(options, _ChildFile(output, metadata), tuple(skip),
                                  ns.steps, ns.python_steps)
            _children.enable(plan)

        def report(status: int) -> int:
            """Writes the trace (its cycles: reports them) once recording has
            stopped; the exit status."""
            if session is None:
                info = distributed_info()
                return _write_run_trace(tracer, output_name(output, info),
                                        rank_name(info) or process_name,
                                        dict(metadata, exit_code=status), status)
            assert writer is not None
            return _report_cycles(writer, session, ns.steps_text, status)

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
        global _RUNNING, _FORKS
        _RUNNING = True
        forks = _FORKS = _ForkTracers(tracer, skip) if ns.fork_traces else None
        shutdown = _thread_shutdown(ns.own_process)
        if recorder is not None:
            for skipped in skip:
                recorder.tracer._ignore(skipped)
            try:
                recorder.__enter__()
            except (RuntimeError, ValueError) as exc:
                return _error("run", str(exc))
            error = _execute(script, module, prepared)
            error = _wait_for_threads(shutdown, error)
            if error is not None and not (isinstance(error, SystemExit)
                                          and _exit_code(error) == 0):
                recorder.dump(f"exception {type(error).__name__}")
            recorder.__exit__(None, None, None)
        elif session is None:
            for skipped in skip:
                tracer._ignore(skipped)
            try:
                tracer.start()
            except RuntimeError as exc:  # another profiler (coverage, cProfile) is installed
                return _error("run", str(exc))
            error = _execute(script, module, prepared)
            error = _wait_for_threads(shutdown, error)
            if forks is not None:
                tracer = forks.tracer()
            tracer.stop()
            endings.claim()  # after the stop: no call of it in the trace
        else:
            assert writer is not None
            session._ignored += tuple(skip)
            writer.process_name = process_name
            writer.metadata = dict(metadata, steps=ns.steps_text)
            try:
                session.__enter__()
            except RuntimeError as exc:
                return _error("run", str(exc))
            error = _execute(script, module, prepared)
            error = _wait_for_threads(shutdown, error)
            session.stop()
            endings.claim()
            session.__exit__(None, None, None)
    finally:
        _RUNNING, _FORKS = False, None
        if plan is not None:
            _children.disable(plan)
        sys.argv = saved_argv
        sys.path[:] = saved_path

    if os.getpid() != pid and ns.follow_children:
        _children.finish()  # a forked child's trace ends here, not in this command's code
    status = _report_error(error, skip)
    if os.getpid() != pid:
        # A forked child of the program, back here through SystemExit:
        # never the parent's file, nor its summary.
        if forks is None:
            return status
        child = os.getpid()
        return _write_run_trace(tracer, numbered(output_name(output), child),
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


# True while run executes the program: the pytest plugin's fixture skips.
_RUNNING = False


def _thread_shutdown(own_process: bool) -> Optional[tuple[int, Any]]:
    """What waits for the program's non-daemon threads as Python does
    before it exits: threading._shutdown, which also runs threading's exit
    hooks (concurrent.futures' ends its workers).  Only when this process
    is the command (main() with no argv), in its main thread: _shutdown
    ends the threading of the process.  Looked up before tracing starts."""
    if not own_process or threading.current_thread() is not threading.main_thread():
        return None
    wait = threading._shutdown if hasattr(threading, "_shutdown") else _join_threads
    return threading.get_ident(), wait


def _threads_left(me: int) -> bool:
    """Whether threading has a non-daemon thread other than me, running or
    starting.  Calls nothing (a call would be in the trace): it reads
    threading's tables; if they are not what it expects, True."""
    try:
        for ident in threading._active:  # type: ignore[attr-defined]
            if ident != me and not threading._active[ident]._daemonic:  # type: ignore[attr-defined]
                return True
        for thread in threading._limbo:  # type: ignore[attr-defined]
            if not thread._daemonic:
                return True
    except Exception:  # noqa: BLE001 - changed while read, or not CPython's
        return True
    return False


def _join_threads() -> None:
    me = threading.current_thread()
    while True:
        left = [t for t in threading.enumerate() if t is not me and not t.daemon and t.is_alive()]
        if not left:
            return
        for t in left:
            t.join()


def _wait_for_threads(shutdown: Optional[tuple[int, Any]],
                      error: Optional[BaseException]) -> Optional[BaseException]:
    """Runs shutdown (see _thread_shutdown), still tracing; Ctrl-C ends the
    wait.  error is what the program raised; what to report is returned."""
    if shutdown is None:
        return error
    me, wait = shutdown
    if not _threads_left(me):
        return error  # Python's own wait, at exit, has nothing to do
    try:
        wait()
    except KeyboardInterrupt as exc:
        return error if error is not None else exc
    return error


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
        from .tracer import Tracer

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


# The run --fork-traces under way, and whether its at-fork hook is set.
_FORKS: Optional[_ForkTracers] = None
_FORK_HOOK = False


def _after_fork_in_child() -> None:
    # Registered after frametrace's own at-fork hooks: the inherited
    # tracer is stopped already.
    if _RUNNING and _FORKS is not None:
        _FORKS.start_child()


class _ChildFile:
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


def _compile_script(script: str) -> Any:
    """The code of a script file, as runpy.run_path reads it: a compiled
    .pyc file, or source."""
    import io
    import pkgutil

    with io.open_code(os.path.abspath(script)) as fh:
        code = pkgutil.read_code(fh)
    if code is None:
        with io.open_code(os.path.abspath(script)) as fh:
            code = compile(fh.read(), script, "exec")
    return code


def _execute(script: Optional[str], module: Optional[str],
             prepared: Optional[tuple[Any, Any]]) -> Optional[BaseException]:
    """Runs the program as __main__ (prepared: a script's module and code,
    from _main_module); what it raised (SystemExit too), or None."""
    try:
        if module is not None:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        elif prepared is None:
            runpy.run_path(script, run_name="__main__")  # type: ignore[arg-type]
        else:
            main, program = prepared
            # As a function, not through exec(): the trace's first event is
            # the program's <module>, with no exec() call around it.
            saved = sys.modules["__main__"]
            sys.modules["__main__"] = main
            try:
                program()
            finally:
                sys.modules["__main__"] = saved
    except BaseException as exc:  # noqa: B036 - the program's SystemExit and all
        return exc
    return None


def _main_module(code: Any, script: str) -> tuple[Any, Any]:
    """Module __main__ for a script's code, with the globals run_path gives
    it, and the code as a function of its globals."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=script, __cached__=None, __loader__=None, __package__="",
                         __spec__=None, __builtins__=builtins)
    return main, types.FunctionType(code, main.__dict__)


def _report_error(error: Optional[BaseException], skip: set) -> int:
    """The program's exit status; prints its uncaught exception as Python
    would."""
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
            try:
                traceback.print_exception(type(error), error, tb)
            except Exception:  # noqa: BLE001 - no stderr left to tell it: the status does
                pass
        status = 130 if isinstance(error, KeyboardInterrupt) else 1
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
    return status


def _write_run_trace(tracer: Any, output: str, process_name: str, metadata: dict,
                     status: int) -> int:
    from . import export, reports, view
    from .trace import as_trace

    started = time.monotonic()
    progress = Progress(f"{PROG}: writing {output}")
    trace = as_trace(tracer)
    trace.process_name, trace.extra_metadata = process_name, metadata
    try:
        count = export.write_trace(trace, output, progress=progress)
    except OSError as exc:
        progress.close()
        say(f"{PROG} run: could not write the trace to {output}: {reason(exc)}")
        return status or 2
    progress.close()
    seconds = time.monotonic() - started
    events = trace.events
    threads = _count_threads(events)
    say(f"{PROG}: {count:,} events of {threads} thread{'s' if threads != 1 else ''} "
        f"written to {output} ({seconds:.2f} s)")
    _report_dropped(tracer.stats.dropped, tracer.buffer_size)
    table = reports.summary(trace, limit=RUN_SUMMARY_LIMIT)
    say(str(table))
    say(view.open_hint(output))
    tracer.clear()
    return status


def _report_dropped(dropped: int, buffer_size: int) -> None:
    if dropped:
        say(f"{PROG}: {dropped:,} events were lost entirely (the oldest, per thread: "
            f"--buffer-size is {buffer_size:,} records, a call and a return are two)")


class _CycleWriter:
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
        if trace.tracer is None and output_format(path) == "perfetto":
            self.fail(path, "no Python was traced in this cycle (--python-steps 0): .pftrace is "
                            "written from a tracer's records; use -o with .json for the steps")
            return
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
            from . import reports

            # The one cycle whose events are built: its summary is printed at the end.
            self.summary = reports.summary(trace, limit=RUN_SUMMARY_LIMIT)
            self.summary_cycle = trace.cycle
        if trace.tracer is not None:
            trace.tracer.clear()  # the file has it

    def fail(self, path: str, problem: str) -> None:
        self.failed_count += 1
        if len(self.failed) < self.MAX_FAILED:
            self.failed.append((path, problem))


def _report_cycles(writer: _CycleWriter, session: Any, steps_text: str, status: int) -> int:
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
        from . import view

        say(view.open_hint(writer.path(writer.summary_cycle)))
    return status or (2 if writer.failed else 0)


def _tracer_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the tracer's options (_TRACER_FLAGS) to parser; none has a
    default (None: not given), frametrace.Options has them."""
    from ._tracer import DEFAULT_BUFFER_SIZE, DEFAULT_MAX_MEMORY
    from .tracer import BACKENDS

    group = parser.add_argument_group("tracer options")
    helps = {
        "buffer_size": dict(type=int, metavar="N", help=(
            f"ring capacity in records per thread, a call and a return being two (default "
            f"{DEFAULT_BUFFER_SIZE:,}); when full, the oldest records are overwritten")),
        "max_memory": dict(type=int, metavar="BYTES", help=(
            f"bytes all threads' rings may hold together (default {DEFAULT_MAX_MEMORY:,}); "
            f"past it, ended threads' records go first, then full rings stop growing and "
            f"overwrite their oldest records")),
        "c_calls": dict(action="store_false", default=None,
                        help="do not record calls of C functions"),
        "backend": dict(choices=BACKENDS, help=(
            "how calls are seen: PyEval_SetProfile, or sys.monitoring (CPython 3.12+); "
            "auto (default): sys.monitoring where there is one")),
        "ignore": dict(action="append", metavar="PATTERN", help=(
            "do not record the functions PATTERN matches (repeatable): a module and its "
            "submodules or a module.qualname and what is nested in it (torch.nn, "
            "mymod.Class), or a glob over module.qualname (*.helper_*); their calls are "
            "still recorded")),
        "include": dict(action="append", metavar="PATTERN", help=(
            "record only the functions PATTERN matches (repeatable; --ignore removes from "
            "them)")),
    }
    for flag, name, _ in _TRACER_FLAGS:
        group.add_argument(flag, dest=name, **helps[name])  # type: ignore[arg-type]


def _tracer_options(ns: argparse.Namespace) -> Any:
    """The frametrace.Options of the flags given (_tracer_arguments);
    TypeError or ValueError naming a bad one."""
    from .tracer import Options

    return Options(**{name: getattr(ns, name) for _, name, _ in _TRACER_FLAGS
                      if getattr(ns, name) is not None})


def _tracer_flags_given(ns: argparse.Namespace) -> list[str]:
    return [flag for flag, name, _ in _TRACER_FLAGS if getattr(ns, name) is not None]


def _parse_steps(text: str) -> Any:
    """--steps: ``N`` (the first N steps) or ``key=value,...`` with the keys
    of frametrace.schedule()."""
    from .schedule import schedule

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


def _is_zip(path: str) -> bool:
    import zipfile

    try:
        return os.path.isfile(path) and zipfile.is_zipfile(path)
    except OSError:
        return False


# ---- attach -----------------------------------------------------------------------------


def _attach(ns: argparse.Namespace) -> int:
    from . import reports
    from .remote import AttachError, _Attach

    import signal

    err = sys.stderr
    if ns.dump:
        return _attach_dump(ns)
    for option, given in (("--reason", ns.reason is not None), ("--no-signal", ns.no_signal)):
        if given:
            return _error("attach", f"{option} goes only with --dump")
    if ns.output is not None:
        try:
            output_format(ns.output)  # the target writes by the extension: refused here first
        except ValueError as exc:
            return _error("attach", str(exc))
    try:
        options = _tracer_options(ns)
        session = _Attach(ns.pid, duration=ns.duration, output=ns.output, steps=ns.steps,
                          step_function=ns.step_function, options=options, timeout=ns.timeout,
                          report=lambda message: print(f"{PROG}: {message}", file=err))
    except (TypeError, ValueError) as exc:
        return _error("attach", str(exc))

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
        return _error("attach", str(exc))
    except KeyboardInterrupt:
        if session.going:
            print(f"{PROG} attach: interrupted; the target writes what it recorded to "
                  f"{session.config['output']}", file=err)
        else:
            print(f"{PROG} attach: interrupted before tracing began", file=err)
        return 130
    finally:
        signal.signal(signal.SIGINT, previous)
    traced = (result.stop_ns - result.start_ns) / 1e9
    why = {"duration": "the duration ended", "steps": f"after {result.steps} steps",
           "stopped": "stopped early", "exit": "the process exited"}.get(result.reason,
                                                                            result.reason)
    print(f"{PROG}: {result.events:,} events of {result.threads} "
          f"thread{'s' if result.threads != 1 else ''} (and frametrace's) written to "
          f"{result.path} by process {result.pid} (traced for {traced:.3f} s: {why})", file=err)
    _report_dropped(result.dropped, options.buffer_size)
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
            print(reports.summary(trace, limit=RUN_SUMMARY_LIMIT), file=err)
    if result.target_exited:
        print(f"{PROG} attach: process {result.pid} exited before the end: the trace has what "
              f"was recorded until then", file=err)
        return 2
    return 0


def _attach_dump(ns: argparse.Namespace) -> int:
    from .remote import AttachError, _Dump

    given = [option for option, value in (("--duration", ns.duration), ("--steps", ns.steps),
                                          ("--step-function", ns.step_function),
                                          ("-o", ns.output)) if value is not None]
    given += _tracer_flags_given(ns)
    if given:
        return _error("attach", f"--dump does not go with {given[0]}: the flight "
                                f"recorder's own settings and dump_dir apply")
    try:
        request = _Dump(ns.pid, reason="attach" if ns.reason is None else ns.reason,
                        timeout=ns.timeout, use_signal=not ns.no_signal,
                        report=lambda message: print(f"{PROG}: {message}", file=sys.stderr))
    except (TypeError, ValueError) as exc:
        return _error("attach", str(exc))
    try:
        result = request.run()
    except AttachError as exc:
        return _error("attach", str(exc))
    except KeyboardInterrupt:
        print(f"{PROG} attach: interrupted"
              + ("; the flight recorder still writes its dump" if request.going else ""),
              file=sys.stderr)
        return 130
    for path in result.paths:
        print(path)
    return 0


def _count_threads(events: list) -> int:
    """How many threads recorded: each OS thread once (thread_serial), also
    those whose thread_id an earlier thread had."""
    return len({(e.thread_serial, e.thread_id if not e.thread_serial else 0) for e in events})


def _without_thread(events: list, threads: set) -> list:
    """events less those of threads (frametrace's, waiting), parents
    renumbered."""
    from ._tracer import Event

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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of seconds expected, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


# ---- summary, flamegraph, merge ---------------------------------------------------------


def _load(command: str, path: str) -> Any:
    from .loader import load

    progress = Progress(f"{PROG}: reading {path}")
    try:
        return load(path, progress=progress)
    finally:
        progress.close()


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
            return _load("attach", opened)
        except (OSError, ValueError) as exc:
            raise ValueError(str(exc).replace(opened, path)) from None
    finally:
        os.close(fd)


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"


def _summary(ns: argparse.Namespace) -> int:
    from . import reports
    from .loader import MergedTrace

    try:
        trace = _load("summary", ns.trace)
    except (OSError, ValueError) as exc:
        return _error("summary", str(exc))
    threads = _count_threads(trace.events)
    what = (f"{len(trace.processes)} processes" if isinstance(trace, MergedTrace)
            else f"pid {trace.pid}")
    span = ""
    if trace.tracer_start_ns is not None and trace.tracer_stop_ns is not None:
        span = f", traced for {_ms(trace.tracer_stop_ns - trace.tracer_start_ns)}"
    extra = f", {len(trace.ranges)} ranges, {len(trace.steps)} steps" if trace.ranges or trace.steps else ""
    dropped = f", {trace.stats.dropped:,} dropped" if trace.stats.dropped else ""
    print(f"{ns.trace}: {what}, {len(trace.events):,} events, {threads} "
          f"thread{'s' if threads != 1 else ''}{span}{extra}{dropped}")
    table = reports.summary(trace, sort=ns.sort, limit=ns.limit or None, per_thread=ns.per_thread,
                            group_by_input_shape=ns.group_by_input_shape)
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
        return _error("flamegraph", f"could not write {output}: {reason(exc)}")
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
        name = f" {d['process_name']!r}" if d.get("process_name") else ""
        print(f"  pid {d['pid']}{renamed}{name}: {d['source']}, starts at +{_ms(start)}",
              file=sys.stderr)
    return 0


# ---- main --------------------------------------------------------------------------------


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command's parser, and its run subcommand's."""
    from . import __version__
    from .reports import SORT_KEYS

    parser = argparse.ArgumentParser(
        prog=PROG, description="Trace every Python and C call of a program; look at traces.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="command")
    sub.required = True

    run = sub.add_parser(
        "run", help="run a Python program under the tracer and write its trace",
        description="Run a program as python would (same sys.argv, as __main__, its exit "
                    "code), traced from its first line to its last; write the trace "
                    "(Chrome trace JSON, or Perfetto's .pftrace, by the extension) and print "
                    "a summary on stderr.")
    run.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="trace.json|.pftrace",
                     help=f"where to write the trace (default {DEFAULT_OUTPUT}): .json, "
                          f".json.gz (Chrome trace JSON), .pftrace, .pftrace.gz (Perfetto's "
                          f"protobuf, smaller); {{rank}} and {{pid}} are replaced, and a rank "
                          f"of a distributed job (torchrun) writes NAME.rankN.EXT unless "
                          f"{{rank}} is given")
    _tracer_arguments(run)
    run.add_argument("--fork-traces", action="store_true",
                     help="each child the program forks (os.fork) that returns (sys.exit) "
                          "traces itself from the fork and writes OUTPUT's name with .PID "
                          "before the extension; without it a child writes nothing")
    run.add_argument("--follow-children", action="store_true",
                     help="trace the program's child processes too (os.fork, multiprocessing "
                          "with fork, spawn or forkserver: DataLoader workers, pools), each for "
                          "its whole life, written as OUTPUT's name with .PID before the "
                          "extension")
    run.add_argument("--flight-recorder", metavar="DIR",
                     help="trace the whole run with a flight recorder "
                          "(frametrace.flight_recorder): the program marks its steps with "
                          "frametrace.step(), and the last 3 steps are written to DIR when a "
                          "step is slow or hangs, on an exception, or on SIGUSR2; no -o trace")
    run.add_argument("--steps", type=_parse_steps, metavar="SPEC",
                     help="trace only some steps of the program, which marks them with "
                          "frametrace.step(): N (the first N steps) or a schedule, "
                          "wait=W,warmup=U,active=A[,repeat=R][,skip_first=S]; each cycle's "
                          "trace is written as OUTPUT's name with .CYCLE before the extension")
    run.add_argument("--python-steps", type=_non_negative, metavar="N",
                     help="with --steps: trace Python in only the first N active steps of "
                          "each cycle (the steps go on being timed)")
    run.add_argument("-m", dest="module", metavar="module",
                     help="run a module as a script, as python -m does")
    run.add_argument("script", nargs="?", help="the program (a .py file, a directory or a "
                                                "zip file with a __main__.py)")
    run.add_argument("args", nargs="*", help="the program's arguments")

    att = sub.add_parser(
        "attach", help="trace a running CPython 3.14+ process for a while",
        description="Trace a running CPython 3.14+ process without restarting it "
                    "(sys.remote_exec, PEP 768): the target starts a tracer on all its "
                    "threads, stops it after the duration or the steps, writes the trace, and "
                    "goes on running.  frametrace must be importable in the target.  With "
                    "--dump: ask the flight recorder running in it to dump now, and print the "
                    "dump's path.")
    att.add_argument("pid", type=int, help="the process to trace")
    what = att.add_mutually_exclusive_group()
    what.add_argument("--duration", type=_positive_float, metavar="SECONDS",
                      help="trace for this long (default 5)")
    what.add_argument("--steps", type=_positive, metavar="N",
                      help="trace until the N-th call of frametrace.step() (or of "
                           "--step-function) in the target")
    att.add_argument("--step-function", metavar="module:qualname",
                     help="count the calls of this function (in a module the target has "
                          "imported) as steps: tracing ends when the N-th call begun after "
                          "the attach returns (N: --steps, default 1)")
    att.add_argument("-o", "--output", metavar="trace.json",
                     help="where the target writes the trace (default frametrace-PID.json; "
                          ".json.gz: compressed; .pftrace: Perfetto's format)")
    _tracer_arguments(att)
    att.add_argument("--timeout", type=_positive_float, default=10.0, metavar="SECONDS",
                     help="give up when the target's main thread has not run Python code "
                          "within this long (default 10; with --dump, then send the "
                          "recorder's signal, and wait as long again for its dump)")
    att.add_argument("--dump", action="store_true",
                     help="ask the flight recorder running in the process to dump its last "
                          "steps now; prints the dump's path (the recorder's dump_dir and "
                          "format; no tracing of its own)")
    att.add_argument("--reason", metavar="TEXT",
                     help="with --dump: the reason the dump's metadata names (default attach)")
    att.add_argument("--no-signal", action="store_true",
                     help="with --dump: never send the recorder's signal (SIGUSR2 by default) "
                          "when sys.remote_exec cannot ask (CPython < 3.14, remote debugging "
                          "disabled, the main thread blocked in C)")

    summ = sub.add_parser("summary", help="print a per-function table of a trace",
                          description="Print a per-function table of a trace file "
                                      "(calls, total, self and mean time, share), and one "
                                      "of torch's ops when it has them (frametrace.torch).")
    summ.add_argument("trace", help="a trace frametrace wrote (.json or .json.gz)")
    summ.add_argument("--sort", choices=SORT_KEYS, default="self", help="order (default self)")
    summ.add_argument("--limit", type=_non_negative, default=30, metavar="N",
                      help="at most N functions (default 30; 0: all)")
    summ.add_argument("--per-thread", action="store_true", help="a table per thread")
    summ.add_argument("--group-by-input-shape", action="store_true",
                      help="torch's ops: a row per op and input shapes (record_shapes)")

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
    from . import view

    view.add_parser(sub)
    return parser, run


def _option_text(own: Sequence[str], option: str) -> str:
    """The text given to option (its last use), as typed."""
    text = ""
    for i, a in enumerate(own):
        if a == option and i + 1 < len(own):
            text = own[i + 1]
        elif a.startswith(option + "="):
            text = a[len(option) + 1:]
    return text


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line argv (default sys.argv[1:]); returns the exit
    status.  With no argv, this process is the command: ``run`` waits for
    the program's non-daemon threads as Python's exit would."""
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, run_parser = _parser()
    try:
        if argv and argv[0] == "run":
            own, script, module, args = _split_run(argv[1:])
            target = ["-m", module] if module is not None else ["--", script] if script else []
            ns = parser.parse_args(["run"] + own + target)
            ns.steps_text = _option_text(own, "--steps")
            ns.own_process = own_process
            if script is None and module is None:
                run_parser.error("give the program to run: a script or -m module")
            return _run(ns, script, module, args)
        ns = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if ns.command == "attach":
        return _attach(ns)
    if ns.command == "summary":
        return _summary(ns)
    if ns.command == "flamegraph":
        return _flamegraph(ns)
    if ns.command == "merge":
        return _merge(ns)
    if ns.command == "view":
        from . import view

        return view.main(ns)
    parser.error(f"unknown command {ns.command!r}")
    return 2
