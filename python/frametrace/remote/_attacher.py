"""The attaching side: ``attach()``, its checks of the target, the
hand-over of the script and the conversation with the target."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from typing import Any, Callable, NamedTuple, Optional

from .._tracer import Stats
from ..tracer import Options
from . import _handover, _scripts, _target, _wire
from ._errors import AttachError, Unreachable

# What sys.remote_exec needs on both sides.
MIN_TARGET = (3, 14)
DEFAULT_DURATION = 5.0
DEFAULT_TIMEOUT = 10.0
# After the deadline the attacher waits this much longer for a script that
# passed its deadline check just before it, then gives up.
_GRACE = 1.0
# How long the target's main thread waits for the attacher's "go".
HANDSHAKE_TIMEOUT = 5.0
_PROBE_TIMEOUT = 30.0


_DONE_COUNTS = ("events", "threads", "dropped", "dropped_records", "start_ns", "stop_ns", "steps")
_REASONS = ("duration", "steps", "stopped", "exit")


def checked_done(done: Any) -> Optional[dict]:
    """The target's account of what it wrote, if it makes sense (None if
    not): the target runs as its own user, who can make it say anything."""
    if not (isinstance(done, dict) and done.get("reason") in _REASONS
            and all(type(done.get(k)) is int and 0 <= done[k] < 1 << 63 for k in _DONE_COUNTS)
            and done["start_ns"] <= done["stop_ns"]):
        return None
    return done


class AttachResult(NamedTuple):
    """What an attach wrote.  reason: why tracing stopped, "duration",
    "steps", "stopped" (the attacher asked) or "exit" (the target exited:
    the trace ends there)."""

    pid: int
    path: str
    events: int  # Python/C events written
    threads: int
    stats: Stats  # what the target's tracer lost (frametrace.Stats)
    start_ns: int
    stop_ns: int
    reason: str
    steps: int  # steps seen (with steps=N)
    python: str  # the target's CPython version

    @property
    def target_exited(self) -> bool:
        return self.reason == "exit"


def attach(
    pid: int,
    duration: Optional[float] = None,
    output: Optional[str] = None,
    *,
    steps: Optional[int] = None,
    step_function: Optional[str] = None,
    timeout: float = DEFAULT_TIMEOUT,
    options: Optional[Options] = None,
    **tracer_options: Any,
) -> AttachResult:
    """Traces the running CPython 3.14+ process pid for ``duration`` seconds
    (default 5) or until its N-th ``frametrace.step()`` (``steps=N``) or the
    end of the N-th call of ``step_function`` ("module:qualname", the module
    already imported there), writing the trace to ``output`` (default
    ``frametrace-PID.json`` in the current directory; ``.json.gz``
    compressed; ``.pftrace`` Perfetto's protobuf) from inside the target.
    With ``steps``, it waits as long as the steps take: steps that never
    come end only with the target, or with KeyboardInterrupt in the
    caller (the target then writes what was recorded).  buffer_size,
    c_calls, backend, max_memory, ignore, include: the target's tracer's
    options (``frametrace.Options``), one by one or as ``options=``; the
    target checks them again as it makes its tracer.

    Raises ValueError for bad arguments and AttachError, naming the cause,
    when the target cannot be traced (no such process, not CPython, older
    than 3.14, remote debugging disabled, no permission, frametrace not
    importable there, a tracer already running there, another attach
    tracing it, an output its user cannot write: the target writes the
    trace, as itself) or when its main thread has not run Python code
    within ``timeout`` seconds.  As root, nothing of a target of another
    user runs with root's privileges (docs/guarantees.md, "Other users").  A target
    that exits before the end writes what was recorded: the result's
    ``target_exited`` is then true."""
    session = Attach(pid, duration=duration, output=output, steps=steps,
                     step_function=step_function, timeout=timeout,
                     options=Options.given("attach", options, tracer_options))
    return session.run()


def check_number(name: str, value: Any, integer: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise TypeError(f"{name} must be {'an int' if integer else 'a number'}, "
                        f"not {type(value).__name__}")
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")


class Attach:
    """One attach: checks, the script, the conversation with the target."""

    def __init__(self, pid: int, *, duration: Optional[float], output: Optional[str],
                 steps: Optional[int], step_function: Optional[str], options: Options,
                 timeout: float, report: Optional[Callable[[str], None]] = None):
        if isinstance(pid, bool) or not isinstance(pid, int):
            raise TypeError(f"pid must be an int, not {type(pid).__name__}")
        if pid <= 0:
            raise ValueError(f"pid must be positive, got {pid}")
        if pid == os.getpid():
            raise ValueError("cannot attach to this process itself: use frametrace.trace()")
        if duration is not None and (steps is not None or step_function is not None):
            raise ValueError("give a duration or steps, not both")
        if duration is not None:
            check_number("duration", duration)
        if step_function is not None:
            if not isinstance(step_function, str):
                raise TypeError(f"step_function must be a str, not {type(step_function).__name__}")
            module, sep, qualname = step_function.partition(":")
            if not sep or not module or not qualname:
                raise ValueError(f"step_function must be 'module:qualname', got {step_function!r}")
            if steps is None:
                steps = 1
        if steps is not None:
            check_number("steps", steps, integer=True)
        elif duration is None:
            duration = DEFAULT_DURATION
        check_number("timeout", timeout)
        if output is None:
            output = f"frametrace-{pid}.json"
        output = os.path.abspath(os.fspath(output))
        if not os.path.isdir(os.path.dirname(output)):
            raise ValueError(f"no directory {os.path.dirname(output)!r} for the trace {output!r}")
        self.pid = pid
        self.config: dict[str, Any] = {
            "output": output, "duration": duration, "steps": steps,
            "step_function": step_function, "options": options.as_dict(),
        }
        self.timeout = float(timeout)
        self.report = report or (lambda message: None)
        self.sock: Optional[socket.socket] = None
        self.going = False  # the target was told to trace
        self.stop_requested = False
        self.exclusive = True  # one attach at a time traces a process

    # -- checks --------------------------------------------------------------------------

    def _fail(self, message: str, kind: type = AttachError) -> AttachError:
        return kind(f"process {self.pid}: {message}")

    def inspect(self) -> tuple[str, tuple[int, int, int], int]:
        """The interpreter that can remote_exec into the target, the
        target's CPython version, and its uid; AttachError for a target
        that cannot be traced.  Nothing of the target's runs here: its
        version is read from its files (see _target.cpython_version)."""
        pid = self.pid
        if not os.path.isdir("/proc/self"):
            raise AttachError("frametrace attach needs Linux (/proc)")
        proc = f"/proc/{pid}"
        try:
            status = _target.read_text(f"{proc}/status")
        except FileNotFoundError:
            raise AttachError(f"no process with PID {pid}") from None
        except OSError as exc:
            raise self._fail(f"cannot read {proc}/status: {exc.strerror}") from None
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        state = fields.get("State", "").strip()
        if state.startswith(("Z", "X")):
            raise self._fail("it has exited (a zombie)")
        try:
            # Effective ids (real, effective, saved, filesystem): the ones
            # its files are written with.
            uid = int(fields["Uid"].split()[1])
            gid = int(fields["Gid"].split()[1])
            groups = [int(g) for g in fields.get("Groups", "").split()]
        except (KeyError, IndexError, ValueError):
            raise self._fail(f"cannot read its user from {proc}/status") from None
        # Programs of the target's (its interpreter, the hand-over) run with
        # its user, groups and environment, never with more privileges than
        # it has itself, nor with the caller's environment (its secrets).
        self.as_target: dict[str, Any] = {} if uid == os.geteuid() else {
            "user": uid, "group": gid, "extra_groups": groups, "cwd": "/",
            "env": _target.environment(pid)}
        self.uid = uid
        try:
            exe = os.readlink(f"{proc}/exe")
        except PermissionError:
            raise self._fail(f"no permission to inspect it (it belongs to uid {uid}): "
                             f"run frametrace attach as that user or as root") from None
        except FileNotFoundError:
            raise self._fail("not a Python process (it has no program file: a kernel "
                             "thread?)") from None
        exe_name = os.path.basename(exe.removesuffix(" (deleted)"))
        try:
            same_root = os.stat(f"{proc}/root/") == os.stat("/")
        except OSError:
            same_root = True  # remote_exec reports what is wrong
        if not same_root:
            raise self._fail("it runs in another root filesystem (a container or a chroot): "
                             "run frametrace attach inside it")
        version, embedded = _target.cpython_version(pid)
        if version is None:
            raise self._fail(f"not a Python process (its program is {exe})")
        if version[:2] < MIN_TARGET:
            shown = ".".join(map(str, version if version[2] >= 0 else version[:2]))
            raise self._fail(f"it runs CPython {shown}: attach needs CPython 3.14 or later "
                             f"(sys.remote_exec, PEP 768)", Unreachable)
        if re.fullmatch(r"python[0-9.]*[a-z]*", exe_name) or not embedded:
            runner = f"{proc}/exe"
        else:
            # An application embedding CPython: any CPython of that version
            # can hand the script over.
            found = _target.interpreter_for(version[1])
            if found is None:
                raise self._fail(f"{exe} embeds CPython 3.{version[1]}: run frametrace attach "
                                 f"with a python3.{version[1]} (none found on PATH)")
            runner = found
        # Yama (1: only to descendants, 2: only with CAP_SYS_PTRACE) lets no
        # process of another user's attach to it: root then hands the
        # script over through its own sys.remote_exec (same major.minor).
        scope = _target.ptrace_scope()
        self.here = bool(self.as_target) and os.geteuid() == 0 and scope != "0"
        if self.here and (sys.version_info[:2] != version[:2] or not
                          hasattr(sys, "remote_exec")):
            raise self._fail(
                f"kernel.yama.ptrace_scope is {scope}: no process of its user (uid "
                f"{uid}) may attach to it, and frametrace attach never runs that user's "
                f"interpreter as root: run it with a CPython 3.{version[1]} "
                f"(python3.{version[1]} -m frametrace attach {pid}), whose own "
                f"sys.remote_exec then hands the script over", Unreachable)
        disabled = _target.remote_debug_disabled(pid)
        if disabled:
            raise self._fail(f"remote debugging is disabled in it ({disabled}): it cannot be "
                             f"attached to", Unreachable)
        if os.geteuid() != 0 and uid != os.geteuid():
            raise self._fail(f"no permission to attach: it belongs to uid {uid}, this is uid "
                             f"{os.geteuid()}: run frametrace attach as that user or as root")
        self.version = version
        return runner, version, uid

    # -- the run -------------------------------------------------------------------------

    def run(self) -> Any:
        runner, version, uid = self.inspect()
        self.python = ".".join(map(str, version))
        claims = []
        attachers = frozenset({0, uid, os.geteuid()})  # who may attach to it
        try:
            if self.exclusive:
                claim = _handover.claim(f"frametrace-attach-{self.pid}", attachers)
                if claim is None:
                    raise AttachError(f"another attach is tracing PID {self.pid} (one at a "
                                      f"time): attach again once it has ended; the target is "
                                      f"untouched")
                claims.append(claim)
            # One script at a time: a second sys.remote_exec before the
            # target runs the first would replace it.
            claim = _handover.claim(f"frametrace-handover-{self.pid}", attachers, self.timeout)
            if claim is None:
                raise self._fail(f"another frametrace attach has been handing it a script for "
                                 f"{self.timeout:g} s: try again later; the target is untouched")
            claims.append(claim)
            return self._hand_over(runner, uid, claim)
        finally:
            for claim in claims:
                claim.close()

    def _hand_over(self, runner: str, uid: int, claim: socket.socket) -> Any:
        """Writes the script, has the target run it, and talks to it; claim
        (another's hand-over waits for it) is let go once the script runs."""
        work = _handover.Workdir()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock_path = os.path.join(work.path, "s")
            script_path = os.path.join(work.path, "attach.py")
            listener.bind(sock_path)
            listener.listen(1)
            deadline = time.time() + self.timeout
            config = dict(self.config, socket=sock_path, script=script_path, workdir=work.path,
                          deadline=deadline, handshake_timeout=HANDSHAKE_TIMEOUT)
            work.write("attach.py", self._script_text(config))
            if self.as_target:
                # The target reads the script and connects to the socket as
                # itself, and a late script removes the folder: its own.
                work.give(("attach.py", "s"), uid)
            self._remote_exec(runner, script_path)
            # From here on the target may read the script at any time: if it
            # has not by the deadline, the directory stays for it (the late
            # script removes it), so that CPython finds its file.
            listener.settimeout(max(0.0, deadline - time.time()) + _GRACE)
            try:
                self.sock, _ = listener.accept()
            except socket.timeout:
                work.leave("s")
                return self._blocked()
            # The script has run: nothing in the folder is needed any more.
            listener.close()
            work.remove()
            claim.close()
            return self._converse()
        finally:
            listener.close()
            work.remove()
            if self.sock is not None:
                self.sock.close()

    def _script_text(self, config: dict) -> str:
        return _scripts.attach_script(self.pid, config)

    def _blocked(self) -> Any:
        """The target's main thread did not run the script in time."""
        raise self._fail(
            f"its main thread has not run Python code within {self.timeout:g} s: it is "
            f"blocked in a C call or a sleep (sys.remote_exec runs the script when the "
            f"main thread next runs Python bytecode).  The script does nothing if it "
            f"starts later; the target is untouched", Unreachable)

    def _remote_exec(self, runner: str, script_path: str) -> None:
        code = ("import json, sys\n"
                "try:\n"
                "    sys.remote_exec(int(sys.argv[1]), sys.argv[2])\n"
                "except BaseException as exc:\n"
                "    print(json.dumps([type(exc).__name__, str(exc)]))\n"
                "else:\n"
                "    print(json.dumps(None))\n")
        if self.here:
            try:
                sys.remote_exec(self.pid, script_path)  # type: ignore[attr-defined]  # 3.14+
            except Exception as exc:  # noqa: BLE001 - each is reported below
                self._refused(type(exc).__name__, str(exc), "")
            return
        as_user = f" as uid {self.uid}" if self.as_target else ""
        try:
            proc = subprocess.Popen([runner, "-I", "-S", "-c", code, str(self.pid), script_path],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, **self.as_target)
        except (OSError, subprocess.SubprocessError) as exc:
            raise self._fail(f"could not run its interpreter {runner}{as_user} to hand the "
                             f"script over: {exc}") from None
        assert proc.stdout is not None
        try:
            # Read once it has ended, at most what a pipe holds (64 KiB; an
            # answer is a line): its user may change what it writes.
            proc.wait(timeout=_PROBE_TIMEOUT)
            os.set_blocking(proc.stdout.fileno(), False)
            try:
                output = os.read(proc.stdout.fileno(), 1 << 16).decode(errors="replace").strip()
            except BlockingIOError:
                output = ""
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise self._fail(f"{runner} did not hand the script over within "
                             f"{_PROBE_TIMEOUT:g} s") from None
        finally:
            proc.stdout.close()
        try:
            answer = json.loads(output.splitlines()[-1])
        except (ValueError, IndexError):
            raise self._fail(f"{runner} could not hand the script over: "
                             f"{output[-500:] or 'no answer'}") from None
        if answer is None:
            return
        if not (isinstance(answer, list) and len(answer) == 2
                and all(isinstance(part, str) for part in answer)):
            # The process runs as the target's user, who can change it.
            raise self._fail(f"{runner} could not hand the script over: an answer that "
                             f"makes no sense ({output[-200:]!r})")
        self._refused(answer[0], answer[1], as_user)

    def _refused(self, kind: str, message: str, as_user: str) -> None:
        """Raises the AttachError of sys.remote_exec's exception."""
        if kind == "PermissionError":
            hint = ""
            scope = _target.ptrace_scope()
            if os.geteuid() != 0 and scope != "0":
                hint = (f" (kernel.yama.ptrace_scope is {scope}: only root, or a process with "
                        f"CAP_SYS_PTRACE, may attach)")
            raise self._fail(f"no permission to attach{as_user}: {message}{hint}; run as root "
                             f"or as its user")
        if kind == "ProcessLookupError" or "No such process" in message:
            raise self._fail("it exited before the script could be handed over")
        if "not enabled" in message:
            raise self._fail(f"remote debugging is disabled in it ({message}): it cannot be "
                             f"attached to", Unreachable)
        raise self._fail(f"sys.remote_exec failed: {kind}: {message}")

    def _converse(self) -> Any:  # AttachResult here, DumpResult in _dump.Dump
        assert self.sock is not None
        reader = _wire.Lines(self.sock)
        # The script imports frametrace before it speaks: as long as the
        # caller allows for the target, since a busy or instrumented target
        # may take seconds.
        waited = max(self.timeout, HANDSHAKE_TIMEOUT)
        self.sock.settimeout(waited)
        try:
            hello = reader.next()
        except (OSError, ValueError) as exc:
            raise self._fail(f"the script started but said nothing within {waited:g} s "
                             f"({exc})") from None
        if hello is None:
            raise self._fail("the script started but said nothing")
        info = hello.get("hello", {})
        if info.get("error") == "import" and "right now" in str(info.get("message")):
            raise self._fail(f"{info.get('message')}; the target is untouched")
        if info.get("error") == "import":
            raise self._fail(
                f"frametrace is not importable there ({info.get('message')}): install it in the "
                f"target's environment ({info.get('executable')} -m pip install frametrace; its "
                f"sys.prefix is {info.get('prefix')}), then attach again; the target is "
                f"untouched")
        if info.get("unwritable"):
            raise self._fail(f"it writes the trace as its user, uid {self.uid}, and "
                             f"{self.config['output']} {info['unwritable']}: give -o a path "
                             f"that uid {self.uid} can write; the target is untouched")
        self.sock.sendall(b"go\n")
        self.going = True
        what = (f"{self.config['steps']} call{'s' if self.config['steps'] != 1 else ''} of "
                f"{self.config['step_function'] or 'frametrace.step()'}"
                if self.config["steps"] else f"{self.config['duration']:g} s")
        self.report(f"attached to process {self.pid} (CPython {info.get('python')}, frametrace "
                    f"{info.get('frametrace')}): tracing for {what}")
        self.sock.settimeout(None)
        while True:
            try:
                message = reader.next()
            except KeyboardInterrupt:
                if self.stop_requested:
                    raise
                self.report("stopping: the target writes what was recorded")
                self.request_stop()
                continue
            except (OSError, ValueError):
                message = None
            if message is None:
                raise self._fail("it exited (or was killed) before the trace was written, without "
                                 "Python's normal shutdown (os._exit or a signal): nothing "
                                 "recorded could be kept")
            if "error" in message:
                raise self._fail(message["error"])
            if "done" in message:
                d = checked_done(message["done"])
                if d is None:
                    raise self._fail(f"it said it wrote the trace, in words that make no sense "
                                     f"({str(message['done'])[:200]!r}); "
                                     f"{self.config['output']} is not to be trusted")
                # Its own output, not a path the target names.
                return AttachResult(pid=self.pid, path=self.config["output"],
                                    events=d["events"], threads=d["threads"],
                                    stats=Stats((d["dropped"], d["dropped_records"])),
                                    start_ns=d["start_ns"], stop_ns=d["stop_ns"],
                                    reason=d["reason"], steps=d["steps"],
                                    python=str(info.get("python")))

    def request_stop(self) -> None:
        """Asks the target to stop tracing now and write what it has."""
        if self.sock is not None and not self.stop_requested:
            self.stop_requested = True
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
