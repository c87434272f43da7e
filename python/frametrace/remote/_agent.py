"""The target's side: runs in the traced process, called by the scripts
(``_begin`` for attach, ``_serve_dump`` for attach --dump).  It imports
nothing of the attacher's."""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, Optional

from ..tracer import Options
from . import _wire


def _serve_dump(sock: Any, config: dict) -> None:
    """Runs in the target's main thread, called by the dump script: asks
    each running flight recorder for a dump and returns at once.  Each
    recorder's writer thread takes its dump and reports it over sock
    (closed after the last).  Never raises into the target."""
    try:
        running = sys.modules.get("frametrace._running")
        recorders = running.flight_recorders() if running is not None else []
        _wire.send(sock, {"hello": {"pid": os.getpid(), "recorders": len(recorders),
                                    "frametrace": getattr(sys.modules.get("frametrace"),
                                                          "__version__", "?")}})
        if not recorders:
            sock.close()
            return
        import _thread

        lock = _thread.allocate_lock()
        left = [len(recorders)]

        def done(path: Optional[str], error: Optional[str]) -> None:
            with lock:
                # As seen from anywhere: dump_dir may be relative to this cwd.
                _wire.send(sock, {"dump": {"path": path and os.path.abspath(path),
                                           "error": error}})
                left[0] -= 1
                if not left[0]:
                    sock.close()

        for recorder in recorders:
            recorder.request_dump(config["reason"], done)
    except BaseException:  # noqa: B036 - none may reach the target
        sock.close()


def _begin(sock: Any, config: dict, hello: dict, script_codes: tuple) -> None:
    """Runs in the target's main thread, called by the script: the
    handshake, then the tracer started and the waiting thread launched.
    Never raises: the target must not see frametrace's failures."""
    try:
        hello["frametrace"] = getattr(sys.modules.get("frametrace"), "__version__", "?")
        from .._output import why_unwritable

        hello["unwritable"] = why_unwritable(config["output"])
        _wire.send(sock, {"hello": hello})
        if _wire.recv_line(sock) != b"go":
            sock.close()
            return
        agent = _Agent(sock, config, script_codes)
    except BaseException as exc:  # noqa: B036 - none may reach the target
        _wire.send(sock, {"error": f"could not set up tracing: {type(exc).__name__}: {exc}"})
        sock.close()
        return
    agent.start()


