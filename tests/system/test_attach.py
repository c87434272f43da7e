"""frametrace.attach and ``frametrace attach PID``: real target processes
(tests/targets/attach_target.py) traced from outside through
sys.remote_exec, each compared with an untraced run of the same program:
the same output, nothing on stderr, the same exit status.

Below CPython 3.14 only the refusals run: an older target is refused with
a clear error, and bad arguments too."""
import contextlib
import errno
import glob
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Optional

import pytest

import frametrace
from frametrace.testing import assert_no_events_after_stop, assert_valid_trace, assert_well_nested
from support import UNDER_ASAN, TESTS_DIR, UserPython, child_env

# A tracer runs here (in this process or a child): in every setup.
pytestmark = pytest.mark.usefixtures("clock")

TARGET = os.path.join(TESTS_DIR, "targets", "attach_target.py")
HAS_REMOTE_EXEC = sys.version_info >= (3, 14)
needs_remote_exec = pytest.mark.skipif(
    not HAS_REMOTE_EXEC, reason="attach needs CPython 3.14+ (sys.remote_exec, PEP 768); "
                                "test_old_target_refused checks the error below")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="runs a process as another user: "
                                                          "needs root")
PACKAGE = os.path.dirname(frametrace.__file__)
# Small rings: a busy loop fills any ring in a fraction of a second, and
# the test only needs the last part.
RING = 1 << 16


class Target:
    """A running attach_target.py; finish() ends it and returns (status,
    stdout, stderr).  python: a UserPython it runs on, as that user."""

    def __init__(self, tmp_path, mode, *python_options, env=None, python=None):
        where = tmp_path if python is None else pathlib.Path(python.home)
        self.stop_file = where / f"stop-{mode}-{time.monotonic_ns()}"
        program = TARGET if python is None else os.path.join(python.targets, "attach_target.py")
        args = [*python_options, program, mode, str(self.stop_file)]
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE,
                 "stderr": subprocess.PIPE, "text": True}
        if python is None:
            self.proc = subprocess.Popen([sys.executable, *args], env=child_env(**(env or {})),
                                         **pipes)
        else:
            self.proc = python.popen(*args, cwd=python.home, **pipes)
        self.pid = self.proc.pid
        first = self.proc.stdout.readline()
        if first != "ready\n":
            self.kill()
            raise AssertionError(f"target did not start: {first!r} {self.proc.stderr.read()}")

    def finish(self, timeout=60):
        self.stop_file.touch()
        out, err = self.proc.communicate("x", timeout=timeout)  # wakes "stdin"
        return self.proc.returncode, "ready\n" + out, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def targets(tmp_path):
    """Starts targets; kills whatever is left at the end."""
    started = []

    def start(mode, *python_options, env=None, python=None):
        target = Target(tmp_path, mode, *python_options, env=env, python=python)
        started.append(target)
        return target

    yield start
    for target in started:
        target.kill()


@pytest.fixture(scope="module")
def user_python(other_user):
    """A CPython the other user owns, with code planted in it (UserPython)."""
    _, uid, gid = other_user
    python = UserPython(uid, gid)
    yield python
    python.remove()


def attach_as_this_user(pid, *options, cwd=None, timeout=120):
    """`frametrace attach PID OPTIONS` run as the tests' user (root)."""
    return subprocess.run([sys.executable, "-m", "frametrace", "attach", str(pid), *options],
                          capture_output=True, text=True, timeout=timeout, env=child_env(),
                          cwd=cwd)


def untraced(tmp_path, mode, *python_options, env=None):
    """(status, stdout, stderr) of the same program run without attaching."""
    target = Target(tmp_path, mode, *python_options, env=env)
    try:
        return target.finish()
    finally:
        target.kill()


def names_of(trace):
    """{thread_id: name} of the trace's threads (the latest's of an ident)."""
    return {t.thread_id: t.name for t in trace.threads if t.name is not None}


