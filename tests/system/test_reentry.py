"""start() and stop() re-entered: Python code runs inside both (audit hooks,
threading's profile hook, finalizers, other threads while the GIL is
released) and may call start(), stop() or clear() again, or drop the
tracer.  The rules (README, "Guarantees and limits"): stop() or clear()
during start() raise RuntimeError; stop() during stop() does nothing (the
stop is latched); clear() during stop() and any start() during a stop()
raise RuntimeError; an unreachable active tracer is stopped by its
finalizer, before anything is cleared.  Each program runs in its own
interpreter: a crash fails the test, not the run."""
import os
import subprocess
import sys
import textwrap

import pytest

# A tracer runs here (in this process or a child): in every setup, before
# 3.12 too (every_setup: the hook under stress).
pytestmark = [pytest.mark.usefixtures("clock"), pytest.mark.every_setup]

# What each backend's start() and stop() raise audit events for:
# PyEval_SetProfile* ("sys.setprofile", once per start() and stop(); 3.10/3.11 one hook
# object per thread, 3.12+ one shared) or sys.monitoring's
# register_callback.
PRELUDE = """
import gc, sys, threading, weakref, frametrace
AUDITED = ("sys.setprofile", "sys.monitoring.register_callback")
def f():
    return abs(-1)
def check_next_tracer_works():
    assert sys.getprofile() is None or sys.version_info < (3, 12), sys.getprofile()
    with frametrace.Tracer() as t2:
        f()
    assert any(e.name == "abs" for e in t2.getEvents())
"""


def run(program):
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c",
                           PRELUDE + textwrap.dedent(program)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "survived" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    return proc.stdout


def test_audit_hook_calling_stop_during_start():
    """Was: the stop freed what start() then installed (a tool id held by
    callbacks of a freed tracer, use-after-free, on the monitoring
    backend; a stopped tracer out of start() on setprofile)."""
    run("""
        release = threading.Event()
        others = [threading.Thread(target=release.wait) for _ in range(3)]
        for t in others:
            t.start()
        raised = []
        box = []
        def audit(event, args):
            if event in AUDITED and box:
                try:
                    box.pop().stop()
                except RuntimeError as exc:
                    raised.append(str(exc))
        sys.addaudithook(audit)
        tr = frametrace.Tracer()
        box.append(tr)
        tr.start()
        assert raised and "stop() called while start() is running" in raised[0], raised
        assert tr.active
        f()
        tr.stop()
        assert any(e.name == "abs" for e in tr.getEvents())
        del tr
        gc.collect()
        for _ in range(50):
            f()
        release.set()
        for t in others:
            t.join()
        check_next_tracer_works()
        print("survived")
    """)


def test_audit_hook_calling_start_during_start():
    """The same tracer's start() or another's, from code start() runs."""
    run("""
        raised = []
        box = []
        def audit(event, args):
            if event in AUDITED and box:
                tracer = box.pop()
                try:
                    tracer.start()
                except RuntimeError as exc:
                    raised.append(str(exc))
        sys.addaudithook(audit)
        for other in (False, True):
            tr = frametrace.Tracer()
            second = frametrace.Tracer() if other else tr
            box.append(second)
            tr.start()
            assert not second.active or second is tr
            f()
            tr.stop()
            assert any(e.name == "abs" for e in tr.getEvents())
        assert len(raised) == 2, raised
        check_next_tracer_works()
        print("survived")
    """)


def test_audit_hook_calling_stop_clear_start_during_stop():
    """Was: clear() freed the records stop() was finishing, and a tracer
    started there lost its hook to the removal still going on."""
    out = run("""
        raised = []
        box = []
        def audit(event, args):
            if event in AUDITED and box:
                tr, t2 = box.pop()
                tr.stop()            # latched: nothing to do
                for call in (tr.clear, t2.start, tr.start):
                    try:
                        call()
                    except RuntimeError as exc:
                        raised.append(str(exc))
        sys.addaudithook(audit)
        tr = frametrace.Tracer()
        t2 = frametrace.Tracer()
        tr.start()
        box.append((tr, t2))
        f()
        tr.stop()
        assert not t2.active
        assert any(e.name == "abs" for e in tr.getEvents())
        print("\\n".join(raised))
        del tr
        check_next_tracer_works()
        # t2 was refused, not spoiled: it starts now.
        with t2:
            f()
        assert any(e.name == "abs" for e in t2.getEvents())
        print("survived")
    """)
    assert "clear() called while stop() is running" in out
    assert "start() called while another frametrace Tracer is stopping" in out
    assert "already run and stopped" in out


