"""Tracing a running process from outside: ``frametrace.attach(pid)`` and
``frametrace attach PID`` (CPython 3.14+, PEP 768 ``sys.remote_exec``).

    result = frametrace.attach(pid, duration=2.0, output="trace.json")

The attaching side runs on any supported CPython.  It checks the target
(a Linux process running CPython 3.14 or later that allows remote
debugging), writes a small script into a private directory, and has the
target's own interpreter binary (``/proc/PID/exe``: ``sys.remote_exec``
works only between equal major.minor versions) hand it over.  One attach
traces a process at a time, and one script is handed to it at a time
(claims in the abstract socket namespace: a second ``sys.remote_exec``
before the target ran the first would replace it).  The target's
main thread runs the script at its next bytecode boundary.  The script
imports frametrace (in the target's environment), says hello over a Unix
socket in that directory, and, once told to go, starts a tracer on all the
target's threads and returns: the main thread goes on with its own code at
once.  A thread of frametrace's ("frametrace attach") then waits for the
end: the duration, the N-th step, the attacher asking to stop or going
away (its socket closes), or the target exiting (an ``atexit`` hook).  The
thread that decides stops the tracer there (the latched stop: frames
running then end exactly at it, flagged open_at_stop; those running at
the start are open_at_start), the trace is written by the target (the C
writers release the GIL), and the result goes back over the socket.

What the target sees of it: frametrace imported, one extra thread while
attached, an ``atexit`` hook and (for steps) a ``sys.monitoring`` tool id,
both removed when done.  It prints nothing and raises nothing into the
target's code.  The trace holds the target's frames only: the script's and
frametrace's own functions are ignored by the tracer; frametrace's thread
waits in one C call (``select.select``) begun before the start, so it
records nothing, or that call at most.

Other users.  The target's files are its user's: as root, attach runs
nothing of them with root's privileges.  The target's version is read
from its interpreter's ELF file (or the libpython it maps), never by
running it; the hand-over runs the target's interpreter with the target's
uid, gid and groups and an empty environment (it can do nothing the target
cannot); the private directory is given to that user only once the script
and socket are in it, and everything root does there afterwards goes
through the descriptor opened when it was made (no path the user could
redirect); the target checks that it can write the output (it writes the
trace, as itself) before the tracer starts; what the target advertises
for ``attach --dump`` is read with bounds and checked before use.

A limit of ``sys.remote_exec``: a signal handler that raises just as the
script starts (Ctrl-C at that instant) raises into the script, and CPython
reports that as the script's error instead of raising it in the target's
code.

``dump(pid)`` (``frametrace attach PID --dump``) asks the flight recorders
running in the target to dump: its script (no import; it hands the request
over through ``_serve_dump``) returns at once, each recorder's writer
thread takes its dump and reports it over the socket.  When the script
cannot run, the recorder's advertised signal is sent instead (see
``dump``).

Steps: with ``steps=N`` the tracer stops at the N-th call of
``frametrace.step()`` (in any thread) after the attach, so the trace holds
the rest of the step under way and N-1 whole steps; with
``step_function="module:qualname"`` it stops when the N-th call of that
function begun after the attach returns (N whole calls).  Each is a step on
the trace's steps track.
"""
from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterable, NamedTuple, Optional

from .tracer import Options

__all__ = ["AttachError", "AttachResult", "DumpResult", "attach", "dump"]

# What sys.remote_exec needs on both sides.
MIN_TARGET = (3, 14)
DEFAULT_DURATION = 5.0
DEFAULT_TIMEOUT = 10.0
# After the deadline the attacher waits this much longer for a script that
# passed its deadline check just before it, then gives up.
_GRACE = 1.0
# How long the target's main thread waits for the attacher's "go".
_HANDSHAKE_TIMEOUT = 5.0
_PROBE_TIMEOUT = 30.0
# The least time attach --dump waits for the dump a signal asked for.
_SIGNAL_WAIT = 10.0


class AttachError(RuntimeError):
    """Attaching failed, or the target ended before the trace was written.
    Unless the message says otherwise, the target was left untouched."""


class _Unreachable(AttachError):
    """sys.remote_exec cannot reach the target's Python code: too old,
    remote debugging disabled, or its main thread not back in Python in
    time (``dump`` may send the flight recorder's signal instead)."""


class AttachResult(NamedTuple):
    """What an attach wrote.  reason: why tracing stopped, "duration",
    "steps", "stopped" (the attacher asked) or "exit" (the target exited:
    the trace ends there)."""

    pid: int
    path: str
    events: int  # Python/C events written
    threads: int
    dropped: int
    start_ns: int
    stop_ns: int
    reason: str
    steps: int  # steps seen (with steps=N)
    python: str  # the target's CPython version

    @property
    def target_exited(self) -> bool:
        return self.reason == "exit"