def check_trace(path):
    """The trace at path, read back and checked: sound, none of
    frametrace's own frames or the script's, frametrace's thread only
    waiting."""
    trace = frametrace.load(path)
    events = trace.events
    assert_valid_trace(events, trace.tracer_start_ns, trace.tracer_stop_ns)
    assert_well_nested(events)
    assert_no_events_after_stop(events, trace.tracer_stop_ns)
    assert not [e for e in events if e.filename.startswith(PACKAGE)]
    assert not [e for e in events if e.filename == "<string>"]  # the script
    agent = [tid for tid, name in names_of(trace).items() if name == "frametrace attach"]
    assert len(agent) <= 1
    # Its one call, begun before the start, is recorded at most.
    assert {e.name for e in events if e.thread_id in agent} <= {"select.select"}
    assert 0 not in {e.thread_id for e in events}
    return trace


def main_thread(trace):
    return next(tid for tid, name in names_of(trace).items() if name == "MainThread")


def running_throughout(trace, tid):
    """Names of the frames of thread tid running from start to stop."""
    return {e.name for e in trace.events
            if e.thread_id == tid and e.open_at_start and e.open_at_stop}


@needs_remote_exec
def test_attach_busy_loop(tmp_path, targets):
    target = targets("busy")
    out = tmp_path / "busy.json"
    result = frametrace.attach(target.pid, duration=0.3, output=str(out), buffer_size=RING)
    assert result.pid == target.pid and result.path == str(out)
    assert result.reason == "duration" and not result.target_exited
    assert result.python == "%d.%d.%d" % sys.version_info[:3]
    assert result.stop_ns > result.start_ns
    trace = check_trace(out)
    assert result.events == len(trace.events)
    assert (trace.tracer_start_ns, trace.tracer_stop_ns) == (result.start_ns, result.stop_ns)
    names = {e.name for e in trace.events}
    assert {"train_step", "crunch", "leaf"} <= names
    # The frames running when the tracer started are open_at_start, the ones
    # running at the stop end exactly there.
    assert {"<module>", "main", "loop"} <= running_throughout(trace, main_thread(trace))
    assert [e for e in trace.events if e.open_at_stop]
    assert trace.steps == []
    assert target.finish() == untraced(tmp_path, "busy")


