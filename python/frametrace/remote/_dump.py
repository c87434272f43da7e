"""``dump()`` (``frametrace attach PID --dump``): the flight recorders
running in a target asked to dump, through the attach's hand-over or,
when its script cannot run, the signal they advertise."""
from __future__ import annotations

import glob
import json
import os
import re
import signal
import time
from typing import Any, Callable, NamedTuple, Optional

from . import _attacher, _scripts, _target, _wire
from ._errors import AttachError, Unreachable


# The least time attach --dump waits for the dump a signal asked for.
_SIGNAL_WAIT = 10.0


class DumpResult(NamedTuple):
    """What ``dump`` had written: the dump files (one per flight recorder
    running in the target), the reason their metadata names, and how the
    target was asked: "remote_exec", or the signal sent (e.g. "SIGUSR2")."""

    pid: int
    paths: list
    reason: str
    via: str


def dump(pid: int, reason: str = "attach", *, timeout: float = _attacher.DEFAULT_TIMEOUT,
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
    return Dump(pid, reason=reason, timeout=timeout, use_signal=use_signal).run()


class Dump(_attacher.Attach):
    """One ``attach --dump``: the checks and the hand-over of ``Attach``, a
    script of its own, and the signal when the script cannot run."""

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
        _attacher.check_number("timeout", timeout)
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
        self.adverts = advertised(self.pid)
        try:
            return super().run()  # type: ignore[no-any-return]
        except Unreachable as exc:
            return self._by_signal(str(exc))

    def _script_text(self, config: dict) -> str:
        return _scripts.dump_script(self.pid, config)

    def _blocked(self) -> Any:
        raise self._fail(
            f"its main thread has not run Python code within {self.timeout:g} s: it is "
            f"blocked in a C call or a sleep (sys.remote_exec runs the request when the main "
            f"thread next runs Python bytecode; it does nothing if that is later)",
            Unreachable)

    def _converse(self) -> DumpResult:
        assert self.sock is not None
        reader = _wire.Lines(self.sock)
        waited = max(self.timeout, _attacher.HANDSHAKE_TIMEOUT)
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


def advertised(pid: int) -> list:
    """What the flight recorders of process pid say about themselves: the
    memfds flight.py keeps open (those a forked child inherited name
    their parent, and are passed over).  The target's to write: each is
    read with bounds and checked (_check_advert) before anything uses it;
    AttachError for one that is not what flight.py writes."""
    from ..flight import ADVERT_PREFIX

    fd_dir = f"/proc/{pid}/fd"
    name = f"/memfd:{ADVERT_PREFIX}{pid} (deleted)"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return []
    found = []
    for fd in fds:
        if _target.readlink(f"{fd_dir}/{fd}") != name:
            continue
        try:
            mine = _target.open_regular(f"{fd_dir}/{fd}")
        except OSError:
            continue  # closed meanwhile, or not ours to read
        try:
            if _target.readlink(f"/proc/self/fd/{mine}") != name:
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


def _catches(pid: int, signum: int) -> bool:
    """Whether process pid has a handler for signal signum (SigCgt)."""
    for line in _target.read_text(f"/proc/{pid}/status", default="").splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False
