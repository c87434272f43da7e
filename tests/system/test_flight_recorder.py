"""frametrace.flight_recorder: a tracer for the whole
job, and a dump of the last steps when a step is slow, hangs, an exception
leaves the block or a thread, the signal comes, or the program asks.
Every dump is loaded back and checked: the steps it covers, its reason,
nothing ending after its snapshot time."""
import cProfile
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import TESTS_DIR, child_env

pytestmark = pytest.mark.usefixtures("clock")


def work(i, slow_at, slow_s, step_s=0.005):
    time.sleep(slow_s if i == slow_at else step_s)
    return sum(range(50))


def loaded(path):
    trace = frametrace.load(path)
    with open(path) as f:
        info = json.load(f)["otherData"]["frametrace"]["metadata"]["dump"]
    assert_valid_trace(trace.events, trace.tracer_start_ns, trace.tracer_stop_ns)
    assert trace.tracer_stop_ns == info["snapshot_ns"]
    assert trace.tracer_start_ns == info["window_start_ns"]
    assert max(ev.end_ns for ev in trace.events) <= info["snapshot_ns"]
    return trace, info


def works(trace):
    return [ev for ev in trace.events if ev.name.split(".")[-1] == "work"]


def test_one_slow_step_gives_one_dump_holding_it(tmp_path):
    with frametrace.flight_recorder(tmp_path, watchdog=False, min_interval=0, steps=3) as rec:
        for i in range(20):
            # 20 ms steps: the dump's writer holding the GIL (slow under
            # ASan) must not make a 5 ms step after it three times slower;
            # 0.5 s: past the bound of a busy machine's 20 ms steps.
            work(i, 12, 0.5, step_s=0.02)
            frametrace.step()
    assert rec.errors == []
    (path,) = rec.dumps
    assert os.path.basename(path).startswith(f"frametrace-dump-{os.getpid()}-1-slow-step-12")
    trace, info = loaded(path)
    assert info["reason"] == "slow step 12" and info["steps"] == [10, 12]
    assert [s.step for s in trace.steps] == [10, 11, 12]
    # Steps 10-12 whole: the slow one is the last, the dump cut after it.
    assert [(ev.open_at_start, ev.open_at_stop) for ev in works(trace)] == [(False, False)] * 3
    assert works(trace)[-1].end_ns - works(trace)[-1].start_ns >= 500_000_000


def test_a_hung_step_is_dumped_while_it_runs_and_again_when_it_ends(tmp_path):
    # min_interval: the second dump is not held back by the first.
    with frametrace.flight_recorder(tmp_path, slow_ms=100, hang_ms=300, min_interval=60) as rec:
        for i in range(8):
            work(i, 6, 1.0)
            if i == 6:
                woke = time.monotonic_ns()
                during = list(rec.dumps)
            frametrace.step()
    assert rec.errors == []
    first, second = rec.dumps
    assert during == [first]  # written during the sleep
    trace, info = loaded(first)
    assert info["reason"] == "hung step 6" and "after_hang" not in info
    assert info["snapshot_ns"] < woke  # taken during the sleep
    hung = works(trace)[-1]
    assert hung.open_at_stop and hung.end_ns == info["snapshot_ns"]
    sleeping = [ev for ev in trace.events if ev.name == "time.sleep" and ev.parent is not None
                and trace.events[ev.parent] is hung]
    assert len(sleeping) == 1 and sleeping[0].open_at_stop
    # Then the step ended: dumped whole, naming the dump of its hang.
    trace, info = loaded(second)
    assert info["reason"] == "slow step 6" and info["after_hang"] == first
    assert info["steps"] == [4, 6] and info["snapshot_ns"] > woke
    ended = works(trace)[-1]
    assert not ended.open_at_stop and ended.end_ns - ended.start_ns >= 1_000_000_000


def test_a_slow_step_below_the_hang_bound_is_dumped_once_when_it_ends(tmp_path):
    """The watchdog on (the default): a step past the slow-step bound but
    not the hang bound is not dumped while it runs, but whole, once."""
    with frametrace.flight_recorder(tmp_path, slow_ms=100, min_interval=0) as rec:
        for i in range(8):
            work(i, 6, 0.4)
            frametrace.step()
    assert rec.errors == []
    (path,) = rec.dumps
    trace, info = loaded(path)
    assert info["reason"] == "slow step 6" and "after_hang" not in info
    assert [(ev.open_at_start, ev.open_at_stop) for ev in works(trace)] == [(False, False)] * 3


def test_exception_out_of_the_block_is_dumped(tmp_path):
    rec = frametrace.flight_recorder(tmp_path, watchdog=False, signal=None)
    with pytest.raises(ZeroDivisionError):
        with rec:
            for i in range(5):
                work(i, -1, 0)
                frametrace.step()
            1 / 0
    (path,) = rec.dumps
    trace, info = loaded(path)
    assert info["reason"] == "exception ZeroDivisionError"
    assert info["steps"] == [3, 5]