class _Agent:
    """The tracer in the target, and what ends it."""

    def __init__(self, sock: Any, config: dict, script_codes: tuple):
        import atexit
        import threading

        from .. import _tracer
        from ..tracer import Tracer

        self.sock = sock
        self.config = config
        self.pid = os.getpid()
        # Checked again: the script's text is the attacher's, not this process's.
        self.tracer = Tracer(options=Options.from_dict(config["options"]))
        self.now = _tracer._clock_ns  # a C function of the extension: never traced
        self.active_tracer = _tracer._active_tracer
        self.atexit = atexit
        self.lock = threading.Lock()  # held by the one that writes the trace
        self.finished = False
        self.reason: Optional[str] = None  # why tracing stopped: the first to stop it says
        self.start_error = ""
        self.started = False  # set by the main thread once the tracer runs
        self.wake_r, self.wake_w = os.pipe()
        self.thread_id = 0
        self.steps_seen = 0
        self.step_marks: list[tuple[int, int]] = []
        self.call_start = 0
        self.tool: Optional[int] = None
        for code in script_codes + (_begin, _Agent.start, _Agent._on_step_call,
                                    _Agent._on_call_start, _Agent._on_call_return,
                                    _Agent._wait, _Agent._at_exit, _Agent._stop):
            self.tracer._ignore(code)
        if config["steps"]:
            self._hook_steps()

    def _hook_steps(self) -> None:
        """Counts the steps with a sys.monitoring tool of its own on the one
        code object: no cost anywhere else, and it sees every reference to
        the function (however it was imported)."""
        mon: Any = sys.monitoring  # type: ignore[attr-defined]  # 3.12+; attach needs 3.14
        spec = self.config["step_function"]
        if spec is None:
            from .. import session

            code = session.step.__code__
            self.tracer._ignore(code)
            callbacks: dict[int, Callable[..., Any]] = {mon.events.PY_START: self._on_step_call}
        else:
            code = _resolve_code(spec)
            callbacks = {mon.events.PY_START: self._on_call_start,
                         mon.events.PY_RETURN: self._on_call_return}
        for tool in (4, 3, 5):
            if mon.get_tool(tool) is None:
                mon.use_tool_id(tool, "frametrace attach")
                self.tool = tool
                break
        else:
            raise RuntimeError("no free sys.monitoring tool id (3, 4 and 5 are taken) to "
                               "count steps with")
        events = 0
        for event, callback in callbacks.items():
            mon.register_callback(self.tool, event, callback)
            events |= event
        mon.set_local_events(self.tool, code, events)

    def _unhook_steps(self) -> None:
        if self.tool is not None:
            mon: Any = sys.monitoring  # type: ignore[attr-defined]  # clear_tool_id: 3.14+
            mon.clear_tool_id(self.tool)
            mon.free_tool_id(self.tool)
            self.tool = None

    # -- in the target's main thread -------------------------------------------------------

    def _refuse(self, why: str) -> None:
        """Ends the attach before any thread of its runs."""
        self.start_error = why
        self._finish()
        fds, self.wake_r, self.wake_w = (self.wake_r, self.wake_w), -1, -1
        for fd in fds:
            os.close(fd)

    def start(self) -> None:
        import _thread

        self.begin_ns = self.now()
        active = self.active_tracer()
        if active is not None:
            # Refused before the thread below starts: the target's own
            # tracer would see a thread it does not record.
            self._refuse("could not start tracing: another frametrace Tracer is already "
                         f"{'armed' if active.armed else 'active'} in this interpreter")
            return
        try:
            # Launched before the tracer starts: its own start is not
            # traced, and it is no threading.Thread, so that no frame of
            # threading's is on its stack at the start.  Waited for: a
            # thread not yet running when the tracer starts would be
            # recorded under thread id 0.
            self.running = _thread.allocate_lock()
            self.running.acquire()
            self.thread_id = _thread.start_new_thread(self._wait, ())
            self.running.acquire()
        except BaseException as exc:  # noqa: B036
            self._refuse(f"could not start a thread: {exc}")
            return
        try:
            self.atexit.register(self._at_exit)
            self.tracer.start()
        except BaseException as exc:  # noqa: B036 - e.g. another tracer is active
            self.start_error = f"could not start tracing: {exc}"
            self._stop("error")
            return
        self.started = True  # no call: the tracer records this thread now

    # -- step counting (sys.monitoring callbacks, in the thread that steps) ---------------

    # What a callback raises would be raised in the target's code: none may.

    def _on_step_call(self, code: Any, offset: int) -> Any:
        try:
            if self.tracer.active:
                now = self.now()
                self.steps_seen += 1
                self.step_marks.append((self.step_marks[-1][1] if self.step_marks
                                        else self.tracer.start_ns or 0, now))
                if self.steps_seen >= self.config["steps"]:
                    self._stop("steps")
        except Exception:  # noqa: BLE001
            pass

    def _on_call_start(self, code: Any, offset: int) -> Any:
        try:
            if self.tracer.active and not self.call_start:
                self.call_start = self.now()
        except Exception:  # noqa: BLE001
            pass

    def _on_call_return(self, code: Any, offset: int, value: Any) -> Any:
        try:
            if self.tracer.active and self.call_start:
                self.steps_seen += 1
                self.step_marks.append((self.call_start, self.now()))
                self.call_start = 0
                if self.steps_seen >= self.config["steps"]:
                    self._stop("steps")
        except Exception:  # noqa: BLE001
            pass

    def _stop(self, reason: str) -> None:
        """Stops tracing here, in the thread that decided (first thing: the
        rest is not traced), and wakes the waiting thread to write the
        trace."""
        self.tracer.stop()
        if self.reason is None:
            self.reason = reason
        fd = self.wake_w  # -1 once closed: its number may be another file's by then
        if fd >= 0:
            try:
                os.write(fd, b"w")
            except OSError:
                pass

    # -- frametrace's thread -----------------------------------------------------------

    def _wait(self) -> None:
        import select

        self.running.release()
        duration = self.config["duration"]
        timeout = None
        if duration is not None:
            # No call the tracer would see: it may have started already.
            timeout = duration - (self.now() - self.begin_ns) / 1e9
            if timeout < 0:
                timeout = 0.0
        try:
            # The one call this thread makes while tracing.
            ready, _, _ = select.select([self.wake_r, self.sock], [], [], timeout)
            while not self.started and not self.start_error:
                # Woken before the main thread has started the tracer (the
                # attacher stopped at once): stopping now would leave it to
                # start afterwards.  Rare, short; the same call as above.
                select.select([], [], [], 0.001)
            if not self.start_error:
                self._stop("stopped" if self.sock in ready and self.wake_r not in ready
                           else "duration")
            self._finish()
        except BaseException:  # noqa: B036 - nothing reaches the target
            pass
        finally:
            fds, self.wake_r, self.wake_w = (self.wake_r, self.wake_w), -1, -1
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _at_exit(self) -> None:
        """The target exits: the trace ends here, and is written before the
        interpreter goes on with its shutdown."""
        if os.getpid() != self.pid:
            return  # a forked child: the trace is its parent's
        self._stop("exit")
        self._finish()

    def _finish(self) -> None:
        """Writes the trace once (by whichever thread comes first; the other
        waits for it) and reports to the attacher."""
        with self.lock:
            if self.finished or os.getpid() != self.pid:
                return
            self.finished = True
            self.tracer.stop()
            try:
                self._unhook_steps()
            except Exception:  # noqa: BLE001
                pass
            if self.reason != "exit":
                try:
                    self.atexit.unregister(self._at_exit)
                except Exception:  # noqa: BLE001
                    pass
            if self.start_error:
                message: dict = {"error": self.start_error}
            else:
                message = self._write()
            _wire.send(self.sock, message)
            try:
                self.sock.close()
            except OSError:
                pass
            if self.started:
                self.tracer.clear()

    def _write(self) -> dict:
        from .. import export
        from .._tracer import ThreadInfo
        from .._trace import StepRecord, as_trace

        tracer = self.tracer
        path = self.config["output"]
        argv = getattr(sys, "orig_argv", sys.argv)
        trace = as_trace(tracer)
        trace.steps = [StepRecord(f"step#{i}", i, start, end)
                       for i, (start, end) in enumerate(self.step_marks)]
        trace.process_name = " ".join(["python"] + [os.path.basename(a) for a in sys.argv[:1]])
        # The agent's own thread, by its serial: its ident may be an earlier thread's.
        agent = max((t.serial for t in tracer.threads if t.thread_id == self.thread_id), default=0)
        trace.threads = [ThreadInfo((t.serial, t.thread_id, t.native_thread_id, "frametrace attach",
                                     t.dropped)) if t.serial == agent else t
                         for t in tracer.threads]
        trace.extra_metadata = {
            "command": argv, "cwd": os.getcwd(), "python": "%d.%d.%d" % sys.version_info[:3],
            "attach": {"duration": self.config["duration"], "steps": self.config["steps"],
                       "step_function": self.config["step_function"],
                       "reason": self.reason, "agent_thread_id": self.thread_id,
                       "options": tracer.options.as_dict()}}
        try:
            count = export.write_trace(trace, path)
        except Exception as exc:  # noqa: BLE001
            from .._output import reason

            return {"error": f"could not write the trace to {path}: {reason(exc)}"}
        threads = sum(1 for tid, _ in tracer._threads if tid != self.thread_id)
        return {"done": {"path": path, "events": count, "threads": threads,
                         "dropped": tracer.stats.dropped,
                         "dropped_records": tracer.stats.dropped_records,
                         "start_ns": tracer.start_ns,
                         "stop_ns": tracer.stop_ns, "reason": self.reason,
                         "steps": self.steps_seen}}


def _resolve_code(spec: str) -> Any:
    """The code object of "module:qualname", in a module already imported."""
    import inspect

    module_name, _, qualname = spec.partition(":")
    module = sys.modules.get(module_name)
    if module is None:
        raise ValueError(f"--step-function {spec}: module {module_name!r} is not imported in "
                         f"the target")
    obj: Any = module
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"--step-function {spec}: {module_name} has no "
                             f"{qualname!r}") from None
    obj = inspect.unwrap(getattr(obj, "__func__", obj))
    code = getattr(obj, "__code__", None)
    if code is None:
        raise ValueError(f"--step-function {spec}: not a Python function "
                         f"({type(obj).__name__})")
    return code