# ---- the attaching side ---------------------------------------------------------------


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
    user runs with root's privileges (see the module's doc).  A target
    that exits before the end writes what was recorded: the result's
    ``target_exited`` is then true."""
    session = _Attach(pid, duration=duration, output=output, steps=steps,
                      step_function=step_function, timeout=timeout,
                      options=Options.given("attach", options, tracer_options))
    return session.run()


def _check_number(name: str, value: Any, integer: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise TypeError(f"{name} must be {'an int' if integer else 'a number'}, "
                        f"not {type(value).__name__}")
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")


class _Attach:
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
            _check_number("duration", duration)
        if step_function is not None:
            if not isinstance(step_function, str):
                raise TypeError(f"step_function must be a str, not {type(step_function).__name__}")
            module, sep, qualname = step_function.partition(":")
            if not sep or not module or not qualname:
                raise ValueError(f"step_function must be 'module:qualname', got {step_function!r}")
            if steps is None:
                steps = 1
        if steps is not None:
            _check_number("steps", steps, integer=True)
        elif duration is None:
            duration = DEFAULT_DURATION
        _check_number("timeout", timeout)
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
        version is read from its files (see _cpython_version)."""
        pid = self.pid
        if not os.path.isdir("/proc/self"):
            raise AttachError("frametrace attach needs Linux (/proc)")
        proc = f"/proc/{pid}"
        try:
            status = _read_text(f"{proc}/status")
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
            "env": _environment(pid)}
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
        version, embedded = _cpython_version(pid)
        if version is None:
            raise self._fail(f"not a Python process (its program is {exe})")
        if version[:2] < MIN_TARGET:
            shown = ".".join(map(str, version if version[2] >= 0 else version[:2]))
            raise self._fail(f"it runs CPython {shown}: attach needs CPython 3.14 or later "
                             f"(sys.remote_exec, PEP 768)", _Unreachable)
        if re.fullmatch(r"python[0-9.]*[a-z]*", exe_name) or not embedded:
            runner = f"{proc}/exe"
        else:
            # An application embedding CPython: any CPython of that version
            # can hand the script over.
            found = _interpreter_for(version[1])
            if found is None:
                raise self._fail(f"{exe} embeds CPython 3.{version[1]}: run frametrace attach "
                                 f"with a python3.{version[1]} (none found on PATH)")
            runner = found
        # Yama (1: only to descendants, 2: only with CAP_SYS_PTRACE) lets no
        # process of another user's attach to it: root then hands the
        # script over through its own sys.remote_exec (same major.minor).
        self.here = bool(self.as_target) and os.geteuid() == 0 and _ptrace_scope() != "0"
        if self.here and (sys.version_info[:2] != version[:2] or not
                          hasattr(sys, "remote_exec")):
            raise self._fail(
                f"kernel.yama.ptrace_scope is {_ptrace_scope()}: no process of its user (uid "
                f"{uid}) may attach to it, and frametrace attach never runs that user's "
                f"interpreter as root: run it with a CPython 3.{version[1]} "
                f"(python3.{version[1]} -m frametrace attach {pid}), whose own "
                f"sys.remote_exec then hands the script over", _Unreachable)
        disabled = _remote_debug_disabled(pid)
        if disabled:
            raise self._fail(f"remote debugging is disabled in it ({disabled}): it cannot be "
                             f"attached to", _Unreachable)
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
                claim = _claim(f"frametrace-attach-{self.pid}", attachers)
                if claim is None:
                    raise AttachError(f"another attach is tracing PID {self.pid} (one at a "
                                      f"time): attach again once it has ended; the target is "
                                      f"untouched")
                claims.append(claim)
            # One script at a time: a second sys.remote_exec before the
            # target runs the first would replace it.
            claim = _claim(f"frametrace-handover-{self.pid}", attachers, self.timeout)
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
        work = _Workdir()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock_path = os.path.join(work.path, "s")
            script_path = os.path.join(work.path, "attach.py")
            listener.bind(sock_path)
            listener.listen(1)
            deadline = time.time() + self.timeout
            config = dict(self.config, socket=sock_path, script=script_path, workdir=work.path,
                          deadline=deadline, handshake_timeout=_HANDSHAKE_TIMEOUT)
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
        return _script(self.pid, config)

    def _blocked(self) -> Any:
        """The target's main thread did not run the script in time."""
        raise self._fail(
            f"its main thread has not run Python code within {self.timeout:g} s: it is "
            f"blocked in a C call or a sleep (sys.remote_exec runs the script when the "
            f"main thread next runs Python bytecode).  The script does nothing if it "
            f"starts later; the target is untouched", _Unreachable)

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
            scope = _ptrace_scope()
            if os.geteuid() != 0 and scope != "0":
                hint = (f" (kernel.yama.ptrace_scope is {scope}: only root, or a process with "
                        f"CAP_SYS_PTRACE, may attach)")
            raise self._fail(f"no permission to attach{as_user}: {message}{hint}; run as root "
                             f"or as its user")
        if kind == "ProcessLookupError" or "No such process" in message:
            raise self._fail("it exited before the script could be handed over")
        if "not enabled" in message:
            raise self._fail(f"remote debugging is disabled in it ({message}): it cannot be "
                             f"attached to", _Unreachable)
        raise self._fail(f"sys.remote_exec failed: {kind}: {message}")

    def _converse(self) -> Any:  # AttachResult here, DumpResult in _Dump
        assert self.sock is not None
        reader = _Lines(self.sock)
        # The script imports frametrace before it speaks: as long as the
        # caller allows for the target, since a busy or instrumented target
        # may take seconds.
        waited = max(self.timeout, _HANDSHAKE_TIMEOUT)
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
                d = message["done"]
                # Its own output, not a path the target names.
                return AttachResult(pid=self.pid, path=self.config["output"],
                                    events=d["events"],
                                    threads=d["threads"], dropped=d["dropped"],
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


# ---- frametrace attach PID --dump ----------------------------------------------------


class DumpResult(NamedTuple):
    """What ``dump`` had written: the dump files (one per flight recorder
    running in the target), the reason their metadata names, and how the
    target was asked: "remote_exec", or the signal sent (e.g. "SIGUSR2")."""

    pid: int
    paths: list
    reason: str
    via: str


def dump(pid: int, reason: str = "attach", *, timeout: float = DEFAULT_TIMEOUT,
         use_signal: bool = True) -> DumpResult:
    """Asks the flight recorders (``frametrace.flight_recorder``) running in
    process pid to dump now, and waits until the dumps are written.

    On CPython 3.14+ the request goes through ``sys.remote_exec``: the
    target's main thread, at its next bytecode boundary, hands it to each
    recorder's writer thread and goes on; the dump's metadata names
    ``reason``.  When that cannot be done (the target older than 3.14, its
    remote debugging disabled, or its main thread not back in Python
    within ``timeout`` seconds, e.g. blocked in a C call: the moment a dump
    is most wanted) and the target's recorder advertises a signal (see
    ``frametrace.flight``), that signal is sent instead, unless
    ``use_signal`` is false: the recorder's C-level handler has its
    watchdog thread take the dump whatever the main thread does, with the
    reason "signal SIGUSR2", subject to its ``min_interval``; the dump file
    is waited for, ``timeout`` seconds again (at least 10, and while it is
    being written).  A process that does not
    catch the signal is never sent it (its default action could end it).

    Raises AttachError, naming the cause: no flight recorder running there,
    none taken (``max_dumps`` reached), a write that failed, and the
    attach errors (no such process, not CPython, no permission, ...)."""
    return _Dump(pid, reason=reason, timeout=timeout, use_signal=use_signal).run()


class _Dump(_Attach):
    """One ``attach --dump``: the checks and the hand-over of ``_Attach``,
    a script of its own, and the signal when the script cannot run."""

    def __init__(self, pid: int, *, reason: str, timeout: float, use_signal: bool,
                 report: Optional[Callable[[str], None]] = None):
        if isinstance(pid, bool) or not isinstance(pid, int):
            raise TypeError(f"pid must be an int, not {type(pid).__name__}")
        if pid <= 0:
            raise ValueError(f"pid must be positive, got {pid}")
        if pid == os.getpid():
            raise ValueError("cannot attach to this process itself: call recorder.dump()")
        if not isinstance(reason, str):
            raise TypeError(f"reason must be a str, not {type(reason).__name__}")
        if not reason.strip():
            raise ValueError("reason must not be empty")
        if not isinstance(use_signal, bool):
            raise TypeError(f"use_signal must be a bool, not {type(use_signal).__name__}")
        _check_number("timeout", timeout)
        self.pid = pid
        self.reason = reason
        self.use_signal = use_signal
        self.config: dict[str, Any] = {"reason": reason}
        self.timeout = float(timeout)
        self.report = report or (lambda message: None)
        self.sock = None
        self.going = False
        self.stop_requested = False
        self.exclusive = False  # a dump may be asked for while an attach traces

    def run(self) -> DumpResult:
        # Read first: the target's recorders and their signals.
        self.adverts = _advertised(self.pid)
        try:
            return super().run()  # type: ignore[no-any-return]
        except _Unreachable as exc:
            return self._by_signal(str(exc))

    def _script_text(self, config: dict) -> str:
        return _DUMP_SCRIPT.format(pid=self.pid, config=config)

    def _blocked(self) -> Any:
        raise self._fail(
            f"its main thread has not run Python code within {self.timeout:g} s: it is "
            f"blocked in a C call or a sleep (sys.remote_exec runs the request when the main "
            f"thread next runs Python bytecode; it does nothing if that is later)",
            _Unreachable)

    def _converse(self) -> DumpResult:
        assert self.sock is not None
        reader = _Lines(self.sock)
        waited = max(self.timeout, _HANDSHAKE_TIMEOUT)
        self.sock.settimeout(waited)
        try:
            hello = reader.next()
        except (OSError, ValueError) as exc:
            raise self._fail(f"the request started but said nothing within {waited:g} s "
                             f"({exc})") from None
        info = (hello or {}).get("hello")
        if info is None:
            raise self._fail("the request started but said nothing")
        count = info.get("recorders", 0)
        if info.get("importing"):
            raise self._fail("it is importing frametrace right now: no flight recorder runs "
                             "yet; ask again")
        if not count and info.get("frametrace") is not None and info.get("old"):
            raise self._fail(f"its frametrace {info['frametrace']} is older than attach --dump: "
                             f"send its flight recorder's signal (kill -USR2 {self.pid} by "
                             f"default) or call recorder.dump()")
        if not count:
            raise self._fail("no flight recorder is running in it (frametrace.flight_recorder, "
                             "or frametrace run --flight-recorder): nothing to dump")
        self.going = True
        self.sock.settimeout(None)  # as long as the writing takes
        paths: list = []
        problems: list = []
        for _ in range(count):
            message = reader.next()
            if message is None:
                raise self._fail("it exited (or closed the connection) before the dump was "
                                 "written" + (f"; written: {', '.join(paths)}" if paths else ""))
            done = message.get("dump", {})
            if done.get("error") is None:
                paths.append(done["path"])
            elif done.get("path") is None:
                problems.append(f"no dump taken: {done['error']}")
            else:
                problems.append(f"could not write the dump {done['path']}: {done['error']}")
        if problems:
            written = f" (written: {', '.join(paths)})" if paths else ""
            raise self._fail("; ".join(problems) + written)
        return DumpResult(self.pid, paths, self.reason, "remote_exec")

    # -- the signal, when sys.remote_exec cannot ask -------------------------------------

    def _by_signal(self, why: str) -> DumpResult:
        signals = {about["signal"]: about for about in self.adverts if about.get("signal")}
        if not self.adverts:
            raise AttachError(f"{why}; no flight recorder is advertised in it (frametrace's "
                              f"recorders name their signal in /proc/{self.pid}/fd) to send "
                              f"its signal instead")
        if not signals:
            raise AttachError(f"{why}; its flight recorder has no signal (signal=None) to "
                              f"send instead")
        names = " or ".join(about["signal_name"] for about in signals.values())
        if not self.use_signal:
            short = " ".join(f"kill -{about['signal_name'].removeprefix('SIG')} {self.pid}"
                             for about in signals.values())
            raise AttachError(f"{why}; its flight recorder dumps on {names} even now: {short} "
                              f"(or attach --dump without --no-signal)")
        paths: list = []
        for signum, about in signals.items():
            name = about["signal_name"]
            if not _catches(self.pid, signum):
                raise AttachError(f"{why}; its flight recorder names {name}, but the process "
                                  f"does not catch it now: not sent (its default action could "
                                  f"end the process)")
            pattern = os.path.join(glob.escape(about["dump_dir"]),
                                   f"frametrace-dump-{self.pid}-*-signal-*")
            before = set(glob.glob(pattern))
            self.report(f"{why}; sending {name}, its "
                        f"flight recorder's signal, instead")
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                raise self._fail("it exited before the signal was sent") from None
            except PermissionError:
                raise self._fail(f"no permission to send it {name}") from None
            paths += self._wait_for_dump(pattern, before, name, about)
        return DumpResult(self.pid, paths, f"signal {names}", names)

    def _wait_for_dump(self, pattern: str, before: set, name: str, about: dict) -> list:
        """The dump files the signal had written (new names; a temporary
        being written extends the wait)."""
        directory, base = os.path.split(pattern)
        writing = os.path.join(directory, f".{base}.tmp")
        deadline = time.monotonic() + max(self.timeout, _SIGNAL_WAIT)
        while True:
            new = sorted(set(glob.glob(pattern)) - before)
            if new:
                return new
            if time.monotonic() > deadline and not glob.glob(writing):
                break
            if not os.path.exists(f"/proc/{self.pid}"):
                raise self._fail(f"it exited after {name} was sent, before a dump was written")
            time.sleep(0.05)
        in_python = ("" if about.get("caught_in_c", True) else
                     "; and it catches the signal in Python only (another wakeup fd, "
                     "asyncio's, was set before it), served once the main thread runs Python")
        raise self._fail(
            f"sent {name}, but no dump appeared in {about['dump_dir']} within "
            f"{max(self.timeout, _SIGNAL_WAIT):g} s: the flight recorder takes a signal's "
            f"dump at most once every min_interval ({about['min_interval']:g} s), "
            f"max_dumps ({about['max_dumps']}) in all{in_python}")


# An advert is ~300 bytes of flat JSON (dump_dir is a path: PATH_MAX at most).
_ADVERT_LIMIT = 1 << 16


def _advertised(pid: int) -> list:
    """What the flight recorders of process pid say about themselves: the
    memfds flight.py keeps open (those a forked child inherited name
    their parent, and are passed over).  The target's to write: each is
    read with bounds and checked (_check_advert) before anything uses it;
    AttachError for one that is not what flight.py writes."""
    from .flight import ADVERT_PREFIX

    fd_dir = f"/proc/{pid}/fd"
    name = f"/memfd:{ADVERT_PREFIX}{pid} (deleted)"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return []
    found = []
    for fd in fds:
        if _readlink(f"{fd_dir}/{fd}") != name:
            continue
        try:
            mine = _open_regular(f"{fd_dir}/{fd}")
        except OSError:
            continue  # closed meanwhile, or not ours to read
        try:
            if _readlink(f"/proc/self/fd/{mine}") != name:
                continue  # replaced meanwhile: another file
            data = os.pread(mine, _ADVERT_LIMIT + 1, 0)
        except OSError:
            continue
        finally:
            os.close(mine)
        about = _check_advert(data, pid, f"{fd_dir}/{fd}")
        if about is not None:
            found.append(about)
    return found


def _check_advert(data: bytes, pid: int, where: str) -> Optional[dict]:
    """The advert data, checked; None for one that names another process
    (a forked child's copy)."""
    def bad(why: str) -> AttachError:
        return AttachError(f"process {pid}: its flight recorder's advert ({where}) is not "
                           f"valid: {why}; not used")

    if len(data) > _ADVERT_LIMIT:
        raise bad(f"more than {_ADVERT_LIMIT} bytes")
    # Flat, as flight.py writes it: no nesting for json to recurse into.
    outside_strings = re.sub(rb'"(?:[^"\\]|\\.)*"', b"", data)
    if re.findall(rb"[][{}]", outside_strings) != [b"{", b"}"]:
        raise bad("not one flat JSON object")
    try:
        about = json.loads(data, parse_constant=lambda c: None)
    except (ValueError, RecursionError) as exc:
        raise bad(f"not JSON ({exc})") from None
    if not isinstance(about, dict):
        raise bad("not a JSON object")
    if about.get("pid") != pid:
        return None

    def number(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) \
            and 0 <= value < float("inf")

    signum, name, directory = about.get("signal"), about.get("signal_name"), about.get("dump_dir")
    if signum is not None and (not isinstance(signum, int) or isinstance(signum, bool)
                               or not 0 < signum < signal.NSIG):
        raise bad(f"signal {signum!r} is not a signal number")
    if signum is not None and not (isinstance(name, str) and 0 < len(name) <= 64):
        raise bad("no signal_name")
    if not isinstance(directory, str) or not os.path.isabs(directory) or "\0" in directory:
        raise bad("dump_dir is not an absolute path")
    if not number(about.get("min_interval")) or not number(about.get("max_dumps")):
        raise bad("min_interval or max_dumps is not a number")
    if not isinstance(about.get("caught_in_c", True), bool):
        raise bad("caught_in_c is not true or false")
    return about


def _claim(name: str, uids: frozenset[int], wait: float = 0.0) -> Optional[socket.socket]:
    """A claim on name, held until the socket returned is closed or this
    process ends: a Unix socket bound in the abstract namespace (no file
    anyone could plant, remove or leave behind).  None when an attach of
    uid in uids holds it for wait seconds.  A name taken by anyone else
    (any local user can bind any name) is no attach of this target's: it
    is passed over, so that no one can keep root or the target's user from
    attaching, and the socket returned then claims nothing."""
    deadline = time.monotonic() + wait
    unanswered = 0
    held_by_attach = False
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind("\0" + name)
            # Lets the next attaches ask who holds it: each asks once (a
            # connection stays queued, never accepted, until this closes).
            sock.listen(16)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise AttachError(f"cannot claim {name}: {exc.strerror}") from None
        if held_by_attach:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
            continue
        holder = _claim_holder(name)
        if holder is None:
            # Between an attach's bind and its listen, or released: asked
            # again; a holder that never answers is no attach.
            unanswered += 1
            if unanswered == 2:
                return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            time.sleep(0.1)
            continue
        if holder not in uids:
            return socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        held_by_attach = True
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def _claim_holder(name: str) -> Optional[int]:
    """The uid of the process that listens on the claim name, or None."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(1.0)  # whoever holds it may be hostile
    try:
        sock.connect("\0" + name)
        ucred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", ucred)[1])
    except OSError:
        return None
    finally:
        sock.close()


class _Workdir:
    """attach's private folder (the script, the socket), always reached
    through the descriptor opened when it was made: the target's user, who
    owns it while the target reads the script, cannot redirect anything
    done in it (no path looked up again, no symbolic link followed)."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix="frametrace-attach-")
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        self.given = False

    def write(self, name: str, text: str) -> None:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=self.fd)
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)

    def give(self, names: Iterable[str], uid: int) -> None:
        """Gives the folder and names in it to uid: the folder last (until
        then no one else can enter it)."""
        for name in names:
            os.chown(name, uid, -1, dir_fd=self.fd, follow_symlinks=False)
        os.fchown(self.fd, uid, -1)
        self.given = True

    def leave(self, name: str) -> None:
        """Leaves the folder to a script that may still run (it removes
        it), without name."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1

    def remove(self) -> None:
        if self.fd < 0:
            return
        try:
            if self.given:
                # Taken back first: nothing more can be made in it.
                os.fchown(self.fd, os.geteuid(), -1)
                os.fchmod(self.fd, 0o700)
            _empty(self.fd)
            if os.path.samestat(os.lstat(self.path), os.fstat(self.fd)):
                os.rmdir(self.path)
        except OSError:
            pass
        finally:
            os.close(self.fd)
            self.fd = -1


def _empty(dir_fd: int, depth: int = 8) -> None:
    """Removes what the folder open as dir_fd holds (folders depth deep)."""
    for name in os.listdir(dir_fd):
        try:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except IsADirectoryError:
                if not depth:
                    continue
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=dir_fd)
                try:
                    _empty(sub, depth - 1)
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=dir_fd)
        except OSError:
            pass


def _catches(pid: int, signum: int) -> bool:
    """Whether process pid has a handler for signal signum (SigCgt)."""
    for line in _read_text(f"/proc/{pid}/status", default="").splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


class _Lines:
    """JSON lines read from a socket; None at its end."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.buffer = b""

    def next(self) -> Optional[dict]:
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        value = json.loads(line)
        if not isinstance(value, dict):
            raise ValueError(f"unexpected message {line[:200]!r}")
        return value


