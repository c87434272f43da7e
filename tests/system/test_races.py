"""Python code that runs where the tracer changes state (weakref and GC
callbacks, properties, finalizers) and lets other threads in.  Each program
runs in its own interpreter: a crash fails the test, not the run."""
import subprocess
import sys
import textwrap

import pytest

# A tracer runs here (in this process or a child): in every setup, before
# 3.12 too (every_setup: the hook under stress).
pytestmark = [pytest.mark.usefixtures("clock"), pytest.mark.every_setup]


def run(program):
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", textwrap.dedent(program)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "survived" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    return proc.stdout


def test_weakref_callback_while_an_active_tracer_is_freed():
    run("""
        import math, sys, weakref, frametrace
        def callback(ref):
            math.gcd(12, 18)    # a C function seen for the first time
        t = frametrace.Tracer()
        t.start()
        ref = weakref.ref(t, callback)
        del t
        assert sys.getprofile() is None
        print("survived")
    """)


def test_getevents_does_not_collect_while_building():
    out = run("""
        import gc, frametrace
        with frametrace.trace() as t:
            for i in range(3000):
                abs(i)
        phases = []
        gc.callbacks.append(lambda phase, info: phases.append(phase))
        gc.set_threshold(1)
        events = t.getEvents()
        during = len(phases)
        gc.set_threshold(700)
        print("survived", len(events), during)
    """)
    assert out.split()[2] == "0"


def test_thread_starting_while_start_reads_thread_names():
    run("""
        import threading, time, frametrace
        gate = threading.Event()
        class SlowName(threading.Thread):
            @property
            def name(self):
                if gate.is_set() and threading.current_thread() is threading.main_thread():
                    time.sleep(0.05)   # start() is reading names: let others run
                return "slow"
            @name.setter
            def name(self, value):
                pass
        done = threading.Event()
        slow = SlowName(target=done.wait)
        slow.start()
        def spawner():
            gate.wait()
            time.sleep(0.01)
            t = threading.Thread(target=sum, args=([1, 2],))
            t.start()
            t.join()
        sp = threading.Thread(target=spawner)
        sp.start()
        for size in (1, 4, 1 << 10):
            gate.set()
            with frametrace.Tracer(buffer_size=size) as tr:
                gate.clear()
            tr.getEvents()
        done.set(); slow.join(); sp.join()
        print("survived")
    """)


def test_threads_registering_while_collections_release_the_gil():
    run("""
        import gc, time, threading, frametrace
        gc.callbacks.append(lambda phase, info: time.sleep(0))
        def deep(n):
            return deep(n - 1) if n else time.sleep(0.005)
        for _ in range(10):
            gc.set_threshold(1, 1, 1)
            with frametrace.Tracer(buffer_size=256) as tr:
                threads = [threading.Thread(target=deep, args=(30,)) for _ in range(24)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            gc.set_threshold(700, 10, 10)
            events = tr.getEvents()
            assert len({e.thread_id for e in events}) >= 2
        print("survived")
    """)


def test_clear_from_another_thread_during_getevents():
    run("""
        import threading, frametrace
        with frametrace.trace() as t:
            for i in range(20000):
                abs(i)
        stop = threading.Event()
        def clearer():
            stop.wait()
            t.clear()
        th = threading.Thread(target=clearer)
        th.start()
        events = t.getEvents()
        stop.set()
        th.join()
        try:
            t.getEvents()
        except RuntimeError as exc:
            assert "clear" in str(exc)
        print("survived", len(events))
    """)
