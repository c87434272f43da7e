"""Ctrl-C landing anywhere inside start(), stop(), getEvents() and
write_chrome() while threads run: the KeyboardInterrupt reaches the
program (never reported as unraisable), the tracer is left started or not,
stopped once stop() returns, and neither threading's profile hook nor its
locks stay behind (the child exits)."""
import subprocess
import sys
import textwrap

import pytest

from support import child_env

# A tracer runs in the child: in every setup, before
# 3.12 too (every_setup: the hook under stress).
pytestmark = [pytest.mark.usefixtures("clock"), pytest.mark.every_setup]

ROUNDS = 1500

PROGRAM = """
    import os, random, signal, sys, threading, time
    import frametrace
    from frametrace.export import write_chrome
    from frametrace.testing import assert_valid_trace

    rounds, path = int(sys.argv[1]), sys.argv[2]
    armed = [False]

    def interrupt(signum, frame):
        if armed[0]:  # one interrupt a round, within it
            armed[0] = False
            raise KeyboardInterrupt

    signal.signal(signal.SIGALRM, interrupt)
    done = threading.Event()

    def worker():
        while not done.is_set():
            sum(range(50))
            time.sleep(0.0002)

    workers = [threading.Thread(target=worker, name=f"worker-{i}") for i in range(3)]
    for thread in workers:
        thread.start()

    def rounds_run(rounds):
        global interrupted, started
        for i in range(rounds):
            tracer = frametrace.Tracer(buffer_size=1 << 12)
            try:
                armed[0] = True
                signal.setitimer(signal.ITIMER_REAL, random.uniform(0.00002, 0.004))
                tracer.start()
                sum(range(100))
                tracer.stop()
                tracer.getEvents()
                write_chrome(tracer, path)
                armed[0] = False
            except KeyboardInterrupt:
                interrupted += 1
            armed[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            # Whatever the interrupt cut, the tracer is started or not, and
            # stop() leaves it stopped with nothing of it installed.
            was_started = tracer.start_ns is not None
            tracer.stop()
            assert not tracer.active, i
            assert sys.getprofile() is None, (i, sys.getprofile())
            assert threading.getprofile() is None, (i, threading.getprofile())
            if was_started:
                started += 1
                events = tracer.getEvents()
                assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
            else:
                assert tracer.stop_ns is None, i
            tracer.clear()

    random.seed(int(sys.argv[3]))
    interrupted = started = 0
    try:
        rounds_run(rounds)
    finally:
        done.set()  # an assertion's traceback, not a hang
        for thread in workers:
            thread.join()
    print("rounds", rounds, "interrupted", interrupted, "started", started, flush=True)
"""


def test_ctrl_c_anywhere_in_start_stop_and_the_writers(tmp_path):
    try:
        proc = subprocess.run(
            [sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(PROGRAM),
             str(ROUNDS), str(tmp_path / "t.json"), "20261205"],
            capture_output=True, text=True, timeout=180, env=child_env())
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the child hung (threading's lock left held?): {exc.stderr!r}"[-3000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr == "", proc.stderr[-3000:]
    words = proc.stdout.split()
    assert words[:2] == ["rounds", str(ROUNDS)], proc.stdout
    # The interrupts did land (most rounds are shorter than the timer).
    assert int(words[3]) >= 50, proc.stdout
