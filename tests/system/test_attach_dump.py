"""``frametrace attach PID --dump``: a real program
under a flight recorder (tests/targets/flight_target.py) is asked from
outside to dump.  The request goes through sys.remote_exec (CPython
3.14+); when that cannot serve it (an older target, remote debugging
disabled, the main thread blocked in C), the recorder's advertised signal
is sent instead.  Each dump is read back whole and its reason checked."""
import concurrent.futures
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import warnings

import pytest

import frametrace
from frametrace.remote import _dump
from frametrace.testing import assert_no_events_after_stop, assert_valid_trace
from support import TESTS_DIR, UNDER_ASAN, UserPython, child_env, wait_for_a_child_to_come_and_go

pytestmark = pytest.mark.usefixtures("clock")

TARGET = os.path.join(TESTS_DIR, "targets", "flight_target.py")
HAS_REMOTE_EXEC = sys.version_info >= (3, 14)
needs_remote_exec = pytest.mark.skipif(
    not HAS_REMOTE_EXEC, reason="attach --dump asks through sys.remote_exec: CPython 3.14+ "
                                "(below, test_signal_instead_below_3_14 checks the fallback)")
below_3_14 = pytest.mark.skipif(HAS_REMOTE_EXEC, reason="needs a target older than 3.14")


class Target:
    """A running flight_target.py; finish() ends it and returns (status,
    the dumps its recorder lists, stderr)."""

    def __init__(self, tmp_path, mode, env=None, python=None):
        """python: a UserPython it runs on, as that user, in its out folder."""
        where = tmp_path if python is None else pathlib.Path(python.out)
        self.dump_dir = where / f"dumps-{mode}"
        self.stop_file = where / f"stop-{mode}"
        # dump_dir relative to the target's cwd: attach prints absolute paths.
        program = TARGET if python is None else os.path.join(python.targets, "flight_target.py")
        args = [program, mode, self.dump_dir.name, str(self.stop_file)]
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE,
                 "text": True, "cwd": where}
        if python is None:
            self.proc = subprocess.Popen([sys.executable, *args], env=child_env(**(env or {})),
                                         **pipes)
        else:
            self.proc = python.popen(*args, **pipes)
        self.pid = self.proc.pid
        first = self.proc.stdout.readline()
        if first != "ready\n":
            self.kill()
            raise AssertionError(f"target did not start: {first!r} {self.proc.stderr.read()}")

    def finish(self, timeout=60):
        self.stop_file.touch()
        out, err = self.proc.communicate("x", timeout=timeout)  # wakes "sleep"
        return (self.proc.returncode,
                [os.path.join(self.dump_dir.parent, line) for line in out.splitlines()], err)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def targets(tmp_path):
    started = []

    def start(mode, env=None, python=None):
        target = Target(tmp_path, mode, env=env, python=python)
        started.append(target)
        return target

    yield start
    for target in started:
        target.kill()


def attach_dump(pid, *options):
    return subprocess.run([sys.executable, "-m", "frametrace", "attach", str(pid), "--dump",
                           *options], capture_output=True, text=True, timeout=120,
                          env=child_env())


def check_dump(path, reason):
    """The dump at path, read back whole; its metadata names reason."""
    trace = frametrace.load(path)
    assert_valid_trace(trace.events, trace.tracer_start_ns, trace.tracer_stop_ns)
    assert_no_events_after_stop(trace.events, trace.tracer_stop_ns)
    with open(path) as f:
        info = json.load(f)["otherData"]["frametrace"]["metadata"]["dump"]
    assert info["reason"] == reason
    assert info["snapshot_ns"] == trace.tracer_stop_ns
    return trace, info


@needs_remote_exec
def test_dump_of_a_running_loop(tmp_path, targets):
    target = targets("busy")
    proc = attach_dump(target.pid)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    (first,) = proc.stdout.splitlines()
    assert os.path.dirname(first) == str(target.dump_dir)  # absolute, whatever the cwd
    assert os.path.basename(first).startswith(f"frametrace-dump-{target.pid}-1-attach.")
    trace, info = check_dump(first, "attach")
    # The last 3 steps: the one running at the request cut there, two whole.
    assert info["steps"][1] - info["steps"][0] == 2
    assert "train_step" in {e.name for e in trace.events}
    proc = attach_dump(target.pid, "--reason", "loss spike")
    assert proc.returncode == 0, proc.stderr
    (second,) = proc.stdout.splitlines()
    assert os.path.basename(second).startswith(f"frametrace-dump-{target.pid}-2-loss-spike.")
    check_dump(second, "loss spike")
    # The recorder's own list: the same two, and the program ran on.
    status, dumps, err = target.finish()
    assert (status, dumps, err) == (0, [first, second], "")