@needs_remote_exec
def test_attach_threads_cli(tmp_path, targets):
    target = targets("threads")
    out = tmp_path / "threads.json.gz"
    proc = subprocess.run([sys.executable, "-m", "frametrace", "attach", str(target.pid),
                           "--duration", "1.0", "-o", str(out), "--buffer-size", str(RING)],
                          capture_output=True, text=True, timeout=120, env=child_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert f"attached to process {target.pid}" in proc.stderr
    assert f"written to {out} by process {target.pid}" in proc.stderr
    assert "open_at_start" in proc.stderr and "sorted by self" in proc.stderr
    assert "4 threads (and frametrace's)" in proc.stderr
    assert "select.select" not in proc.stderr  # the summary is of the target's threads
    with open(out, "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    trace = check_trace(out)
    by_name = {name: tid for tid, name in names_of(trace).items()}
    assert {"MainThread", "worker-0", "worker-1", "worker-2"} <= set(by_name)
    for i in range(3):
        tid = by_name[f"worker-{i}"]
        assert "crunch" in {e.name for e in trace.events if e.thread_id == tid}
        assert "worker" in running_throughout(trace, tid)
    assert "loop" in running_throughout(trace, by_name["MainThread"])
    assert target.finish() == untraced(tmp_path, "threads")


@needs_remote_exec
def test_attach_steps(tmp_path, targets):
    target = targets("steps")
    out = tmp_path / "steps.json"
    result = frametrace.attach(target.pid, steps=3, output=str(out), buffer_size=RING)
    assert result.reason == "steps" and result.steps == 3
    trace = check_trace(out)
    # The tracer stopped in the third call of frametrace.step(): the rest of
    # the step under way, then two whole ones.
    assert [s.step for s in trace.steps] == [0, 1, 2]
    assert trace.steps[0].start_ns == trace.tracer_start_ns
    assert trace.steps[-1].end_ns <= trace.tracer_stop_ns
    # The first step is what was left of the one under way, the others whole:
    # one train_step() each.
    for step in trace.steps[1:]:
        calls = [e for e in trace.events if e.name == "train_step"
                 and step.start_ns <= e.start_ns and e.end_ns <= step.end_ns]
        assert len(calls) == 1 and not calls[0].open_at_start
    assert "step" not in {e.name for e in trace.events}  # frametrace's own
    assert "loop" in running_throughout(trace, main_thread(trace))
    assert target.finish() == untraced(tmp_path, "steps")


@needs_remote_exec
def test_attach_step_function(tmp_path, targets):
    target = targets("busy")
    out = tmp_path / "fn.pftrace"
    result = frametrace.attach(target.pid, steps=2, step_function="__main__:train_step",
                               output=str(out), buffer_size=RING)
    assert result.reason == "steps" and result.steps == 2
    assert result.events > 0 and result.threads == 1  # frametrace's not counted
    with open(out, "rb") as f:
        assert f.read(1) == b"\x0a"  # a TracePacket field: Perfetto's protobuf
    assert target.finish() == untraced(tmp_path, "busy")
    # The same in JSON: two whole calls, each a step.
    target = targets("busy")
    out = tmp_path / "fn.json"
    frametrace.attach(target.pid, steps=2, step_function="__main__:train_step",
                      output=str(out), buffer_size=RING)
    trace = check_trace(out)
    calls = [e for e in trace.events if e.name == "train_step" and not e.open_at_start]
    assert len(calls) == 2
    assert len(trace.steps) == 2
    for step, call in zip(trace.steps, calls):
        # Taken in a sys.monitoring callback beside the tracer's: about the
        # call's times, a little before or after.
        assert step.start_ns <= call.end_ns and call.start_ns <= step.end_ns
    assert target.finish() == untraced(tmp_path, "busy")


def attach_metadata(path):
    with open(path) as f:
        return json.load(f)["otherData"]["frametrace"]["metadata"]["attach"]


@needs_remote_exec
def test_every_tracer_option_reaches_the_target(tmp_path, targets):
    """Each of the tracer's options, given to attach or to the command,
    is the target's tracer's (the trace's metadata says which it ran with);
    max_memory bounds what its rings hold."""
    options = frametrace.Options(buffer_size=RING, c_calls=False, backend="setprofile",
                                 max_memory=1 << 16, ignore=["__main__.leaf"])
    # Long enough for the busy loop to fill 64 KiB, also under ASan.
    duration = 3.0 if UNDER_ASAN else 0.3
    target = targets("busy")
    out = tmp_path / "options.json"
    result = frametrace.attach(target.pid, duration=duration, output=str(out), options=options)
    assert attach_metadata(out)["options"] == options.as_dict()
    assert result.stats.dropped > 0  # 64 KiB hold little of a busy loop
    assert result.stats.dropped_records > 0
    events = check_trace(out).events
    assert {"train_step", "crunch"} <= {e.name for e in events}
    assert "leaf" not in {e.name for e in events}
    assert {e.kind for e in events} == {"py"}
    assert target.finish() == untraced(tmp_path, "busy")

    target = targets("busy")
    out = tmp_path / "cli.json"
    proc = attach_as_this_user(target.pid, "--duration", str(duration), "-o", str(out),
                               "--max-memory", "65536", "--buffer-size", str(RING),
                               "--include", "__main__")
    assert proc.returncode == 0, proc.stderr
    assert "lost entirely" in proc.stderr
    ran_with = attach_metadata(out)["options"]
    assert ran_with["backend"] in ("setprofile", "monitoring")  # auto: the target's choice
    expected = frametrace.Options(max_memory=65536, buffer_size=RING, include=["__main__"])
    assert ran_with == dict(expected.as_dict(), backend=ran_with["backend"])
    assert target.finish() == untraced(tmp_path, "busy")


@needs_remote_exec
def test_the_target_checks_the_options_it_receives(tmp_path, targets):
    """The options reach the target as data it checks again: a bad one
    (written by someone else than frametrace's attacher) is refused there,
    naming it, and the target goes on untouched."""
    from frametrace.remote import _attacher

    target = targets("busy")
    session = _attacher.Attach(target.pid, duration=0.3, output=str(tmp_path / "t.json"),
                               steps=None, step_function=None, options=frametrace.Options(),
                               timeout=10)
    session.config["options"] = dict(session.config["options"], max_memory=-1)
    with pytest.raises(frametrace.AttachError, match="max_memory must be between"):
        session.run()
    assert not (tmp_path / "t.json").exists()
    assert target.finish() == untraced(tmp_path, "busy")


@contextlib.contextmanager
def attach_cli(target, out, *options):
    """`frametrace attach` on target in the background, with its first line
    of stderr; killed on the way out if still running."""
    cli = subprocess.Popen([sys.executable, "-m", "frametrace", "attach", str(target.pid),
                            *options, "-o", str(out), "--buffer-size", str(RING)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=child_env())
    try:
        yield cli, cli.stderr.readline()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()


@needs_remote_exec
def test_target_exits_before_the_end(tmp_path, targets):
    target = targets("busy")
    out = tmp_path / "exit.json"
    with attach_cli(target, out, "--duration", "600") as (cli, first):
        assert f"attached to process {target.pid}" in first, first + cli.stderr.read()
        status = target.finish()
        _, err = cli.communicate(timeout=120)
    assert cli.returncode == 2, err
    assert f"process {target.pid} exited before the end" in err
    assert f"written to {out}" in err
    trace = check_trace(out)
    # Running at the start, returned before the exit, where the trace ends.
    main = [e for e in trace.events if e.name == "main"]
    assert len(main) == 1 and main[0].open_at_start and not main[0].open_at_stop
    assert status == untraced(tmp_path, "busy")


@needs_remote_exec
def test_interrupted_attach_still_writes(tmp_path, targets):
    # Steps that never come; Ctrl-C ends the tracing, the target writes.
    target = targets("busy")
    out = tmp_path / "stopped.json"
    with attach_cli(target, out, "--steps", "5") as (cli, first):
        assert "tracing for 5 calls of frametrace.step()" in first, first + cli.stderr.read()
        cli.send_signal(signal.SIGINT)
        _, err = cli.communicate(timeout=120)
    assert cli.returncode == 0, err
    assert "stopping: the target writes what was recorded" in err
    assert f"written to {out}" in err and "stopped early" in err
    trace = check_trace(out)
    assert "train_step" in {e.name for e in trace.events}
    assert trace.steps == []
    assert target.finish() == untraced(tmp_path, "busy")


@needs_remote_exec
def test_main_thread_blocked(tmp_path, targets):
    target = targets("sleep")
    out = tmp_path / "never.json"
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "frametrace-attach-*")))
    with pytest.raises(frametrace.AttachError,
                       match=r"main thread has not run Python code within 0.5 s: it is "
                             r"blocked in a C call or a sleep"):
        frametrace.attach(target.pid, duration=0.3, output=str(out), timeout=0.5)
    # The script runs when the 2 s sleep ends, finds it is late and does
    # nothing but remove itself.
    assert target.finish() == untraced(tmp_path, "sleep")
    assert not out.exists()
    after = set(glob.glob(os.path.join(tempfile.gettempdir(), "frametrace-attach-*")))
    assert after == before


