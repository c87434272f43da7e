"""frametrace run and the program's processes and threads: forked children
that come back through sys.exit, non-daemon threads still running when
the main module returns, pytest with the frametrace_tracer fixture."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import frametrace
from frametrace.loader import load
from support import child_env

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


def run(tmp_path, *args):
    """python -m frametrace run -o trace.json args..., in tmp_path: the
    CompletedProcess, once every process holding its output ended."""
    package_root = os.path.dirname(os.path.dirname(frametrace.__file__))
    env = child_env(PYTHONPATH=package_root, PYTHONFAULTHANDLER="1")
    return subprocess.run([sys.executable, "-m", "frametrace", "run", "-o", "trace.json",
                           *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)


def exit_code(path):
    """The exit status the command wrote in the trace's metadata."""
    with open(path) as fh:
        return json.load(fh)["otherData"]["frametrace"]["metadata"]["exit_code"]


def names(path):
    trace = load(str(path))
    return trace, [e.name.rsplit(".", 1)[-1] for e in trace.events]


# The child waits for the parent process to end (the pipe's write end
# closes with it): it comes back into the command after the parent wrote
# its trace, where it used to write over it.
FORKING = '''\
import os, sys

def before_fork(): pass
def parent_only(): pass
def child_only(): pass

before_fork()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    os.read(r, 1)
    child_only()
    sys.exit(3)
os.close(r)
print(pid, flush=True)
parent_only()
'''


@needs_fork
@pytest.mark.parametrize("fork_traces", [False, True], ids=["default", "fork-traces"])
def test_forked_child_never_writes_over_the_parent(tmp_path, fork_traces):
    (tmp_path / "forking.py").write_text(FORKING)
    proc = run(tmp_path, *(["--fork-traces"] if fork_traces else []), "forking.py")
    assert proc.returncode == 0, proc.stderr
    child = int(proc.stdout.split()[0])
    trace, called = names(tmp_path / "trace.json")
    assert trace.pid != child
    assert {"before_fork", "parent_only"} <= set(called) and "child_only" not in called
    # The parent's summary only, once.
    assert proc.stderr.count("written to") == 1 + fork_traces, proc.stderr
    child_file = tmp_path / f"trace.{child}.json"
    if not fork_traces:
        assert sorted(os.listdir(tmp_path)) == ["forking.py", "trace.json"]
        return
    # The child's own trace, from the fork on.
    assert f"written to {child_file}" in proc.stderr
    child_trace, child_called = names(child_file)
    assert child_trace.pid == child
    assert "child_only" in child_called
    assert "parent_only" not in child_called and "before_fork" not in child_called


POOL = '''\
import multiprocessing

def square(x):
    return x * x

def parent_only():
    pass

if __name__ == "__main__":
    with multiprocessing.get_context("fork").Pool(2) as pool:
        print(pool.map(square, range(10)))
    parent_only()
'''


@needs_fork
@pytest.mark.parametrize("fork_traces", [False, True], ids=["default", "fork-traces"])
def test_multiprocessing_fork_pool(tmp_path, fork_traces):
    (tmp_path / "pool.py").write_text(POOL)
    proc = run(tmp_path, *(["--fork-traces"] if fork_traces else []), "pool.py")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str([x * x for x in range(10)])
    _, called = names(tmp_path / "trace.json")
    assert "parent_only" in called and "Pool" in called
    # multiprocessing's children end with os._exit: never back in the
    # command, they write nothing even with --fork-traces.
    assert sorted(os.listdir(tmp_path)) == ["pool.py", "trace.json"]
    assert proc.stderr.count("written to") == 1


THREAD = '''\
import threading, time

def call(i):
    return i

def late():
    # Until the main module has returned and Python waits for threads.
    while threading.main_thread().is_alive():
        time.sleep(0.001)
    for i in range(20):
        call(i)

threading.Thread(target=late).start()
'''