@needs_remote_exec
def test_python_api(tmp_path, targets):
    target = targets("busy")
    result = frametrace.remote.dump(target.pid, "asked")
    assert result.pid == target.pid and result.via == "remote_exec"
    assert result.reason == "asked" and len(result.paths) == 1
    check_dump(result.paths[0], "asked")
    assert target.finish()[1] == result.paths


@needs_remote_exec
def test_no_flight_recorder(tmp_path, targets):
    target = targets("none")
    proc = attach_dump(target.pid)
    assert proc.returncode == 2 and proc.stdout == ""
    assert (f"frametrace attach: process {target.pid}: no flight recorder is running in it"
            in proc.stderr), proc.stderr
    assert target.finish() == (0, [], "")


# A target whose frametrace (if any) has no _serve_dump, the name the
# request calls: none, or one of a version older than attach --dump.
NO_SERVE_DUMP = """\
import sys, time, types
if sys.argv[1] == "old":
    sys.modules["frametrace"] = types.ModuleType("frametrace")
    sys.modules["frametrace"].__version__ = "0.0.1"
    sys.modules["frametrace.remote"] = types.ModuleType("frametrace.remote")
print("ready", flush=True)
while True:
    time.sleep(0.01)
"""


@needs_remote_exec
@pytest.mark.parametrize("frametrace_there,said", [
    ("none", "no flight recorder is running in it"),
    ("old", "its frametrace 0.0.1 is older than attach --dump: send its flight recorder's "
            "signal"),
])
def test_a_target_without_serve_dump(frametrace_there, said):
    target = subprocess.Popen([sys.executable, "-I", "-c", NO_SERVE_DUMP, frametrace_there],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline() == "ready\n"
        proc = attach_dump(target.pid)
        assert proc.returncode == 2 and proc.stdout == ""
        assert said in proc.stderr, proc.stderr
        assert target.poll() is None  # untouched
    finally:
        target.kill()
        target.communicate()


@needs_remote_exec
def test_max_dumps_reached(tmp_path, targets):
    target = targets("full")
    proc = attach_dump(target.pid)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "no dump taken: max_dumps (0) reached" in proc.stderr, proc.stderr
    assert target.finish() == (0, [], "")


@needs_remote_exec
def test_main_thread_blocked_in_c_gets_the_signal_instead(tmp_path, targets):
    target = targets("sleep")
    proc = attach_dump(target.pid, "--timeout", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert "main thread has not run Python code within 0.5 s" in proc.stderr
    assert "sending SIGUSR2, its flight recorder's signal, instead" in proc.stderr
    (path,) = proc.stdout.splitlines()
    check_dump(path, "signal SIGUSR2")
    # The request, run when the signal's handler did, found itself late:
    # no second dump.
    time.sleep(0.5)
    assert target.finish() == (0, [path], "")


@needs_remote_exec
def test_one_request_handed_over_at_a_time(tmp_path, targets):
    """A second request made while the first waits for the target's main
    thread (blocked in C) waits its turn: it does not replace the first
    (sys.remote_exec keeps one script), and both are served."""
    target = targets("sleep")
    command = [sys.executable, "-m", "frametrace", "attach", str(target.pid), "--dump",
               "--timeout", "30", "--no-signal"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True,
             "env": child_env()}
    first = subprocess.Popen(command + ["--reason", "first"], **pipes)
    second = None
    try:
        wait_for_a_child_to_come_and_go(first.pid)  # its script handed over, pending
        second = subprocess.Popen(command + ["--reason", "second"], **pipes)
        # Watched from now on: its hand-over may come and go while the
        # first's conversation still runs.
        watch = concurrent.futures.ThreadPoolExecutor(1)
        second_handed_over = watch.submit(wait_for_a_child_to_come_and_go, second.pid)
        watch.shutdown(wait=False)
        time.sleep(1.0)  # long enough for it to hand over its own, if it could
        assert not second_handed_over.done()
        target.proc.stdin.write("x")  # the main thread runs Python: one script
        target.proc.stdin.flush()
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, err
        check_dump(out.strip(), "first")
        second_handed_over.result(timeout=70)
        target.proc.stdin.write("x")
        target.proc.stdin.flush()
        out2, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        check_dump(out2.strip(), "second")
        assert target.finish() == (0, [out.strip(), out2.strip()], "")
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()


@needs_remote_exec
def test_main_thread_blocked_without_the_signal(tmp_path, targets):
    target = targets("sleep")
    proc = attach_dump(target.pid, "--timeout", "0.5", "--no-signal")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "main thread has not run Python code within 0.5 s" in proc.stderr
    assert (f"its flight recorder dumps on SIGUSR2 even now: kill -USR2 {target.pid} "
            f"(or attach --dump without --no-signal)") in proc.stderr, proc.stderr
    assert target.finish() == (0, [], "")


@needs_remote_exec
def test_recorder_without_a_signal(tmp_path, targets):
    target = targets("nosignal")
    proc = attach_dump(target.pid, "--timeout", "0.5")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "its flight recorder has no signal (signal=None) to send instead" in proc.stderr
    assert target.finish() == (0, [], "")


@needs_remote_exec
def test_remote_debugging_disabled_gets_the_signal_instead(tmp_path, targets):
    target = targets("busy", env={"PYTHON_DISABLE_REMOTE_DEBUG": "1"})
    proc = attach_dump(target.pid)
    assert proc.returncode == 0, proc.stderr
    assert "remote debugging is disabled in it" in proc.stderr
    assert "sending SIGUSR2" in proc.stderr
    (path,) = proc.stdout.splitlines()
    check_dump(path, "signal SIGUSR2")
    assert target.finish() == (0, [path], "")


@below_3_14
def test_signal_instead_below_3_14(tmp_path, targets):
    target = targets("busy")
    proc = attach_dump(target.pid)
    assert proc.returncode == 0, proc.stderr
    assert "attach needs CPython 3.14 or later" in proc.stderr
    assert "sending SIGUSR2, its flight recorder's signal, instead" in proc.stderr
    (path,) = proc.stdout.splitlines()
    trace, _ = check_dump(path, "signal SIGUSR2")
    assert "train_step" in {e.name for e in trace.events}
    assert target.finish() == (0, [path], "")


@below_3_14
def test_no_recorder_below_3_14(tmp_path, targets):
    target = targets("none")
    proc = attach_dump(target.pid)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "attach needs CPython 3.14 or later" in proc.stderr
    assert "no flight recorder is advertised in it" in proc.stderr, proc.stderr
    # SIGUSR2 would have ended it: never sent.
    assert target.finish() == (0, [], "")


def test_the_advert_lives_as_long_as_the_recorder(tmp_path):
    assert _dump.advertised(os.getpid()) == []
    with frametrace.flight_recorder(tmp_path / "d", watchdog=False, min_interval=5) as rec:
        (about,) = _dump.advertised(os.getpid())
        assert about["pid"] == os.getpid() and about["signal"] == signal.SIGUSR2
        assert about["signal_name"] == "SIGUSR2" and about["dump_dir"] == str(tmp_path / "d")
        assert (about["min_interval"], about["max_dumps"]) == (5, rec.max_dumps)
        assert about["caught_in_c"] is True
        # A forked child inherits the memfd, which names its parent: not its.
        read, write = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # a fork beside threads
            child = os.fork()
        if child == 0:
            try:
                os.read(read, 1)
            finally:
                os._exit(0)
        try:
            assert _dump.advertised(child) == []
        finally:
            os.write(write, b"x")
            os.waitpid(child, 0)
            os.close(read)
            os.close(write)
    assert _dump.advertised(os.getpid()) == []


def test_request_dump_is_served_by_the_writer(tmp_path):
    import threading

    answers = []
    served = threading.Event()

    def done(path, error):
        answers.append((path, error, threading.current_thread().name))
        served.set()

    with frametrace.flight_recorder(tmp_path, watchdog=False, signal=None, max_dumps=1) as rec:
        frametrace.step()
        rec.request_dump("asked", done)
        assert served.wait(60)
        served.clear()
        rec.request_dump("again", done)
        assert served.wait(60)
    rec.request_dump("late", done)
    path = rec.dumps[0]
    assert answers == [(path, None, "frametrace-dump-writer"),
                       (None, "max_dumps (1) reached", "frametrace-dump-writer"),
                       (None, "the flight recorder has ended", "MainThread")]
    check_dump(path, "asked")


@pytest.mark.parametrize("options, message", [
    (["--duration", "1"], "--dump does not go with --duration"),
    (["--steps", "2"], "--dump does not go with --steps"),
    (["--step-function", "m:f"], "--dump does not go with --step-function"),
    (["-o", "t.json"], "--dump does not go with -o"),
    (["--buffer-size", "100"], "--dump does not go with --buffer-size"),
    (["--no-c-calls"], "--dump does not go with --no-c-calls"),
    (["--backend", "auto"], "--dump does not go with --backend"),
    (["--ignore", "x"], "--dump does not go with --ignore"),
    (["--reason", ""], "reason must not be empty"),
])
def test_options_that_do_not_go_with_dump(capsys, options, message):
    from frametrace import cli

    assert cli.main(["attach", "1", "--dump", *options]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("option", [["--reason", "x"], ["--no-signal"]])
def test_dump_options_without_dump(capsys, option):
    from frametrace import cli

    assert cli.main(["attach", "1", *option]) == 2
    assert f"{option[0]} goes only with --dump" in capsys.readouterr().err


def test_process_gone(capsys):
    from frametrace import cli

    gone = subprocess.Popen(["true"])
    gone.wait()
    assert cli.main(["attach", str(gone.pid), "--dump"]) == 2
    assert f"no process with PID {gone.pid}" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, error, message", [
    ({"pid": 0}, ValueError, "pid must be positive"),
    ({"pid": "1"}, TypeError, "pid must be an int"),
    ({"pid": True}, TypeError, "pid must be an int"),
    ({"reason": 3}, TypeError, "reason must be a str"),
    ({"reason": " "}, ValueError, "reason must not be empty"),
    ({"timeout": 0}, ValueError, "timeout must be positive"),
    ({"use_signal": 1}, TypeError, "use_signal must be a bool"),
])
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        frametrace.remote.dump(**dict({"pid": 1}, **kwargs))
    with pytest.raises(ValueError, match="itself: call recorder.dump()"):
        frametrace.remote.dump(os.getpid())


# ---- other users, and adverts that are not what flight.py writes ------------------------


@pytest.mark.one_setup  # what runs as whom: whatever the target's clock or backend
@pytest.mark.skipif(os.geteuid() != 0, reason="runs a process as another user: needs root")
def test_root_runs_nothing_of_the_targets_user(targets, other_user):
    """Root asking for a dump from a process of a user who owns its
    interpreter runs nothing of it as root (UserPython's planted code)."""
    python = UserPython(other_user[1], other_user[2])
    try:
        target = targets("busy", python=python)
        proc = attach_dump(target.pid)
        assert 0 not in python.ran_as()
        assert proc.returncode == 0, proc.stderr
        (path,) = proc.stdout.splitlines()
        assert os.stat(path).st_uid == other_user[1]
        check_dump(path, "attach" if HAS_REMOTE_EXEC else "signal SIGUSR2")
        assert target.finish() == (0, [path], "")
    finally:
        python.remove()


ADVERT = """
import os, sys, time
fd = os.memfd_create("frametrace-flight-recorder-%d" % os.getpid())
if sys.argv[1] == "huge":  # sparse: no memory taken here
    os.write(fd, b'{"pid": %d, ' % os.getpid())
    os.ftruncate(fd, 8 << 30)
elif sys.argv[1] == "nested":
    os.write(fd, b"[" * 30000 + b"]" * 30000)
else:
    os.write(fd, sys.argv[1].replace("PID", str(os.getpid())).encode())
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.one_setup
@pytest.mark.parametrize("advert, why", [
    ("huge", "more than 65536 bytes"),
    ("nested", "not one flat JSON object"),
    ('{"pid": PID, "signal": -9, "signal_name": "SIGKILL", "dump_dir": "/tmp", '
     '"min_interval": 0, "max_dumps": 1}', "signal -9 is not a signal number"),
    ('{"pid": PID, "signal": 12, "signal_name": "SIGUSR2", "dump_dir": "dumps", '
     '"min_interval": 0, "max_dumps": 1}', "dump_dir is not an absolute path"),
])
def test_an_advert_is_bounded_and_checked(advert, why):
    """Any process can name a memfd as flight.py does: what it holds is read
    with bounds (an 8 GiB one, a deeply nested one) and checked before use.
    The attacher runs with 1 GiB of address space: a read without bounds
    fails there instead of taking the machine's memory."""
    target = subprocess.Popen([sys.executable, "-c", ADVERT, advert], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert target.stdout.readline() == "ready\n"
        limit = "" if UNDER_ASAN else "resource.setrlimit(resource.RLIMIT_AS, (1 << 30,) * 2); "
        proc = subprocess.run(
            [sys.executable, "-c", f"import resource, sys; {limit}"
             f"from frametrace.cli import main; sys.exit(main(sys.argv[1:]))",
             "attach", str(target.pid), "--dump"],
            capture_output=True, text=True, timeout=120, env=child_env())
        assert proc.returncode == 2, proc.stderr
        assert (f"frametrace attach: process {target.pid}: its flight recorder's advert "
                f"(/proc/{target.pid}/fd/") in proc.stderr
        assert f"is not valid: {why}; not used" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert target.poll() is None  # no signal sent
    finally:
        target.kill()
        target.wait()