@needs_remote_exec
@pytest.mark.parametrize("how", ["env", "X", "X_underscore"])
def test_remote_debugging_disabled(tmp_path, targets, how):
    options, env = {"env": ((), {"PYTHON_DISABLE_REMOTE_DEBUG": "1"}),
                    "X": (("-X", "disable-remote-debug"), None),
                    "X_underscore": (("-X", "disable_remote_debug"), None)}[how]
    target = targets("busy", *options, env=env)
    with pytest.raises(frametrace.AttachError, match="remote debugging is disabled"):
        frametrace.attach(target.pid, duration=0.3, output=str(tmp_path / "t.json"))
    assert target.finish() == untraced(tmp_path, "busy", *options, env=env)


@needs_remote_exec
def test_frametrace_not_importable(tmp_path, targets):
    # -I -S: no site-packages, no PYTHONPATH; frametrace is not found.
    target = targets("busy", "-I", "-S")
    proc = subprocess.run([sys.executable, "-m", "frametrace", "attach", str(target.pid),
                           "--duration", "0.3", "-o", str(tmp_path / "t.json")],
                          capture_output=True, text=True, timeout=120, env=child_env())
    assert proc.returncode == 2
    assert "frametrace is not importable there (ModuleNotFoundError" in proc.stderr
    assert "-m pip install frametrace" in proc.stderr
    assert not (tmp_path / "t.json").exists()
    assert target.finish() == untraced(tmp_path, "busy", "-I", "-S")