# The hook chains to pytest's, which reports the thread's exception.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_exception_in_a_thread_is_dumped(tmp_path):
    def failing():
        work(0, -1, 0)
        raise RuntimeError("in a worker")

    with frametrace.flight_recorder(tmp_path, watchdog=False, signal=None) as rec:
        frametrace.step()
        worker = threading.Thread(target=failing, name="worker")
        worker.start()
        worker.join()
        frametrace.step()
    (path,) = rec.dumps
    trace, info = loaded(path)
    assert info["reason"] == "exception RuntimeError in worker"
    assert [ev.thread_id for ev in works(trace)] == [worker.ident]


@pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="no SIGUSR2 here")
def test_signal_dumps_while_the_main_thread_waits_in_c(tmp_path):
    with frametrace.flight_recorder(tmp_path, watchdog=False) as rec:
        frametrace.step()
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR2)).start()
        time.sleep(1.0)  # in C, the GIL released: no Python handler runs meanwhile
        woke = time.monotonic_ns()
        frametrace.step()
    (path,) = rec.dumps
    trace, info = loaded(path)
    assert info["reason"] == "signal SIGUSR2"
    assert info["snapshot_ns"] < woke - 500_000_000  # well before the sleep ended
    sleeps = [ev for ev in trace.events if ev.name == "time.sleep"]
    assert sleeps[-1].open_at_stop


def test_signal_handler_already_there_still_runs(tmp_path):
    seen = []

    def old_handler(signum, frame):
        seen.append(signum)

    old = signal.signal(signal.SIGUSR2, old_handler)
    try:
        with frametrace.flight_recorder(tmp_path, watchdog=False) as rec:
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(0.3)
        assert seen == [signal.SIGUSR2]
        assert len(rec.dumps) == 1
        assert signal.getsignal(signal.SIGUSR2) is old_handler
    finally:
        signal.signal(signal.SIGUSR2, old)


@pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="no SIGUSR2 here")
def test_a_handler_installed_later_gets_the_signal_too_and_stays(tmp_path):
    seen = []

    def later(signum, frame):
        seen.append(signum)

    try:
        with frametrace.flight_recorder(tmp_path, watchdog=False, min_interval=0) as rec:
            signal.signal(signal.SIGUSR2, later)  # replaces the recorder's C handler
            time.sleep(0.3)  # the watchdog chains it again, behind this one
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(0.3)
        assert seen == [signal.SIGUSR2]
        assert len(rec.dumps) == 1
        assert signal.getsignal(signal.SIGUSR2) is later
        os.kill(os.getpid(), signal.SIGUSR2)  # theirs alone now
        time.sleep(0.1)
        assert seen == [signal.SIGUSR2] * 2
    finally:
        signal.signal(signal.SIGUSR2, signal.SIG_DFL)


@pytest.mark.skipif(not hasattr(signal, "SIGRTMIN"), reason="no real-time signals here")
def test_a_real_time_signal_without_a_name(tmp_path):
    number = signal.SIGRTMIN + 2  # not in signal.Signals
    with frametrace.flight_recorder(tmp_path, watchdog=False, signal=number) as rec:
        os.kill(os.getpid(), number)
        time.sleep(0.3)
    (path,) = rec.dumps
    assert loaded(path)[1]["reason"] == f"signal {number}"
    assert rec.errors == []


def test_a_refused_start_leaves_nothing_behind(tmp_path):
    hook = threading.excepthook
    profiler = cProfile.Profile()  # refused on either backend
    profiler.enable()
    try:
        with pytest.raises(frametrace.ConflictError, match="another profiler"):
            frametrace.flight_recorder(tmp_path).__enter__()
    finally:
        profiler.disable()
    assert threading.excepthook is hook
    assert [t.name for t in threading.enumerate() if t.name.startswith("frametrace-")] == []
    with frametrace.flight_recorder(tmp_path, watchdog=False, min_interval=0) as rec:
        os.kill(os.getpid(), signal.SIGUSR2)  # caught again: the relay was ended
        time.sleep(0.3)
    assert len(rec.dumps) == 1


@pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="no SIGUSR2 here")
def test_a_thread_that_fails_to_start_leaves_nothing_behind(tmp_path, monkeypatch):
    """A recorder thread's start() raising (no thread left to start) ends
    the signal's relay: the action found is back, at the C level too."""
    hook = threading.excepthook
    found = signal.getsignal(signal.SIGUSR2)
    started = []

    def start(thread):
        if thread.name.startswith("frametrace-") and started:
            raise RuntimeError("can't start new thread")
        started.append(thread)
        real_start(thread)

    real_start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(RuntimeError, match="can't start new thread"):
        frametrace.flight_recorder(tmp_path).__enter__()
    monkeypatch.undo()
    assert threading.excepthook is hook
    assert signal.getsignal(signal.SIGUSR2) is found
    assert frametrace._tracer._unrelay_signal(signal.SIGUSR2) is False  # no relay there
    assert [t.name for t in threading.enumerate() if t.name.startswith("frametrace-")] == []
    with frametrace.flight_recorder(tmp_path, watchdog=False, min_interval=0) as rec:
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.3)
    assert len(rec.dumps) == 1


@pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="no SIGUSR2 here")
def test_a_failed_relay_again_keeps_the_watchdog_going(tmp_path, monkeypatch):
    """The watchdog's periodic relay raising OSError: kept in errors (once),
    the watchdog goes on and still dumps a hung step."""
    def refused(signum, fd):
        raise OSError(22, "Invalid argument")

    with frametrace.flight_recorder(tmp_path, hang_ms=300, min_interval=0) as rec:
        monkeypatch.setattr(frametrace._tracer, "_relay_signal", refused)
        time.sleep(0.6)  # many periods, one hang past 300 ms
        watchdogs = [t for t in threading.enumerate() if t.name == "frametrace-watchdog"]
        monkeypatch.undo()
        assert [t.is_alive() for t in watchdogs] == [True]
    assert len(rec.errors) == 1 and isinstance(rec.errors[0], OSError)
    assert "relaying SIGUSR2 again failed" in str(rec.errors[0])
    assert [loaded(path)[1]["reason"] for path in rec.dumps] == ["hung step 0"]


CHAINING_HANDLER = r"""
#include <signal.h>
#include <string.h>

static struct sigaction saved;  /* the action this replaced: the recorder's */

static void
chaining(int signum, siginfo_t *info, void *context)
{
    if (saved.sa_flags & SA_SIGINFO) {
        if (saved.sa_sigaction != NULL) {
            saved.sa_sigaction(signum, info, context);
        }
    }
    else if (saved.sa_handler != SIG_DFL && saved.sa_handler != SIG_IGN) {
        saved.sa_handler(signum);
    }
}

int
install_chaining(int signum)
{
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_sigaction = chaining;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    return sigaction(signum, &action, &saved);
}
"""

