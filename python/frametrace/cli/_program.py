"""run's program, run as ``python script.py`` or ``python -m module`` would
run it: checked and compiled before tracing starts, executed as
``__main__``, its non-daemon threads waited for as Python's exit does, and
its uncaught exception and exit status reported as Python would."""
from __future__ import annotations

import builtins
import os
import runpy
import sys
import threading
import traceback
import types
from typing import Any, Optional

from .._output import say


def exit_code(exc: SystemExit) -> int:
    """The exit status Python gives a SystemExit (printing its message, as
    Python does, when it is not an integer)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    say(str(code))
    return 1


def code_objects_on_stack() -> list[Any]:
    """The code objects of every frame now on the caller's stack: the
    command's own (and the interpreter's runpy), kept out of the trace."""
    codes = []
    frame: Any = sys._getframe(1)
    while frame is not None:
        codes.append(frame.f_code)
        frame = frame.f_back
    return codes


def runpy_functions() -> list[Any]:
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


def own_code() -> list[Any]:
    """The code of this module the program runs under (kept out of the
    trace)."""
    return [execute.__code__, wait_for_threads.__code__, _threads_left.__code__]


def _trimmed_traceback(tb: Any, skip: set) -> Any:
    """tb without its first frames of code in skip (this command, runpy):
    the traceback starts in the program, as Python's would."""
    while tb is not None and tb.tb_frame.f_code in skip:
        tb = tb.tb_next
    return tb


def check_program(script: Optional[str], module: Optional[str]) -> Optional[str]:
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


def is_zip(path: str) -> bool:
    import zipfile

    try:
        return os.path.isfile(path) and zipfile.is_zipfile(path)
    except OSError:
        return False


def compile_script(script: str) -> Any:
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


def main_module(code: Any, script: str) -> tuple[Any, Any]:
    """Module __main__ for a script's code, with the globals run_path gives
    it, and the code as a function of its globals."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=script, __cached__=None, __loader__=None, __package__="",
                         __spec__=None, __builtins__=builtins)
    return main, types.FunctionType(code, main.__dict__)


def execute(script: Optional[str], module: Optional[str],
            prepared: Optional[tuple[Any, Any]]) -> Optional[BaseException]:
    """Runs the program as __main__ (prepared: a script's module and code,
    from main_module); what it raised (SystemExit too), or None."""
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


def report_error(error: Optional[BaseException], skip: set) -> int:
    """The program's exit status; prints its uncaught exception as Python
    would."""
    status = 0
    if isinstance(error, SystemExit):
        status = exit_code(error)
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


# ---- the program's threads -------------------------------------------------------------------


def thread_shutdown(own_process: bool) -> Optional[tuple[int, Any]]:
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


def wait_for_threads(shutdown: Optional[tuple[int, Any]],
                     error: Optional[BaseException]) -> Optional[BaseException]:
    """Runs shutdown (see thread_shutdown), still tracing; Ctrl-C ends the
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