@needs_remote_exec
def test_tracer_already_active(tmp_path, targets):
    target = targets("tracer")
    with pytest.raises(frametrace.AttachError, match="could not start tracing: another frametrace Tracer is already active"):
        frametrace.attach(target.pid, duration=0.3, output=str(tmp_path / "t.json"))
    assert not (tmp_path / "t.json").exists()
    assert target.finish() == untraced(tmp_path, "tracer")


@needs_remote_exec
@pytest.mark.skipif(os.geteuid() != 0, reason="switches to another user: needs root")
def test_no_permission(tmp_path, targets):
    target = targets("busy")
    proc = subprocess.run([sys.executable, "-m", "frametrace", "attach", str(target.pid)],
                          capture_output=True, text=True, timeout=120, env=child_env(),
                          user=65534, cwd="/")
    assert proc.returncode == 2
    assert f"frametrace attach: process {target.pid}: no permission" in proc.stderr
    assert target.finish() == untraced(tmp_path, "busy")


def test_no_such_process():
    pid = subprocess.Popen(["true"])
    pid.wait()
    with pytest.raises(frametrace.AttachError, match=f"no process with PID {pid.pid}"):
        frametrace.attach(pid.pid, duration=0.1)


def test_not_python():
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(frametrace.AttachError, match="not a Python process"):
            frametrace.attach(sleeper.pid, duration=0.1)
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()


@pytest.mark.skipif(HAS_REMOTE_EXEC, reason="needs a target older than 3.14")
def test_old_target_refused(tmp_path, targets):
    target = targets("busy")
    # Read from its files: 3.10 names its micro version nowhere but in memory.
    version = "%d.%d.%d" % sys.version_info[:3] if sys.version_info >= (3, 11) else "3.10"
    with pytest.raises(frametrace.AttachError,
                       match=f"runs CPython {version}: attach needs CPython 3.14 or later"):
        frametrace.attach(target.pid, duration=0.1, output=str(tmp_path / "t.json"))
    proc = subprocess.run([sys.executable, "-m", "frametrace", "attach", str(target.pid)],
                          capture_output=True, text=True, timeout=120, env=child_env())
    assert proc.returncode == 2 and "attach needs CPython 3.14 or later" in proc.stderr
    assert target.finish() == untraced(tmp_path, "busy")


@pytest.mark.parametrize("kwargs, error, message", [
    ({"pid": 0}, ValueError, "pid must be positive"),
    ({"pid": True}, TypeError, "pid must be an int"),
    ({"pid": "1"}, TypeError, "pid must be an int"),
    ({"duration": 0}, ValueError, "duration must be positive"),
    ({"duration": float("nan")}, ValueError, "duration must be positive"),
    ({"duration": 1, "steps": 2}, ValueError, "a duration or steps, not both"),
    ({"steps": 1.5}, TypeError, "steps must be an int"),
    ({"steps": -1}, ValueError, "steps must be positive"),
    ({"step_function": "train_step"}, ValueError, "'module:qualname'"),
    ({"timeout": -1}, ValueError, "timeout must be positive"),
    ({"backend": "perf"}, ValueError, "backend must be"),
    ({"max_memory": 0}, ValueError, "max_memory must be between"),
    ({"max_memory": "1"}, TypeError, "max_memory must be an int"),
    ({"buffer_size": 0}, ValueError, "buffer_size must be between"),
    ({"ignore": "x"}, TypeError, "ignore"),
    ({"output": "/no/such/dir/t.json"}, ValueError, "no directory"),
])
def test_bad_arguments(kwargs, error, message):
    kwargs = dict({"pid": 1}, **kwargs)
    with pytest.raises(error, match=message):
        frametrace.attach(**kwargs)
    with pytest.raises(ValueError, match="itself"):
        frametrace.attach(os.getpid())


def test_cli_bad_input(tmp_path):
    from frametrace import cli

    assert cli.main(["attach", "0"]) == 2
    assert cli.main(["attach", "1", "--duration", "1", "--steps", "2"]) == 2
    assert cli.main(["attach", "1", "--duration", "-1"]) == 2
    assert cli.main(["attach", "1", "--steps", "0"]) == 2
    assert cli.main(["attach", "1", "--max-memory", "0"]) == 2