def _read_text(path: str, default: Optional[str] = None) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        if default is None:
            raise
        return default


def _interpreter_for(minor: int) -> Optional[str]:
    if sys.version_info[:2] == (3, minor):
        return sys.executable
    return shutil.which(f"python3.{minor}")


# Bounds on what is read of a target's files (its own, maybe hostile).
_MAPS_LIMIT = 1 << 26  # /proc/PID/maps: 65,530 mappings (the default limit) take ~10 MB
_ELF_LIMIT = 1 << 24  # one ELF table (section headers, .dynsym, .dynstr)


def _cpython_version(pid: int) -> tuple[Optional[tuple[int, int, int]], bool]:
    """The CPython version process pid runs, read from the ELF file of its
    interpreter (the libpython3.X it maps, else its program), which is
    opened and read, never run; and whether that is a libpython (an
    application may embed it).  The micro version is -1 where only the
    file's name tells the version; None where nothing does (not CPython)."""
    embedded = False
    minor = None
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            maps = f.read(_MAPS_LIMIT)
    except OSError:
        maps = b""
    found = re.search(rb"^([0-9a-f]+-[0-9a-f]+) \S+ \S+ ([0-9a-f]+):([0-9a-f]+) (\d+) +"
                      rb"(/\S*/libpython3\.(\d+)[a-z]*\.so[^\n]*)$", maps, re.MULTILINE)
    version = None
    try:
        if found:
            embedded = True
            minor = int(found.group(6))
            device = os.makedev(int(found.group(2), 16), int(found.group(3), 16))
            fd = _open_mapped(pid, os.fsdecode(found.group(1)), os.fsdecode(found.group(5)),
                              (device, int(found.group(4))))
        else:
            name = os.path.basename(_readlink(f"/proc/{pid}/exe"))
            named = re.fullmatch(r"python3\.(\d+)[a-z]*(?: \(deleted\))?", name)
            minor = int(named.group(1)) if named else None
            # A magic link: the very file the process runs, no lookup by name.
            fd = _open_regular(f"/proc/{pid}/exe")
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            version = None if _on_fuse(fd) else _elf_version(fd)
        except (OSError, ValueError, struct.error):
            version = None
        finally:
            os.close(fd)
    if version is None and minor is not None:
        version = (3, minor, -1)
    return version, embedded