def test_non_daemon_thread_traced_until_it_ends(tmp_path):
    (tmp_path / "late.py").write_text(THREAD)
    proc = run(tmp_path, "late.py")
    assert proc.returncode == 0, proc.stderr
    trace, called = names(tmp_path / "trace.json")
    assert called.count("call") == 20
    calls = [e for e in trace.events if e.name.endswith("call")]
    assert not any(e.open_at_stop for e in calls)


TESTS = '''\
def test_plain():
    assert 1 + 1 == 2

def test_traced(frametrace_tracer):
    assert frametrace_tracer.active
'''


def test_pytest_under_run_skips_the_fixture_without_warnings(tmp_path):
    (tmp_path / "test_small.py").write_text(TESTS)
    proc = run(tmp_path, "-m", "pytest", "-W", "error", "-rs", "-p", "no:cacheprovider",
               "test_small.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 skipped" in proc.stdout, proc.stdout
    assert "SKIPPED [1] test_small.py:4: frametrace run already traces this process" in proc.stdout
    assert "Warning" not in proc.stdout + proc.stderr
    assert (tmp_path / "trace.json").exists()


def test_fork_traces_does_not_go_with_steps(tmp_path):
    (tmp_path / "prog.py").write_text("pass\n")
    proc = run(tmp_path, "--fork-traces", "--steps", "2", "prog.py")
    assert proc.returncode == 2
    assert "--fork-traces does not go with --steps" in proc.stderr


def test_no_thread_left_no_wait_in_the_trace(tmp_path):
    (tmp_path / "plain.py").write_text("def f():\n    return len('ab')\nf()\n")
    proc = run(tmp_path, "plain.py")
    assert proc.returncode == 0, proc.stderr
    trace = load(str(tmp_path / "trace.json"))
    assert [(e.name, e.depth) for e in trace.events] == [("<module>", 0), ("f", 1), ("len", 2)]


# A child forked in the middle of --steps: steps of its own, then sys.exit
# once the parent has ended.
FORKING_STEPS = '''\
import os, sys, frametrace

def work():
    return sum(range(100))

r, w = os.pipe()
for i in range(4):
    work()
    if i == 1:
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.read(r, 1)
            for j in range(3):
                work()
                frametrace.step()
            sys.exit(0)
    frametrace.step()
os.close(r)
print(pid, flush=True)
'''


@needs_fork
def test_forked_child_under_steps_writes_nothing(tmp_path):
    (tmp_path / "steps.py").write_text(FORKING_STEPS)
    proc = run(tmp_path, "--steps", "3", "steps.py")
    assert proc.returncode == 0, proc.stderr
    # The parent's one cycle, reported once; nothing of the child's.
    assert proc.stderr.count("written to") == 1, proc.stderr
    assert proc.stderr.count("summary of cycle 0") == 1, proc.stderr
    assert sorted(os.listdir(tmp_path)) == ["steps.py", "trace.0.json"]
    assert load(str(tmp_path / "trace.0.json")).pid != int(proc.stdout.split()[0])


def start(tmp_path, *args, **popen):
    """python -m frametrace run -o trace.json args..., in tmp_path, still
    running: the Popen (its own session: killpg ends what it started)."""
    package_root = os.path.dirname(os.path.dirname(frametrace.__file__))
    env = child_env(PYTHONPATH=package_root, PYTHONFAULTHANDLER="1")
    return subprocess.Popen([sys.executable, "-m", "frametrace", "run", "-o", "trace.json", *args],
                            cwd=tmp_path, env=env, text=True, start_new_session=True, **popen)


def finish(proc, timeout=60):
    """proc's (status, stdout, stderr); a process still running after
    timeout seconds (a hang) fails the test, its process group killed."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still running after {timeout} s:\n{err}")
    return proc.returncode, out, err


# Says it is ready on stdout, then works until it is killed.
LOOPING = '''\
import sys, time
import frametrace

def work():
    time.sleep(0.01)

def started():
    print("ready", flush=True)

started()
while True:
    work()
    frametrace.step()
'''


@pytest.mark.parametrize("steps", [False, True], ids=["run", "steps"])
def test_sigterm_writes_the_trace_then_ends_as_sigterm_does(tmp_path, steps):
    (tmp_path / "loop.py").write_text(LOOPING)
    proc = start(tmp_path, *(["--steps", "1000000"] if steps else []), "loop.py",
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    status, _, err = finish(proc)
    assert status == -signal.SIGTERM, err  # 143 in a shell, as untraced
    assert "the program was ended by SIGTERM" in err, err
    path = tmp_path / ("trace.0.json" if steps else "trace.json")
    assert f"written to {path}" in err, err
    trace, called = names(path)
    assert "started" in called and called.count("work") >= 5
    if steps:  # the cycle under way, cut at the signal
        assert len(trace.steps) >= 5
    else:
        assert exit_code(path) == -signal.SIGTERM


# Says it is ready on stdout, then blocks in C for ever with the GIL
# released: a second lock of a mutex it holds, a wait no signal interrupts
# (as a sem_wait entered just after SIGTERM came), so Python never runs its
# SIGTERM handler.
BLOCKED_IN_C = '''\
import ctypes

def started():
    print("ready", flush=True)

def blocked():
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeros: PTHREAD_MUTEX_INITIALIZER
    libc.pthread_mutex_lock(mutex)
    started()
    libc.pthread_mutex_lock(mutex)

blocked()
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs glibc's pthread_mutex_t")
@pytest.mark.parametrize("steps", [False, True], ids=["run", "steps"])
def test_sigterm_to_a_main_thread_blocked_in_c_writes_the_trace(tmp_path, steps):
    (tmp_path / "blocked.py").write_text(BLOCKED_IN_C)
    proc = start(tmp_path, *(["--steps", "1000000"] if steps else []), "blocked.py",
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.2)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    status, _, err = finish(proc, timeout=30)
    assert status == -signal.SIGTERM, err
    assert time.monotonic() - sent < 15, err  # a second's grace, then the write
    assert "the program was ended by SIGTERM" in err, err
    path = tmp_path / ("trace.0.json" if steps else "trace.json")
    assert f"written to {path}" in err, err
    trace, called = names(path)
    assert "started" in called
    blocked = [e for e in trace.events if e.name == "blocked"]
    assert len(blocked) == 1 and blocked[0].open_at_stop  # cut at the signal
    if not steps:
        assert exit_code(path) == -signal.SIGTERM


# The main thread, or another one while the main thread works, ends the
# process with os._exit; a forked child's os._exit first, which must not
# write the parent's trace.
OS_EXIT = '''\
import os, sys, threading, time

def parent_only(): pass
def child_only(): pass
def work(): time.sleep(0.001)

pid = os.fork()
if pid == 0:
    child_only()
    os._exit(7)
_, status = os.waitpid(pid, 0)
print(pid, os.waitstatus_to_exitcode(status), flush=True)
parent_only()
if sys.argv[1] == "thread":
    threading.Thread(target=os._exit, args=(3,)).start()
    while True:
        work()
os._exit(3)
'''


@needs_fork
@pytest.mark.parametrize("where", ["main", "thread"])
def test_os_exit_writes_the_trace(tmp_path, where):
    (tmp_path / "ending.py").write_text(OS_EXIT)
    proc = run(tmp_path, "ending.py", where)
    assert proc.returncode == 3, proc.stderr
    child, child_status = map(int, proc.stdout.split())
    assert child_status == 7
    assert "the program called os._exit(3)" in proc.stderr
    assert proc.stderr.count("written to") == 1, proc.stderr
    trace, called = names(tmp_path / "trace.json")
    assert trace.pid != child and exit_code(tmp_path / "trace.json") == 3
    assert "parent_only" in called and "child_only" not in called
    assert sorted(os.listdir(tmp_path)) == ["ending.py", "trace.json"]