# ---- other users ------------------------------------------------------------------------
# What runs as whom and which files are opened: the same whatever clock or
# backend the target's tracer has (one_setup).


@pytest.mark.one_setup
@needs_root
def test_root_runs_nothing_of_the_targets_user(targets, user_python, other_user):
    """Root attaching to a process of a user who owns its interpreter runs
    nothing of it as root: the version is read from its files, the script
    handed over by the user's interpreter run as the user."""
    target = targets("busy", python=user_python)
    out = os.path.join(user_python.out, f"t-{target.pid}.json")
    proc = attach_as_this_user(target.pid, "--duration", "0.3", "-o", out,
                               "--buffer-size", str(RING))
    assert 0 not in user_python.ran_as()
    if HAS_REMOTE_EXEC:
        assert proc.returncode == 0, proc.stderr
        assert os.stat(out).st_uid == other_user[1]  # the target wrote it, as itself
        check_trace(out)
    else:
        assert proc.returncode == 2
        assert "attach needs CPython 3.14 or later" in proc.stderr
    status, out, err = target.finish()
    assert (status, err) == (3, "") and "result" in out


@pytest.mark.one_setup
@needs_remote_exec
@needs_root
def test_under_yama_root_hands_the_script_over_itself(targets, user_python, other_user,
                                                      monkeypatch):
    """Where kernel.yama.ptrace_scope lets no process of the target's user
    attach to it (1, 2: Ubuntu's default is 1), root hands the script over
    through its own sys.remote_exec: no process is started, nothing of the
    user's runs as root."""
    from frametrace.remote import _target

    target = targets("busy", python=user_python)
    monkeypatch.setattr(_target, "ptrace_scope", lambda: "1")
    monkeypatch.setattr(subprocess, "Popen", None)  # no process may be started
    out = os.path.join(user_python.out, f"yama-{target.pid}.json")
    result = frametrace.attach(target.pid, duration=0.3, output=out, buffer_size=RING)
    assert result.reason == "duration"
    assert 0 not in user_python.ran_as()
    assert os.stat(out).st_uid == other_user[1]
    check_trace(out)
    status, stdout, err = target.finish()
    assert (status, err) == (3, "") and "result" in stdout


def _attach_in_a_thread(pid: int, output: str) -> Optional[str]:
    """The AttachError of frametrace.attach of pid (None if it traced),
    run in a thread of this process (so that the test's hooks see its
    hand-over)."""
    outcome: list = []

    def attach() -> None:
        try:
            frametrace.attach(pid, duration=0.3, output=output, timeout=2)
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome.append(exc)

    thread = threading.Thread(target=attach)
    thread.start()
    thread.join(120)
    assert not thread.is_alive()
    if not outcome:
        return None
    (error,) = outcome
    assert isinstance(error, frametrace.AttachError), repr(error)
    return str(error)


def _hand_over_by_a_runner(monkeypatch, then: Callable[[str], None]) -> None:
    """The runner, started as the target's user, hands the script over;
    then(folder) runs once it has ended, before the attacher goes on."""
    from frametrace.remote import _attacher

    class Runner(subprocess.Popen):
        def wait(self, timeout=None):
            status = super().wait(timeout)
            if any("sys.remote_exec" in arg for arg in self.args):  # the runner
                then(os.path.dirname(self.args[-1]))  # its last argument: the script
            return status

    monkeypatch.setattr(_attacher.subprocess, "Popen", Runner)


def _hand_over_by_root(monkeypatch, then: Callable[[str], None]) -> None:
    """As under Yama, root's own sys.remote_exec hands the script over;
    then(folder) runs once it has, before the attacher goes on."""
    from frametrace.remote import _target

    monkeypatch.setattr(_target, "ptrace_scope", lambda: "1")
    remote_exec = sys.remote_exec  # type: ignore[attr-defined]

    def remote_exec_then(target_pid, path):
        remote_exec(target_pid, path)
        then(os.path.dirname(path))

    monkeypatch.setattr(sys, "remote_exec", remote_exec_then)