_MOUNTINFO = "/proc/self/mountinfo"


def _on_fuse(fd: int) -> bool:
    """Whether the file open as fd is on a FUSE filesystem: its server, which
    any user may run, can keep a read blocked for good (not even Ctrl-C
    ends it)."""
    device = os.fstat(fd).st_dev
    wanted = f"{os.major(device)}:{os.minor(device)}".encode()
    try:
        with open(_MOUNTINFO, "rb") as f:
            mounts = f.read(_MAPS_LIMIT)
    except OSError:
        return False
    for line in mounts.splitlines():
        # "ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [TAGS...] - FSTYPE SOURCE ..."
        head, sep, tail = line.partition(b" - ")
        fields = head.split()
        if sep and len(fields) > 2 and fields[2] == wanted and tail.startswith(b"fuse"):
            return True
    return False


def _environment(pid: int) -> dict:
    """The environment process pid started with (empty if unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read(1 << 24).split(b"\0")
    except OSError:
        return {}
    return dict(entry.split(b"=", 1) for entry in entries if b"=" in entry[1:])


def _ptrace_scope() -> str:
    """kernel.yama.ptrace_scope ("0" without Yama)."""
    return _read_text("/proc/sys/kernel/yama/ptrace_scope", default="0").strip()


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _open_mapped(pid: int, span: str, path: str, identity: tuple[int, int]) -> int:
    """A file descriptor for reading the file process pid maps at span
    ("start-end" in its maps), whose maps line names path and (device,
    inode) identity.  The path is the target's user's to change (replace
    it with a symlink to a device, a FIFO, a FUSE file whose open never
    returns), so it is never opened by name: /proc/PID/map_files/SPAN is
    the mapped file itself (it needs CAP_SYS_ADMIN or
    CAP_CHECKPOINT_RESTORE); without it, the path is looked up with
    O_PATH and O_NOFOLLOW, which opens nothing, and reopened only once it
    is that regular file (_open_regular)."""
    try:
        return _open_regular(f"/proc/{pid}/map_files/{span}", identity)
    except OSError:
        return _open_regular(path, identity, follow=False)


def _open_regular(path: str, identity: Optional[tuple[int, int]] = None,
                  follow: bool = True) -> int:
    """A file descriptor of path for reading, which must be a regular file
    (never a FIFO or a device that blocks, never ends or acts when opened),
    and, given (device, inode), that file.  What path names is only
    opened (for reading) once it is checked: it is looked up with O_PATH
    (no open of the file itself: no driver, FIFO or FUSE server sees it),
    then reopened through /proc/self/fd.  follow=False: a symlink as the
    last component is refused, not followed (a path by name); True for
    /proc's magic links (/proc/PID/exe, map_files, fd), which name the
    file itself."""
    flags = os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    handle = os.open(path, flags)
    try:
        st = os.fstat(handle)
        if not stat.S_ISREG(st.st_mode) or (
                identity is not None and (st.st_dev, st.st_ino) != identity):
            raise OSError(f"{path} is not the file expected")
        return os.open(f"/proc/self/fd/{handle}",
                       os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    finally:
        os.close(handle)


def _elf_version(fd: int) -> Optional[tuple[int, int, int]]:
    """The CPython version an ELF file (an interpreter or a libpython) was
    built as: PY_VERSION_HEX after the b"xdebugpy" cookie that starts its
    .PyRuntime section (_Py_DebugOffsets, 3.13+), else the value of its
    exported Py_Version (3.11+); None without either.  Every offset and
    size is checked against the file; ValueError for a malformed one."""
    size = os.fstat(fd).st_size

    def read(offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or length > _ELF_LIMIT or offset + length > size:
            raise ValueError("an ELF table out of bounds")
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise ValueError("the ELF file changed while read")
        return data

    ident = read(0, 64)
    if ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return None
    order = "<" if ident[5] == 1 else ">"
    if ident[4] == 2:  # 64-bit
        shoff, shentsize, shnum, shstrndx = struct.unpack_from(order + "Q10xHHH", ident, 0x28)
        sh_format, sym_format = order + "IIQQQQIIQQ", order + "IBBHQQ"
    else:
        shoff, shentsize, shnum, shstrndx = struct.unpack_from(order + "I10xHHH", ident, 0x20)
        sh_format, sym_format = order + "IIIIIIIIII", order + "IIIBBH"
    if shentsize != struct.calcsize(sh_format) or not 0 < shnum or shstrndx >= shnum:
        return None
    table = read(shoff, shnum * shentsize)
    # (name, type, addr, offset, size, link) of each section
    sections = [(name, kind, addr, offset, length, link) for name, kind, _, addr, offset,
                length, link, _, _, _ in (struct.unpack_from(sh_format, table, i * shentsize)
                                          for i in range(shnum))]
    names = read(sections[shstrndx][3], min(sections[shstrndx][4], _ELF_LIMIT))

    def name_of(strings: bytes, at: int) -> bytes:
        return strings[at:strings.find(b"\0", at)] if 0 <= at < len(strings) else b""

    def decode(hexversion: int) -> Optional[tuple[int, int, int]]:
        major, minor, micro = (hexversion >> shift & 0xFF for shift in (24, 16, 8))
        return (major, minor, micro) if major == 3 else None

    nobits = 8
    for name, kind, _, offset, length, _ in sections:
        if name_of(names, name) == b".PyRuntime" and kind != nobits and length >= 16:
            head = read(offset, 16)
            if head[:8] == b"xdebugpy":
                return decode(struct.unpack_from(order + "Q", head, 8)[0])
    dynsym = 11
    for _, kind, _, offset, length, link in sections:
        if kind != dynsym or link >= shnum:
            continue
        strings = read(sections[link][3], min(sections[link][4], _ELF_LIMIT))
        entry = struct.calcsize(sym_format)
        symbols = read(offset, min(length, _ELF_LIMIT) // entry * entry)
        for i in range(len(symbols) // entry):
            fields = struct.unpack_from(sym_format, symbols, i * entry)
            if ident[4] == 2:
                name, _, _, shndx, value, length = fields
            else:
                name, value, length, _, _, shndx = fields
            if length not in (4, 8) or not 0 < shndx < shnum \
                    or name_of(strings, name) != b"Py_Version":
                continue
            _, kind, addr, base, _, _ = sections[shndx]
            if kind == nobits:
                return None
            data = read(base + value - addr, length)
            return decode(struct.unpack(order + ("I" if length == 4 else "Q"), data)[0])
    return None


def _remote_debug_disabled(pid: int) -> str:
    """Why the target refuses remote debugging, from its command line and
    environment ("" when neither says so; sys.remote_exec has the last
    word)."""
    try:
        environ = _read_text(f"/proc/{pid}/environ").split("\0")
    except OSError:
        environ = []
    if any(e.startswith("PYTHON_DISABLE_REMOTE_DEBUG=") for e in environ):
        return "PYTHON_DISABLE_REMOTE_DEBUG is set in its environment"
    try:
        argv = _read_text(f"/proc/{pid}/cmdline").split("\0")
    except OSError:
        argv = []
    for i, arg in enumerate(argv[1:], 1):
        option = arg[2:] if arg.startswith("-X") and len(arg) > 2 else (
            argv[i + 1] if arg == "-X" and i + 1 < len(argv) else "")
        if option.replace("-", "_") == "disable_remote_debug":
            return f"it runs with -X {option}"
        if not arg.startswith("-") or arg in ("-c", "-m", "--"):
            break  # the program's own arguments follow
    return ""


# The script the target runs: only the standard library until frametrace is
# imported, every failure kept from the target (CPython would print it).
_SCRIPT = '''\
# Written by frametrace attach for process {pid}: it traces this process for
# the attacher (PEP 768 sys.remote_exec) and then removes itself.
def _frametrace_attach(config):
    import os, sys, time, json, socket

    def give_up():
        # The attacher is gone: remove the script, do nothing.
        for remove, path in ((os.unlink, config["script"]), (os.rmdir, config["workdir"])):
            try:
                remove(path)
            except OSError:
                pass

    if time.time() > config["deadline"]:
        give_up()
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(config["handshake_timeout"])
        try:
            sock.connect(config["socket"])
        except OSError:
            give_up()
            raise
        hello = {{"pid": os.getpid(), "python": "%d.%d.%d" % sys.version_info[:3],
                 "executable": sys.executable, "prefix": sys.prefix}}
        busy = [name for name, module in list(sys.modules.items())
                if name.split(".")[0] == "frametrace"
                and getattr(getattr(module, "__spec__", None), "_initializing", False)]
        try:
            if busy:
                # The script runs between two bytecodes of the target: here,
                # in the middle of its own import of frametrace.
                raise ImportError("it is importing %s right now: attach again" % busy[0])
            import importlib
            agent = importlib.import_module("frametrace.remote")
        except BaseException as exc:
            hello.update(error="import", message="%s: %s" % (type(exc).__name__, exc))
            sock.send(json.dumps({{"hello": hello}}).encode() + b"\\n", socket.MSG_NOSIGNAL)
            sock.close()
            return
    except BaseException:
        sock.close()
        return
    frame = sys._getframe()
    try:
        agent._begin(sock, config, hello, (frame.f_code, frame.f_back.f_code))
    except BaseException:
        sock.close()


try:
    _frametrace_attach({config!r})
except BaseException:
    pass
'''


def _script(pid: int, config: dict) -> str:
    return _SCRIPT.format(pid=pid, config=config)


# The request of attach --dump.  It runs in the target's main thread, which
# its flight recorder traces: it imports nothing new and only hands the
# request over (frametrace.remote._serve_dump), so that the dump shows it
# as a few short calls at most.
_DUMP_SCRIPT = '''\
# Written by frametrace attach --dump for process {pid}: it asks the flight
# recorders running here to dump (PEP 768 sys.remote_exec).
def _frametrace_dump(config):
    import os, sys, time, socket

    if time.time() > config["deadline"]:
        # The attacher gave up (and may have sent the recorder's signal):
        # remove the script, do nothing.
        for remove, path in ((os.unlink, config["script"]), (os.rmdir, config["workdir"])):
            try:
                remove(path)
            except OSError:
                pass
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(config["handshake_timeout"])
        sock.connect(config["socket"])
        remote = sys.modules.get("frametrace.remote")
        serve = getattr(remote, "_serve_dump", None)
        if serve is None:
            # No frametrace here (so no recorder), or an older one.
            import json
            spec = getattr(remote, "__spec__", None)
            hello = {{"pid": os.getpid(), "recorders": 0,
                     "frametrace": getattr(sys.modules.get("frametrace"), "__version__", None),
                     "importing": getattr(spec, "_initializing", False),
                     "old": remote is not None}}
            sock.send(json.dumps({{"hello": hello}}).encode() + b"\\n", socket.MSG_NOSIGNAL)
            sock.close()
            return
        serve(sock, config)
    except BaseException:
        sock.close()


try:
    _frametrace_dump({config!r})
except BaseException:
    pass
'''


def _serve_dump(sock: Any, config: dict) -> None:
    """Runs in the target's main thread, called by the dump script: asks
    each running flight recorder for a dump and returns at once.  Each
    recorder's writer thread takes its dump and reports it over sock
    (closed after the last).  Never raises into the target."""
    try:
        flight = sys.modules.get("frametrace.flight")
        recorders = list(getattr(flight, "_running", ()))
        _send(sock, {"hello": {"pid": os.getpid(), "recorders": len(recorders),
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
                _send(sock, {"dump": {"path": path and os.path.abspath(path),
                                      "error": error}})
                left[0] -= 1
                if not left[0]:
                    sock.close()

        for recorder in recorders:
            recorder.request_dump(config["reason"], done)
    except BaseException:  # noqa: B036 - none may reach the target
        sock.close()


# ---- the target's side: runs in the traced process ------------------------------------


def _send(sock: Any, message: dict) -> None:
    """Sends one message to the attacher; nothing if it is gone.  No
    SIGPIPE: the target may have restored its default action (death)."""
    data = json.dumps(message).encode() + b"\n"
    try:
        while data:
            data = data[sock.send(data, socket.MSG_NOSIGNAL):]
    except OSError:
        pass


def _begin(sock: Any, config: dict, hello: dict, script_codes: tuple) -> None:
    """Runs in the target's main thread, called by the script: the
    handshake, then the tracer started and the waiting thread launched.
    Never raises: the target must not see frametrace's failures."""
    try:
        hello["frametrace"] = getattr(sys.modules.get("frametrace"), "__version__", "?")
        from ._output import why_unwritable

        hello["unwritable"] = why_unwritable(config["output"])
        _send(sock, {"hello": hello})
        if _recv_line(sock) != b"go":
            sock.close()
            return
        agent = _Agent(sock, config, script_codes)
    except BaseException as exc:  # noqa: B036 - none may reach the target
        _send(sock, {"error": f"could not set up tracing: {type(exc).__name__}: {exc}"})
        sock.close()
        return
    agent.start()


def _recv_line(sock: Any) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(64)
        if not chunk:
            break
        data += chunk
    return data.strip()


class _Agent:
    """The tracer in the target, and what ends it."""

    def __init__(self, sock: Any, config: dict, script_codes: tuple):
        import atexit
        import threading

        from . import _tracer
        from .tracer import Tracer

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
            from . import session

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
            _send(self.sock, message)
            try:
                self.sock.close()
            except OSError:
                pass
            if self.started:
                self.tracer.clear()

    def _write(self) -> dict:
        from . import export
        from ._tracer import ThreadInfo
        from .trace import StepRecord, as_trace

        tracer = self.tracer
        path = self.config["output"]
        steps = [StepRecord(f"step#{i}", i, start, end)
                 for i, (start, end) in enumerate(self.step_marks)]
        argv = getattr(sys, "orig_argv", sys.argv)
        trace = as_trace(tracer)
        trace.steps = steps
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
            from ._output import reason

            return {"error": f"could not write the trace to {path}: {reason(exc)}"}
        threads = sum(1 for tid, _ in tracer._threads if tid != self.thread_id)
        return {"done": {"path": path, "events": count, "threads": threads,
                         "dropped": tracer.stats.dropped, "start_ns": tracer.start_ns,
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