def test_another_thread_calling_stop_while_start_lets_it_run():
    """Another thread runs while start() waits in Python code (here an
    audit hook that waits for it): its stop() is refused, and start()
    finishes as if nothing happened."""
    run("""
        go = threading.Event()
        done = threading.Event()
        result = []
        def stopper():
            go.wait()
            try:
                tr.stop()
                result.append("stopped")
            except RuntimeError as exc:
                result.append(str(exc))
            done.set()
        tr = frametrace.Tracer()
        thread = threading.Thread(target=stopper)
        thread.start()
        def audit(event, args):
            if event in AUDITED and not go.is_set():
                go.set()
                done.wait()   # the GIL is released: stopper() runs
        sys.addaudithook(audit)
        tr.start()
        thread.join()
        assert "stop() called while start() is running" in result[0], result
        assert tr.active
        f()
        tr.stop()
        assert any(e.name == "abs" for e in tr.getEvents())
        del tr
        gc.collect()
        check_next_tracer_works()
        print("survived")
    """)


def test_threading_profile_finalizer_during_stop():
    """stop() gives threading its profile hook back, or drops the saved
    one when someone replaced ours meanwhile: its finalizer runs inside
    stop()."""
    out = run("""
        raised = []
        class Profile:
            def __call__(self, frame, event, arg):
                pass
            def __del__(self):
                tr.stop()
                for call in (tr.clear, frametrace.Tracer().start):
                    try:
                        call()
                    except RuntimeError as exc:
                        raised.append(str(exc))
        threading.setprofile(Profile())
        tr = frametrace.Tracer()
        tr.start()
        threading.setprofile(None)   # replaces frametrace's: the saved one goes at stop()
        f()
        tr.stop()
        assert threading.getprofile() is None
        assert any(e.name == "abs" for e in tr.getEvents())
        print("\\n".join(raised))
        check_next_tracer_works()
        print("survived")
    """)
    assert "clear() called while stop() is running" in out
    assert "start() called while another frametrace Tracer is stopping" in out


def test_thread_started_by_an_audit_hook_during_start_is_traced():
    """A thread that starts while start() installs the hooks registers
    itself (threading's bootstrap) from its own thread meanwhile."""
    run("""
        started = []
        def work():
            f()
        def audit(event, args):
            if event in AUDITED and not started and threading.current_thread() is threading.main_thread():
                t = threading.Thread(target=work, name="late")
                started.append(t)
                t.start()
                t.join()
        sys.addaudithook(audit)
        with frametrace.Tracer() as tr:
            f()
        events = tr.getEvents()
        assert any(e.name == "abs" for e in events)
        # Started before the caller's hook was in place (3.12+: before any
        # thread's): traced only where the hook reached it in time.
        assert {t.name for t in tr.threads if t.thread_id == started[0].ident} <= {"late", None}
        check_next_tracer_works()
        print("survived")
    """)


def test_unreachable_active_tracer_stops_before_its_cycle_is_cleared():
    """Was: the collector cleared the cycle first and stop() then gave
    threading back a profile hook whose object was already cleared."""
    run("""
        class Holder:
            def hook(self, frame, event, arg):
                self.seen.append(event)
        h = Holder()
        h.seen = []
        threading.setprofile(h.hook)
        tr = frametrace.Tracer()
        h.tracer = tr   # a cycle: tr -> its saved threading hook -> h -> tr
        tr.start()
        del h, tr
        gc.collect()
        restored = threading.getprofile()
        assert restored is not None and vars(restored.__self__).keys() == {"seen", "tracer"}
        t = threading.Thread(target=f)
        t.start()
        t.join()
        assert "call" in restored.__self__.seen
        assert not restored.__self__.tracer.active
        threading.setprofile(None)
        check_next_tracer_works()
        print("survived")
    """)


def test_last_reference_dropped_while_active_stops_in_the_finalizer():
    """The stop of a tracer freed while active runs Python code (audit
    hooks, threading): it runs in the finalizer, where the tracer is still
    whole: a weak reference still reaches it, and stop() and clear() from
    there are a no-op and a RuntimeError."""
    out = run("""
        raised = []
        seen = []
        def audit(event, args):
            if event in AUDITED and refs:
                tracer = refs[0]()
                seen.append(tracer is not None)
                if tracer is not None:
                    tracer.stop()
                    try:
                        tracer.clear()
                    except RuntimeError as exc:
                        raised.append(str(exc))
        refs = []
        sys.addaudithook(audit)
        tr = frametrace.Tracer()
        tr.start()
        refs.append(weakref.ref(tr))
        del tr
        refs.clear()
        assert seen and all(seen), seen
        print("\\n".join(raised))
        check_next_tracer_works()
        print("survived")
    """)
    assert "clear() called while stop() is running" in out