@pytest.mark.one_setup
@needs_remote_exec
@needs_root
@pytest.mark.parametrize("hand_over", ["runner", "root"])
def test_the_folder_given_to_the_user_redirects_nothing(tmp_path, targets, user_python,
                                                       other_user, monkeypatch, hand_over):
    """While the target may read the script, the folder holding it is its
    user's: renamed, and a symbolic link left in its place, root's clean-up
    still acts in the folder itself, not where the link points.  Both ways
    of handing the script over: a runner as the user, and (where Yama lets
    no process of the user's attach) root's own sys.remote_exec."""
    from frametrace.remote import _target

    _, uid, gid = other_user
    if hand_over == "runner" and _target.ptrace_scope() != "0":
        pytest.skip(f"kernel.yama.ptrace_scope is {_target.ptrace_scope()}: no process of the "
                    f"target's user may attach to it, so root hands the script over itself")
    victim = tmp_path / "victim"  # root's, out of the user's reach
    victim.mkdir()
    (victim / "s").write_text("root's")
    # The script runs late (at finish()): the folder stays for it.
    target = targets("stdin", python=user_python)
    output = os.path.join(user_python.out, "never.json")
    moved = []

    def redirect(folder: str) -> None:
        """Once the script is handed over (sys.remote_exec checks it can
        be read), the user redirects its folder."""
        assert os.lstat(folder).st_uid == uid
        done = subprocess.run(["sh", "-c", 'mv "$1" "$1.moved" && ln -s "$2" "$1"', "sh",
                               folder, str(victim)], user=uid, group=gid, extra_groups=[],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        moved.append(folder)

    if hand_over == "runner":
        _hand_over_by_a_runner(monkeypatch, redirect)
    else:
        _hand_over_by_root(monkeypatch, redirect)
    try:
        err = _attach_in_a_thread(target.pid, output)
        assert len(moved) == 1, err
        assert (victim / "s").read_text() == "root's"
        if err is None:
            # The target ran the script at once, before the user redirected
            # the folder (seen on CI's machines): the attach traced, and
            # root's clean-up emptied the folder itself, not the link's.
            assert os.listdir(moved[0] + ".moved") == []
        else:
            # (Its late script, now behind the link, cannot be read: CPython
            # says so on its stderr.)
            assert "has not run Python code within 2 s" in err, err
        assert target.finish()[0] == 3
    finally:
        for link in moved:
            os.unlink(link)
            subprocess.run(["rm", "-rf", link + ".moved"])


@needs_remote_exec
def test_one_attach_at_a_time(tmp_path, targets):
    target = targets("busy")
    pattern = os.path.join(tempfile.gettempdir(), "frametrace-attach-*")
    with attach_cli(target, tmp_path / "first.json", "--duration", "600") as (cli, first):
        assert f"attached to process {target.pid}" in first, first + cli.stderr.read()
        before = set(glob.glob(pattern))
        with pytest.raises(frametrace.AttachError,
                           match=f"another attach is tracing PID {target.pid}"):
            frametrace.attach(target.pid, duration=0.3, output=str(tmp_path / "second.json"),
                              timeout=60)
        assert set(glob.glob(pattern)) == before  # nothing left behind
        cli.send_signal(signal.SIGINT)
        _, err = cli.communicate(timeout=120)
    assert cli.returncode == 0, err
    assert f"written to {tmp_path / 'first.json'}" in err
    assert not (tmp_path / "second.json").exists()
    assert target.finish() == untraced(tmp_path, "busy")


SQUATTER = """\
import socket, sys, time
socks = []
for name in sys.argv[2:]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind("\\0" + name)
    if sys.argv[1] == "listening":
        sock.listen(0)
    socks.append(sock)
print("holding", flush=True)
time.sleep(600)
"""


@pytest.mark.one_setup
@needs_remote_exec
@needs_root
@pytest.mark.parametrize("how", ["listening", "silent"])
def test_another_users_claim_keeps_no_one_from_attaching(tmp_path, targets, other_user, how):
    """Any local user can bind any abstract socket name: the names attach
    claims, held by a process of another user, are passed over."""
    target = targets("busy")
    _, uid, gid = other_user
    squatter = subprocess.Popen(
        [sys.executable, "-I", "-c", SQUATTER, how, f"frametrace-attach-{target.pid}",
         f"frametrace-handover-{target.pid}"],
        stdout=subprocess.PIPE, text=True, user=uid, group=gid, extra_groups=[], cwd="/")
    try:
        assert squatter.stdout.readline() == "holding\n"
        frametrace.attach(target.pid, duration=0.3, output=str(tmp_path / "t.json"), timeout=60,
                          buffer_size=RING)
        assert squatter.poll() is None  # still holding them
    finally:
        squatter.kill()
        squatter.communicate()
    check_trace(tmp_path / "t.json")
    assert target.finish() == untraced(tmp_path, "busy")


@pytest.mark.one_setup
@needs_remote_exec
@needs_root
def test_output_its_user_cannot_write_is_refused_first(tmp_path, targets, user_python,
                                                       other_user):
    """The target writes the trace, as its user: a default output in root's
    folder is refused before tracing, not after --duration."""
    target = targets("busy", python=user_python)
    proc = attach_as_this_user(target.pid, "--duration", "600", cwd=tmp_path, timeout=60)
    assert proc.returncode == 2
    output = tmp_path / f"frametrace-{target.pid}.json"
    # The user cannot see into root's pytest folders: the folder it would
    # have to make is in the nearest one it sees.
    assert (f"it writes the trace as its user, uid {other_user[1]}, and {output} cannot write "
            f"to folder {tmp_path} (in ") in proc.stderr, proc.stderr
    assert (f"): Permission denied: give -o a path that uid {other_user[1]} can write; the "
            f"target is untouched") in proc.stderr, proc.stderr
    assert not os.listdir(tmp_path)
    status, out, err = target.finish()
    assert (status, err) == (3, "") and "result" in out


@pytest.mark.one_setup
@needs_root
@pytest.mark.parametrize("map_files", [True, False], ids=["map_files", "without_map_files"])
def test_the_version_read_opens_no_file_by_the_name_the_user_controls(targets, user_python,
                                                                      monkeypatch, map_files):
    """Root reads a target's CPython version from the libpython it maps,
    whose name (in /proc/PID/maps) its user controls: here the user's
    folder holds, at that name, a symlink to a FIFO (as it could to a
    device, or a FUSE file whose open never returns).  The read opens
    the mapped file itself (/proc/PID/map_files), or, where that cannot
    be opened, refuses the symlink; never the FIFO.  It returns promptly
    with the exact version, or the one the name tells."""
    from frametrace.remote import _target

    target = targets("busy", python=user_python)
    with open(f"/proc/{target.pid}/maps") as f:
        mapped = [line.split(None, 5)[5].strip() for line in f
                  if "/libpython3" in line and len(line.split(None, 5)) == 6]
    if not mapped:
        pytest.skip("this CPython maps no libpython (a static build)")
    path = mapped[0]
    assert path.startswith(user_python.home + "/")
    fifo = os.path.join(user_python.home, f"fifo-{target.pid}")
    kept = f"{path}.kept-{target.pid}"
    named = f"{path} (deleted)"  # what maps says once the mapped name is gone
    os.mkfifo(fifo)
    os.link(path, kept)
    os.unlink(path)
    os.symlink(fifo, named)
    opened = threading.Event()

    def writer():  # its open returns once the FIFO is opened for reading
        os.close(os.open(fifo, os.O_WRONLY))
        opened.set()

    threading.Thread(target=writer, daemon=True).start()
    if not map_files:
        real_open = os.open

        def no_map_files(file, *args, **kwargs):
            if "/map_files/" in os.fsdecode(file):
                raise PermissionError(errno.EPERM, "Operation not permitted", file)
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(os, "open", no_map_files)
    result = []
    try:
        reader = threading.Thread(target=lambda: result.append(_target.cpython_version(target.pid)),
                                  daemon=True)
        reader.start()
        reader.join(30)
        assert not reader.is_alive(), "the version read is blocked"
        assert not opened.wait(0.5), "the version read opened the FIFO named in maps"
    finally:
        monkeypatch.undo()
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets the writer go
        os.unlink(named)
        os.rename(kept, path)
        os.unlink(fifo)
    # 3.10's files hold no micro version (no Py_Version, no debug offsets).
    exact = map_files and sys.version_info >= (3, 11)
    version = tuple(sys.version_info[:3]) if exact else (*sys.version_info[:2], -1)
    assert result == [(version, True)]
    status, out, err = target.finish()
    assert (status, err) == (3, "") and "result" in out