CHAINING_CHILD = r"""
import ctypes, os, signal, sys, time
import frametrace

lib = ctypes.CDLL(sys.argv[1])
with frametrace.flight_recorder(sys.argv[2], watchdog=False, min_interval=0) as rec:
    assert lib.install_chaining(signal.SIGUSR2) == 0  # saves the recorder's relay
    time.sleep(0.3)  # the watchdog relays again, behind the chaining handler
    os.kill(os.getpid(), signal.SIGUSR2)
    deadline = time.monotonic() + 20
    while not rec.dumps and time.monotonic() < deadline:
        time.sleep(0.02)
print(len(rec.dumps), rec.errors, flush=True)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="no SIGUSR2 here")
def test_a_later_c_handler_chaining_to_the_relay_does_not_recurse(tmp_path):
    """A C handler installed after the recorder started that saved the
    relay and chains to it: the watchdog relays again behind it, and the
    signal goes relay, theirs, relay once more, where it stops (no stack
    overflow); the dump comes."""
    import shutil
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the chaining handler")
    (tmp_path / "chaining.c").write_text(CHAINING_HANDLER)
    target = tmp_path / "libchaining.so"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LD_PRELOAD", "ASAN_", "UBSAN_", "LSAN_"))}
    subprocess.run([cc, "-O1", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                    str(tmp_path / "chaining.c"), "-o", str(target)], check=True, env=env)
    proc = subprocess.run([sys.executable, "-c", CHAINING_CHILD, str(target),
                           str(tmp_path / "dumps")],
                          capture_output=True, text=True, timeout=60,
                          env=child_env(PYTHONPATH=TESTS_DIR))
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert proc.stdout == "1 []\n", proc.stderr
    assert len(os.listdir(tmp_path / "dumps")) == 1


def test_requested_dumps_and_the_limit(tmp_path):
    with frametrace.flight_recorder(tmp_path, max_dumps=2, watchdog=False, signal=None) as rec:
        first = rec.dump("first look")
        frametrace.step()
        second = rec.dump()
        assert rec.dump("third") is None
    assert rec.dumps == [first, second]
    assert [loaded(p)[1]["reason"] for p in rec.dumps] == ["first look", "requested"]


def test_pftrace_dump(tmp_path):
    from pftrace import decode

    with frametrace.flight_recorder(tmp_path, format="pftrace", watchdog=False,
                                    signal=None) as rec:
        work(0, -1, 0)
        rec.dump("look")
    (path,) = rec.dumps
    assert path.endswith(".pftrace")
    slices = [s.name for ss in decode(path).slices.values() for s in ss]
    assert [n for n in slices if n.split(".")[-1] == "work"] == ["work"]


def test_bad_options(tmp_path):
    with pytest.raises(TypeError, match="steps must be an int"):
        frametrace.flight_recorder(tmp_path, steps=1.5)
    with pytest.raises(ValueError, match="slow_factor must be > 1"):
        frametrace.flight_recorder(tmp_path, slow_factor=0.5)
    with pytest.raises(ValueError, match="no step would be slow"):
        frametrace.flight_recorder(tmp_path, slow_factor=None)
    with pytest.raises(ValueError, match="slow_margin_ms must be >= 0, got -1"):
        frametrace.flight_recorder(tmp_path, slow_margin_ms=-1)
    with pytest.raises(TypeError, match="slow_margin_ms must be a number, not NoneType"):
        frametrace.flight_recorder(tmp_path, slow_margin_ms=None)
    with pytest.raises(ValueError, match="hang_ms must be > 0, got 0"):
        frametrace.flight_recorder(tmp_path, hang_ms=0)
    with pytest.raises(ValueError, match="hang_ms must be > 0, got nan"):
        frametrace.flight_recorder(tmp_path, hang_ms=float("nan"))
    with pytest.raises(TypeError, match="hang_ms must be a number, not str"):
        frametrace.flight_recorder(tmp_path, hang_ms="1")
    with pytest.raises(ValueError, match="format must be"):
        frametrace.flight_recorder(tmp_path, format="csv")
    with pytest.raises(TypeError, match="signal must be a signal number"):
        frametrace.flight_recorder(tmp_path, signal="USR2")
    with frametrace.flight_recorder(tmp_path, watchdog=False, signal=None):
        with pytest.raises(RuntimeError, match="running already"):
            with frametrace.flight_recorder(tmp_path, watchdog=False, signal=None):
                pass


def test_step_reaches_a_session_first_then_the_recorder_again(tmp_path):
    """frametrace.step() steps the session that runs inside a recorder (not
    the recorder), and the recorder once the session ended."""
    with frametrace.flight_recorder(tmp_path, watchdog=False, signal=None) as rec:
        frametrace.step()
        assert rec.step_number == 1
        with frametrace.profile(python_steps=0) as prof:  # no tracer: the recorder's runs
            frametrace.step()
            frametrace.step()
        assert (prof.step_num, rec.step_number) == (2, 1)
        frametrace.step()
        assert rec.step_number == 2
    frametrace.step()  # nothing runs: nothing happens
    assert rec.step_number == 2


def wait_for(what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.skipif(not hasattr(signal, "SIGUSR2"), reason="no SIGUSR2 here")
@pytest.mark.parametrize("order", ["overlap", "inside", "outside"])
def test_beside_asyncio_s_signal_handling(tmp_path, order):
    """A real asyncio server with loop.add_signal_handler(SIGTERM), the
    recorder begun before or after it, or around the loop: the signal's
    dump comes while the loop waits in C, asyncio's SIGTERM handler runs
    once the recorder has ended, and the recorder leaves the wakeup fd and
    the handler as it found them."""
    dumps = tmp_path / "dumps"
    proc = subprocess.Popen(
        [sys.executable, os.path.join(TESTS_DIR, "targets", "asyncio_flight.py"), order,
         str(dumps)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=child_env(PYTHONPATH=TESTS_DIR))
    try:
        ready = proc.stdout.readline().split()
        assert ready[:1] == ["ready"], proc.stderr.read()
        written = lambda: [n for n in os.listdir(dumps) if not n.startswith(".")]  # noqa: E731
        os.kill(proc.pid, signal.SIGUSR2)
        wait_for(lambda: len(written()) == 1)
        if order != "outside":
            with socket.create_connection(("127.0.0.1", int(ready[1])), timeout=20) as conn:
                conn.sendall(b"end\n")
                assert conn.makefile().readline() == "ended\n"
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.stdout.readline() == "sigterm\n"
        if order == "outside":
            # The loop closed (asyncio set the wakeup fd to -1): the recorder
            # goes on catching its signal.
            assert proc.stdout.readline() == "loop closed\n"
            os.kill(proc.pid, signal.SIGUSR2)
            wait_for(lambda: len(written()) == 2)
            proc.stdin.write("\n")
            proc.stdin.flush()
        proc.stdin.close()
        hung = threading.Timer(60, proc.kill)  # what readline() already buffered stays
        hung.start()
        out, err = proc.stdout.read(), proc.stderr.read()
        hung.cancel()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
    assert proc.returncode == 0, err
    lines = out.split()
    assert lines[0] == "restored", out + err
    paths = lines[1:]
    assert len(paths) == (2 if order == "outside" else 1)
    for path in paths:
        trace, info = loaded(path)
        assert info["reason"] == "signal SIGUSR2"
