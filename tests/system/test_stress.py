"""Tracing under stress: tracers started and stopped while threads run,
exceptions and signals unwinding traced frames, sys.settrace alongside,
the interpreter exiting mid-trace, tracers dropped while active, code
objects that die while traced, and 100 million events through one ring."""
import array
import collections
import functools
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import types
import weakref

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import (PROC_STATUS, TESTS_DIR, child_env, find, needs_plain_allocator, only, qual, run_json,
                     subtree, tracing_installed)
from targets import calls

# A tracer runs here (in this process or a child): in every setup, before
# 3.12 too (every_setup: the hook under stress).
pytestmark = [pytest.mark.usefixtures("clock"), pytest.mark.every_setup]

PY = "py"
C = "c"
TIMEOUT = 60  # against hangs only: generous for slow CI machines
SMALL = 1 << 16  # rings for tests that do not need 16 MiB per thread
one_clock = pytest.mark.parametrize("clock", ["cycles"], indirect=True)
# Once per backend (sys.monitoring on 3.12+), for the expensive tests.
each_backend = pytest.mark.parametrize(
    "clock", ["cycles"] + (["monitoring"] if sys.version_info >= (3, 12) else []), indirect=True)


def complete(ev):
    return not ev.open_at_start and not ev.open_at_stop


# ---- 1. tracers started and stopped while 8 threads run traced code ------

def unit():  # the known tree every worker runs in a loop
    calls.branch(2)
    len("ab")


UNIT_TREE = ("unit", PY, [
    ("branch", PY, [("leaf", PY, []), ("leaf", PY, [])]),
    ("len", C, []),
])


def trees_of(events, name):
    """(name, kind, [children...]) of every complete event with this name."""
    kids = collections.defaultdict(list)
    for i, ev in enumerate(events):
        kids[ev.parent].append(i)

    def build(i):
        return (events[i].name, events[i].kind, [build(k) for k in kids[i]])

    return [build(i) for i, ev in enumerate(events) if ev.name == name and complete(ev)]


@pytest.fixture
def fast_gil_switching():
    # Ten threads share the GIL: hand it over often, so that the
    # controller gets its turns and the test stays short.
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    yield
    sys.setswitchinterval(old)


@each_backend
def test_200_tracers_started_and_stopped_while_8_threads_run(fast_gil_switching):
    stop = threading.Event()
    errors = []
    loops = [0] * 8

    def worker(k):
        try:
            while not stop.is_set():
                unit()
                loops[k] += 1
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    traces = []

    def controller():
        try:
            for i in range(200):
                tracer = frametrace.Tracer(buffer_size=256 if i % 2 else 1024)
                tracer.start()
                time.sleep(0.0005 * (i % 3))  # let the workers in, or not
                tracer.stop()
                events = tracer.getEvents()
                # Checked once the workers are done: in Python, under
                # contention, the checks would take most of the time.
                times = types.SimpleNamespace(start_ns=tracer.start_ns, stop_ns=tracer.stop_ns)
                traces.append((times, events, tracer.stats.dropped))
                tracer.clear()
                with pytest.raises(RuntimeError, match="clear"):
                    tracer.getEvents()
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(8)]
    for t in workers:
        t.start()
    ctl = threading.Thread(target=controller, daemon=True)
    ctl.start()
    ctl.join(TIMEOUT)
    stop.set()
    for t in workers:
        t.join(TIMEOUT)
    assert not ctl.is_alive(), "controller deadlocked"
    assert not [t for t in workers if t.is_alive()], "worker deadlocked"
    assert not errors, errors
    assert len(traces) == 200
    assert all(n > 0 for n in loops)  # the workers kept running throughout
    assert not tracing_installed() and threading.getprofile() is None

    seen, ntrees = set(), 0
    for times, events, _ in traces:
        assert_valid_trace(events, times.start_ns, times.stop_ns)
        trees = trees_of(events, "unit")
        assert all(tree == UNIT_TREE for tree in trees), trees[:3]
        ntrees += len(trees)
        seen |= {e.thread_id for e in events if e.name == "unit"}
    # Every worker was traced, and complete unit() trees were seen exactly.
    assert seen >= {t.ident for t in workers}
    assert ntrees > 200
    assert any(dropped > 0 for _, _, dropped in traces)  # small rings wrapped


# ---- 2. KeyboardInterrupt and SystemExit unwinding traced frames ------------

def kb_outer(how):
    return kb_middle(how)


def kb_middle(how):
    return kb_inner(how)


def kb_inner(how):
    if how == "raise":
        raise KeyboardInterrupt
    if how == "exit":
        sys.exit(5)
    if how == "raise_signal":
        signal.raise_signal(signal.SIGINT)
    raise AssertionError("the signal did not interrupt")


@pytest.fixture
def default_sigint():
    """Python's own SIGINT handler (KeyboardInterrupt), whatever pytest set."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def assert_unwound(tracer, events, names):
    """Each frame the exception left ended when it left, innermost first,
    and what ran after it started later."""
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    idx = [only(events, n) for n in names]
    evs = [events[i] for i in idx]
    for (i, inner), (j, outer) in zip(zip(idx, evs), zip(idx[1:], evs[1:])):
        assert inner.parent == j
        assert inner.end_ns <= outer.end_ns
    for ev in evs:
        assert not ev.open_at_stop and not ev.open_at_start and ev.end_ns < tracer.stop_ns
    after = events[only(events, "leaf")]
    assert after.start_ns >= evs[-1].end_ns
    return evs


@pytest.mark.parametrize("how, exc, c_call", [
    ("raise", KeyboardInterrupt, None),
    ("exit", SystemExit, "sys.exit"),
    # Named after its C module: _signal on 3.12+, signal before.
    ("raise_signal", KeyboardInterrupt, f"{signal.raise_signal.__self__.__name__}.raise_signal"),
])
def test_base_exceptions_unwind_traced_frames(how, exc, c_call, default_sigint):
    tracer = frametrace.Tracer(buffer_size=SMALL)
    tracer.start()
    try:
        with pytest.raises(exc) as info:
            kb_outer(how)
        calls.leaf(1)
    finally:
        tracer.stop()
    if how == "exit":
        assert info.value.code == 5
    assert not tracer.active and not tracing_installed()
    events = tracer.getEvents()
    inner, _, _ = assert_unwound(tracer, events, ["kb_inner", "kb_middle", "kb_outer"])
    kids = [e for e in events if e.parent == only(events, "kb_inner")]
    if c_call is None:
        assert kids == []
    else:
        # The C call the exception came out of ended too, inside kb_inner.
        assert [(e.name, e.kind) for e in kids] == [(c_call, C)]
        assert not kids[0].open_at_stop and kids[0].end_ns <= inner.end_ns


def test_base_exceptions_propagate_through_the_with_block(default_sigint):
    for how, exc in (("raise", KeyboardInterrupt), ("exit", SystemExit)):
        with pytest.raises(exc):
            with frametrace.trace(buffer_size=SMALL) as tracer:
                try:
                    kb_outer(how)
                finally:
                    calls.leaf(1)
        assert not tracer.active and tracer.stop_ns is not None
        assert not tracing_installed()
        assert_unwound(tracer, tracer.getEvents(), ["kb_inner", "kb_middle", "kb_outer"])


def busy():
    """About 10 us of Python with no calls in it: loops that wait for a
    signal record slowly, and the ring keeps all of it."""
    x = 0
    for i in range(300):
        x += i
    return x


def sig_spin(armed, py_calls):
    armed.set()
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if py_calls:
            calls.leaf(busy())
        else:
            x = 0
            for i in range(300):
                x += i
            len("ab")
    raise AssertionError("no SIGINT arrived")


def sig_outer(armed, py_calls):
    return sig_middle(armed, py_calls)


def sig_middle(armed, py_calls):
    return sig_spin(armed, py_calls)


@pytest.mark.parametrize("py_calls", [False, True])
def test_real_sigint_from_another_thread_in_a_traced_loop(py_calls, default_sigint):
    armed = threading.Event()
    sender = threading.Thread(
        target=lambda: armed.wait(TIMEOUT) and os.kill(os.getpid(), signal.SIGINT),
        daemon=True)
    sender.start()
    tracer = frametrace.Tracer(buffer_size=1 << 18)
    tracer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sig_outer(armed, py_calls)
        calls.recurse(0)  # goes on after the interrupt
    finally:
        tracer.stop()
    sender.join(TIMEOUT)
    assert not sender.is_alive()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    main = threading.get_ident()
    spin, middle, outer = (only(events, n) for n in ("sig_spin", "sig_middle", "sig_outer"))
    assert events[spin].parent == middle and events[middle].parent == outer
    for i in (spin, middle, outer):
        ev = events[i]
        assert ev.thread_id == main and complete(ev) and ev.end_ns < tracer.stop_ns
    assert events[spin].end_ns <= events[middle].end_ns <= events[outer].end_ns
    # The loop ran traced until the interrupt, and tracing went on after it.
    inside = [e for e in events if e.parent == spin]
    names = {"leaf", "busy"} if py_calls else {"len"}
    assert {e.name for e in inside} <= names | {"time.monotonic", qual("Event.set")}
    assert [e for e in inside if e.name in names]
    # Complete, but for the function the interrupt came into at its entry:
    # CPython 3.11/3.13 report its return and not its call.
    assert all(complete(e) for e in inside[:-1])
    assert not inside[-1].open_at_stop and inside[-1].end_ns <= events[spin].end_ns
    assert len(find(events, "sig_spin")) == 1 and len(find(events, "recurse")) == 1
    after = events[only(events, "recurse")]
    assert after.parent == events[outer].parent and after.start_ns >= events[outer].end_ns
    assert tracer.stats.dropped == 0


@one_clock
def test_sigint_at_function_entries_many_times(default_sigint):
    """The interrupt lands at a function's entry now and then (measured on
    3.11: 8 runs in 300 report a return with no call): every trace stays
    sound, its stack at start once."""
    for _ in range(100):
        armed = threading.Event()
        sender = threading.Thread(
            target=lambda: armed.wait(TIMEOUT) and os.kill(os.getpid(), signal.SIGINT),
            daemon=True)
        sender.start()
        tracer = frametrace.Tracer(buffer_size=1 << 16)
        with tracer:
            with pytest.raises(KeyboardInterrupt):
                sig_outer(armed, True)
        sender.join(TIMEOUT)
        events = tracer.getEvents()
        assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
        assert [complete(events[i]) for i in find(events, "sig_spin")] == [True]
        me = [e for e in events if e.name == qual(
            "test_sigint_at_function_entries_many_times") and e.thread_id == threading.get_ident()]
        assert len(me) == 1  # the stack at start, once


# ---- 3. signal handlers running Python code while traced ----------------

def alarm_spin(hits, want):
    deadline = time.monotonic() + TIMEOUT
    while len(hits) < want and time.monotonic() < deadline:
        calls.leaf(busy())


@pytest.fixture
def restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGALRM, signal.SIGUSR1)}
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_timer_signal_handler_nested_in_what_was_running(restore_signals):
    hits = []

    def on_alarm(signum, frame):
        hits.append(calls.leaf(signum))

    signal.signal(signal.SIGALRM, on_alarm)
    with frametrace.trace(buffer_size=1 << 18) as tracer:
        signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)
        alarm_spin(hits, 10)
        signal.setitimer(signal.ITIMER_REAL, 0)
    assert len(hits) >= 10
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    name = qual("test_timer_signal_handler_nested_in_what_was_running.<locals>.on_alarm")
    handlers = find(events, name)
    assert len(handlers) == len(hits)  # the timer was off before the stop
    spin = only(events, "alarm_spin")
    for i in handlers:
        ev = events[i]
        assert ev.thread_id == threading.get_ident() and complete(ev)
        # Run by the eval loop of whatever frame was running: the spin loop
        # itself, the function it had just entered (or, if an alarm came
        # while one ran, another handler).
        # On a slow machine (ASan) an alarm may also come in this test's own
        # frame, just before or after the spin loop.
        test_name = qual("test_timer_signal_handler_nested_in_what_was_running")
        up = ev.parent
        while up != spin and events[up].name != test_name:
            assert events[up].name in ("leaf", "busy", name), events[up]
            up = events[up].parent
        kids = [e.name for e in events if e.parent == i and e.name != name]
        assert kids == ["leaf", "list.append"]
    assert tracer.stats.dropped == 0


class Alarm(Exception):
    pass


def test_signal_handler_raising_out_of_a_blocking_c_call(restore_signals):
    def on_usr1(signum, frame):
        calls.leaf(signum)
        raise Alarm

    def waiter(armed):
        armed.set()
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            time.sleep(0.05)  # interrupted: the handler runs inside it
        raise AssertionError("no SIGUSR1 arrived")

    signal.signal(signal.SIGUSR1, on_usr1)
    armed = threading.Event()
    sender = threading.Thread(
        target=lambda: armed.wait(TIMEOUT) and os.kill(os.getpid(), signal.SIGUSR1),
        daemon=True)
    sender.start()
    with frametrace.trace(buffer_size=SMALL) as tracer:
        with pytest.raises(Alarm):
            waiter(armed)
    sender.join(TIMEOUT)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    h = events[only(events, qual("test_signal_handler_raising_out_of_a_blocking_c_call.<locals>.on_usr1"))]
    w = events[only(events, qual("test_signal_handler_raising_out_of_a_blocking_c_call.<locals>.waiter"))]
    parent = events[h.parent]
    assert complete(h) and complete(w) and h.end_ns <= w.end_ns
    assert [e.name for e in events if e.parent == events.index(h)] == ["leaf"]
    # Nested in the sleep it interrupted (or in waiter, had the signal come
    # between two sleeps), which the exception then left.
    assert (parent.name, parent.kind) in (("time.sleep", C), (w.name, PY))
    assert parent == w or events[parent.parent] == w
    assert not parent.open_at_stop


# ---- 4. sys.settrace at the same time ------------------------------------

PROGRAM_TREE = ("program", PY, [
    ("branch", PY, [("leaf", PY, []), ("leaf", PY, [])]),
    (qual("Point.__init__"), PY, []),
    (qual("Point.norm"), PY, [("math.sqrt", C, [])]),
    ("consume", PY, [("sum", C, [(qual("numbers"), PY, [])] * 4)]),
    ("len", C, []),
    ("list.append", C, []),
    ("dict.get", C, []),
])


class LineTracer:
    """A debugger/coverage-like sys.settrace function."""

    def __init__(self):
        self.calls = []
        self.lines = []

    def __call__(self, frame, event, arg):
        if event == "call":
            self.calls.append(frame.f_code.co_name)
        elif event == "line":
            self.lines.append((frame.f_code.co_name, frame.f_lineno))
        return self


@pytest.fixture
def keep_settrace():
    prev = sys.gettrace()  # coverage may be running the tests
    yield
    sys.settrace(prev)


@pytest.mark.parametrize("when", ["before_start", "after_start"])
def test_settrace_alongside(when, keep_settrace):
    lt = LineTracer()
    if when == "before_start":
        sys.settrace(lt)
    with frametrace.trace(buffer_size=SMALL) as tracer:
        if when == "after_start":
            sys.settrace(lt)
        calls.program()
    assert sys.gettrace() is lt  # stop() left the trace function alone
    calls.leaf(9)  # after the stop: still traced by it
    sys.settrace(None)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert subtree(events, only(events, "program")) == PROGRAM_TREE
    # The trace function's own frames are not profiled.
    assert not [e for e in events if e.filename == __file__ and e.name.endswith("__call__")]
    assert lt.calls.count("program") == 1 and lt.calls.count("leaf") == 3
    assert lt.calls[-1] == "leaf"
    program_lines = {ln for name, ln in lt.lines if name == "program"}
    assert program_lines == set(range(36, 44))
    assert ("leaf", 16) in lt.lines


# ---- 5. the interpreter exiting while a tracer is active ------------------

# CPython 3.10 itself can crash at exit while a daemon thread waits for the
# GIL (take_gil touches the freed interpreter, with or without frametrace):
# there, daemon threads park inside traced frames instead of spinning.
SPIN = "True" if sys.version_info >= (3, 11) else "False"

EXIT_PROGRAMS = {
    "main_never_stopped": (0, """
        import frametrace
        from targets import calls
        t = frametrace.Tracer()
        t.start()
        calls.program()
        print("done")
    """),
    "main_never_stopped_in_a_function": (0, """
        import frametrace
        from targets import calls
        def main():
            t = frametrace.Tracer()
            t.start()
            calls.program()
            print("done")
            return t
        keep = main()
    """),
    "daemon_thread_running": (0, """
        import threading, frametrace
        from targets import calls
        parked = threading.Lock(); parked.acquire()
        running = threading.Event()
        def spin():
            running.set()
            while SPIN:
                calls.branch(2)
            parked.acquire()   # inside traced frames, forever
        t = frametrace.Tracer(buffer_size=4096)
        t.start()
        for _ in range(3):
            threading.Thread(target=spin, daemon=True).start()
        running.wait()
        calls.program()
        print("done")
    """),
    "daemon_thread_running_tracer_freed_at_exit": (0, """
        import sys, threading, types, frametrace
        from targets import calls
        parked = threading.Lock(); parked.acquire()
        running = threading.Event()
        def spin():
            running.set()
            while SPIN:
                calls.branch(2)
            parked.acquire()
        # Held by a module that finalization clears: freed at exit, while
        # the daemon threads are still hooked.
        holder = sys.modules["holder"] = types.ModuleType("holder")
        holder.t = frametrace.Tracer(buffer_size=4096)
        holder.t.start()
        for _ in range(3):
            threading.Thread(target=spin, daemon=True).start()
        running.wait()
        print("done")
    """),
    "non_daemon_thread_finishing_at_exit": (0, """
        import threading, time, frametrace
        from targets import calls
        def work():
            time.sleep(0.05)
            for i in range(1000):
                calls.leaf(i)
        t = frametrace.Tracer(buffer_size=4096)
        t.start()
        threading.Thread(target=work).start()
        print("done")
    """),
    "sys_exit_in_traced_code": (3, """
        import sys, frametrace
        def deep(n):
            if n:
                return deep(n - 1)
            print("done")
            sys.exit(3)
        t = frametrace.Tracer()
        t.start()
        deep(20)
    """),
    "sys_exit_in_with_block": (3, """
        import sys, frametrace
        def deep(n):
            if n:
                return deep(n - 1)
            print("done")
            sys.exit(3)
        with frametrace.trace():
            deep(20)
    """),
    "sys_exit_with_daemon_threads": (3, """
        import sys, threading, frametrace
        from targets import calls
        parked = threading.Lock(); parked.acquire()
        running = threading.Event()
        def spin():
            running.set()
            while SPIN:
                calls.leaf(1)
            parked.acquire()
        t = frametrace.Tracer(buffer_size=4096)
        t.start()
        for _ in range(3):
            threading.Thread(target=spin, daemon=True).start()
        running.wait()
        print("done")
        sys.exit(3)
    """),
}

_exit_runs = {}


def run_exit_program(name):
    """Runs one program once per clock; the result is shared by the tests."""
    key = (name, os.environ.get("FRAMETRACE_CLOCK"), os.environ.get("FRAMETRACE_BACKEND"))
    if key not in _exit_runs:
        code, program = EXIT_PROGRAMS[name]
        src = f"SPIN = {SPIN}\n" + textwrap.dedent(program)
        env = child_env(PYTHONPATH=TESTS_DIR)
        proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", src],
                              capture_output=True, text=True, timeout=TIMEOUT, env=env)
        _exit_runs[key] = (code, proc)
    return _exit_runs[key]


@each_backend
@pytest.mark.parametrize("name", list(EXIT_PROGRAMS))
def test_interpreter_exit_with_an_active_tracer(name):
    code, proc = run_exit_program(name)
    assert proc.returncode >= 0, f"killed by signal {-proc.returncode}: {proc.stderr[-3000:]}"
    assert proc.returncode == code, proc.stderr[-3000:]
    assert proc.stdout == "done\n"
    assert "Fatal Python error" not in proc.stderr and "Traceback" not in proc.stderr


@each_backend
@pytest.mark.parametrize("name", [
    name for name in EXIT_PROGRAMS
    # Freed at exit or not, depending on when finalization catches the
    # spinning threads: stderr is checked by the scenarios that always are.
    if name != "daemon_thread_running_tracer_freed_at_exit"
])
def test_interpreter_exit_leaves_stderr_empty(name):
    _, proc = run_exit_program(name)
    assert proc.stderr == ""


# ---- 6. a tracer dropped while active, with threads running ---------------

class Workers:
    """Threads calling traced code until told to stop; each notes whether
    a profile function was installed on it after `dropped` was set."""

    def __init__(self, n=4):
        self.stop = threading.Event()
        self.dropped = threading.Event()
        self.hooked_after = []
        self.errors = []
        self.loops = [0] * n
        self.threads = [threading.Thread(target=self.run, args=(k,), daemon=True)
                        for k in range(n)]
        for t in self.threads:
            t.start()

    def run(self, k):
        try:
            while not self.stop.is_set():
                calls.branch(3)
                self.loops[k] += 1
                if self.dropped.is_set():
                    self.hooked_after.append(tracing_installed())
                    time.sleep(0.001)
        except BaseException as exc:
            self.errors.append(exc)

    def finish(self):
        deadline = time.monotonic() + 60
        while len(self.hooked_after) < 4 * len(self.threads) and time.monotonic() < deadline:
            time.sleep(0.005)
        self.stop.set()
        for t in self.threads:
            t.join(60)
        assert not [t for t in self.threads if t.is_alive()], "worker hung"
        assert not self.errors, self.errors
        # Every thread went on running, untraced, once the tracer was gone.
        assert len(self.hooked_after) >= 4 * len(self.threads)
        assert not any(self.hooked_after)


def refcounts():
    gc.collect()
    return [sys.getrefcount(c) for c in (calls.leaf.__code__, calls.branch.__code__,
                                         calls.leaf, calls.branch)]


def assert_gone(ref, before):
    gc.collect()
    assert ref() is None
    assert not tracing_installed() and threading.getprofile() is None
    assert refcounts() == before  # the function table let go of the code
    with frametrace.trace(buffer_size=1024) as fresh:  # nothing left active
        calls.leaf(1)
    assert only(fresh.getEvents(), "leaf") >= 0


def started_tracer(workers):
    tracer = frametrace.Tracer(buffer_size=1 << 12)
    tracer.start()
    # Every worker records (its ring is in) before the tracer can go: a drop
    # while a ring faults in is test_dropped_while_a_thread_faults_its_ring_in.
    seen = list(workers.loops)
    deadline = time.monotonic() + 60
    while (any(now < then + 2 for now, then in zip(workers.loops, seen))
           and time.monotonic() < deadline):
        time.sleep(0.002)
    return tracer


def test_dropped_while_threads_run():
    before = refcounts()
    workers = Workers()
    tracer = started_tracer(workers)
    ref = weakref.ref(tracer)
    del tracer  # freed here, on this thread, while the workers record
    workers.dropped.set()
    workers.finish()
    assert_gone(ref, before)


def test_dropped_in_a_cycle_collected_by_another_thread():
    before = refcounts()
    workers = Workers()
    tracer = started_tracer(workers)
    ref = weakref.ref(tracer)
    cycle = [tracer]
    cycle.append(cycle)
    del tracer, cycle
    # The collection, and so the tracer's stop, runs on a worker thread.
    collector = threading.Thread(target=gc.collect)
    collector.start()
    collector.join(60)
    assert ref() is None
    workers.dropped.set()
    workers.finish()
    assert_gone(ref, before)


def test_dropped_when_the_frame_holding_it_returns():
    before = refcounts()
    workers = Workers()

    def scope():
        tracer = started_tracer(workers)
        calls.leaf(2)
        return weakref.ref(tracer)  # its last reference goes with this frame

    ref = scope()
    workers.dropped.set()
    gc.collect()
    workers.finish()
    assert_gone(ref, before)


def test_dropped_with_events_read_and_threads_registered_meanwhile():
    before = refcounts()
    workers = Workers()
    tracer = started_tracer(workers)
    late = threading.Thread(target=calls.branch, args=(2,))
    late.start()  # registered through threading's hook
    late.join()
    tracer.stop()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert {e.thread_id for e in events if e.name == "branch"} >= {late.ident}
    ref = weakref.ref(tracer)
    del tracer  # the events outlive it, names and all
    workers.dropped.set()
    workers.finish()
    assert events[only(events, "branch", thread_id=late.ident)].filename == calls.__file__
    del events
    assert_gone(ref, before)


DROP_WHILE_A_THREAD_FAULTS_ITS_RING_IN = {
    # A thread started while tracing: threading's hook (thread_bootstrap)
    # faults its ring in with the GIL released, holding a reference.
    "setprofile": """
        import sys, threading, frametrace
        for i in range(30):
            t = frametrace.Tracer(backend="setprofile")
            t.start()
            th = threading.Thread(target=len, args=("x",))
            th.start()
            del t
            th.join()
            assert sys.getprofile() is None
        print("{}")
    """,
    # A thread alive at start: its first event faults its ring in
    # (ft_thread_first_ring), the callback holding a reference.
    "monitoring": """
        import sys, threading, time, frametrace
        for i in range(30):
            ready, go = threading.Event(), threading.Event()
            def first_event_after_start():
                ready.set()
                go.wait()
                len("x")
            th = threading.Thread(target=first_event_after_start)
            th.start()
            ready.wait()
            t = frametrace.Tracer(backend="monitoring")
            t.start()
            go.set()
            time.sleep(0.001)
            del t
            th.join()
        print("{}")
    """,
}


@pytest.mark.parametrize("clock", ["cycles"], indirect=True)
@pytest.mark.parametrize("backend", [
    "setprofile",
    pytest.param("monitoring", marks=pytest.mark.skipif(
        sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")),
])
def test_dropped_while_a_thread_faults_its_ring_in(backend):
    run_json(DROP_WHILE_A_THREAD_FAULTS_ITS_RING_IN[backend], timeout=120)


# ---- 7. code objects that die while traced, and code made at run time ------

@one_clock
def test_functions_classes_modules_deleted_while_traced():
    refs = []

    def churn(n):
        for i in range(n):
            ns = {}
            exec(compile(f"def fn_{i}():\n    return {i}\n", f"<fn-{i}>", "exec"), ns)
            ns[f"fn_{i}"]()
            refs.append(weakref.ref(ns[f"fn_{i}"].__code__))

            ns = {}
            exec(compile(f"class K_{i}:\n    def meth(self):\n        return {i}\n",
                         f"<cls-{i}>", "exec"), ns)
            cls = ns.pop(f"K_{i}")
            cls().meth()
            refs.append(weakref.ref(cls.meth.__code__))
            cls_ref = weakref.ref(cls)
            del cls

            mod = types.ModuleType(f"mod_{i}")
            sys.modules[mod.__name__] = mod
            exec(compile(f"\n\ndef run():\n    return len('{i}')\n", f"<mod-{i}>", "exec"),
                 mod.__dict__)
            mod.run()
            refs.append(weakref.ref(mod.run.__code__))
            del sys.modules[mod.__name__], mod, ns
            gc.collect(0)  # young cycles: the code objects' last references are the tracer's
            assert cls_ref() is None  # the class died while traced

    with frametrace.trace(buffer_size=SMALL) as tracer:
        churn(40)
    gc.collect()
    assert all(r() is not None for r in refs)  # kept alive by the tracer
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    root = only(events, qual("test_functions_classes_modules_deleted_while_traced.<locals>.churn"))
    kids = [(e.name, e.filename, e.lineno) for e in events if e.parent == root and e.kind == PY]
    expected = []
    for i in range(40):
        expected += [(f"fn_{i}", f"<fn-{i}>", 1),
                     (qual(f"K_{i}.meth"), f"<cls-{i}>", 2),
                     ("run", f"<mod-{i}>", 3)]
    assert kids == expected
    for i in find(events, "run"):
        assert [(e.name, e.kind) for e in events if e.parent == i] == [("len", C)]
    tracer.clear()
    gc.collect()
    assert all(r() is None for r in refs)  # and released by clear()


class OD(collections.OrderedDict):
    pass


class D(dict):
    def mine(self):
        return self.get("k")


def helper(a, b=0):
    return a + b


def runtime_code():
    ns = {}
    exec(compile("x = len('abc')\ndef made():\n    return x\nmade()\n", "<dyn>", "exec"), ns)
    (lambda: calls.leaf(1))()
    functools.partial(helper, 1)(b=2)
    functools.partial(len, "abcd")()
    od = OD(a=1, b=2)
    od.move_to_end("a")
    od.get("a")
    d = D(k=1)
    d.setdefault("j", 2)
    d.mine()
    arr = array.array("i")
    arr.append(1)
    "abc".upper()


def test_code_made_at_run_time_and_c_methods_of_custom_types():
    tracer = frametrace.Tracer(buffer_size=SMALL)
    with tracer:
        runtime_code()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    root = only(events, "runtime_code")
    lam = qual("runtime_code.<locals>.<lambda>")
    assert subtree(events, root) == ("runtime_code", PY, [
        ("compile", C, []),
        ("exec", C, [("<module>", PY, [("len", C, []), ("made", PY, [])])]),
        (lam, PY, [("leaf", PY, [])]),
        # CPython reports no call of the partial object itself: its Python
        # function is a direct child; a partial of a builtin, no event.
        ("helper", PY, []),
        ("OrderedDict.move_to_end", C, []),
        ("dict.get", C, []),
        ("dict.setdefault", C, []),
        (qual("D.mine"), PY, [("dict.get", C, [])]),
        ("array.append", C, []),
        ("str.upper", C, []),
    ])
    mod = events[only(events, "<module>", filename="<dyn>")]
    assert (mod.filename, mod.lineno) == ("<dyn>", 1)
    made = events[only(events, "made")]
    assert (made.filename, made.lineno) == ("<dyn>", 2)
    lev = events[only(events, lam, filename=__file__)]
    assert (lev.filename, lev.lineno) == (__file__, runtime_code.__code__.co_firstlineno + 3)


def test_c_methods_bound_to_classes_named_after_their_defining_class():
    def run():
        D.fromkeys("ab")
        dict.fromkeys("ab")
        D.mro()
        int.mro()

    tracer = frametrace.Tracer(buffer_size=SMALL)
    with tracer:
        run()
    events = tracer.getEvents()
    root = only(events, qual("test_c_methods_bound_to_classes_named_after_their_defining_class.<locals>.run"))
    names = [e.name for e in events if e.parent == root]
    assert names == ["dict.fromkeys", "dict.fromkeys", "type.mro", "type.mro"]


BIG_TIMEOUT = 300  # the long run takes seconds on a quiet machine


STATUS = PROC_STATUS


# ---- 8. memory bounded by the ring, however many events -------------------

BIG_RUN = STATUS + """
    import json, time
    import frametrace

    UNROLL, N, CAPACITY = 20, {n}, 1 << 20
    # 20 calls of a cheap builtin per loop turn: 2 records each, little else.
    src = "def work(n, x):\\n    l = len\\n    for _ in range(n):\\n" + "        l(x)\\n" * UNROLL
    ns = {{}}
    exec(compile(src, "<work>", "exec"), ns)
    work = ns["work"]

    work(1000, ())  # warm up
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # peak RSS := current RSS
    except OSError:
        pass
    rss0, hwm0 = status("VmRSS"), status("VmHWM")
    tracer = frametrace.Tracer(buffer_size=CAPACITY)
    t0 = time.perf_counter()
    tracer.start()
    work(N, ())
    tracer.stop()
    seconds = time.perf_counter() - t0
    out = dict(rss0=rss0, hwm0=hwm0, rss1=status("VmRSS"), hwm1=status("VmHWM"),
               seconds=seconds, capacity=CAPACITY, dropped=tracer.stats.dropped,
               dropped_records=tracer.stats.dropped_records,
               by_thread=[t.dropped for t in tracer.threads],
               produced=2 * UNROLL * N + 2)  # + work()'s own call and return
    events = tracer.getEvents()
    out["len_events"] = sum(1 for e in events if e.name == "len")
    out["work"] = [(e.open_at_start, e.open_at_stop) for e in events if e.name == "work"]
    out["ends_ok"] = all(tracer.start_ns <= e.start_ns <= e.end_ns <= tracer.stop_ns
                         for e in events)
    print(json.dumps(out))
"""


@pytest.mark.parametrize("clock, n", [
    # 40 * 2_500_000 + 2 = 100,000,002 records: 2.6-4.2 s of tracing on
    # CPython 3.10-3.13 on a quiet machine (setprofile backend).
    ("cycles", 2_500_000),
    # The monitoring backend shares the rings and their accounting: 20M
    # records there, to keep the file's time down.
    pytest.param("monitoring", 500_000, marks=pytest.mark.skipif(
        sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")),
], indirect=["clock"])
@needs_plain_allocator
def test_long_trace_through_a_1m_ring_stays_within_the_ring(n):
    out = run_json(BIG_RUN.format(n=n))
    ring = out["capacity"] * 8  # bytes of a record
    assert out["produced"] == 40 * n + 2
    # Exactly the records that did not fit are counted, all on this thread,
    # and the len() calls of which none is left as events lost.
    assert out["dropped_records"] == out["produced"] - out["capacity"]
    assert out["dropped"] == 20 * n - out["len_events"]
    assert out["by_thread"] == [out["dropped"]]
    # The retained records are the newest: half a ring of len() calls.
    assert out["len_events"] == out["capacity"] // 2
    assert out["work"] == [[True, False]] and out["ends_ok"]
    # Peak memory while tracing: the ring and a little more.
    grew = max(out["hwm1"] - out["hwm0"], out["rss1"] - out["rss0"])
    assert grew <= ring + (64 << 20), out
    print(f"\n{out['produced']:,} records: RSS +{(out['rss1'] - out['rss0']) / 2**20:.1f} MiB, "
          f"peak +{(out['hwm1'] - out['hwm0']) / 2**20:.1f} MiB (ring {ring / 2**20:.0f} MiB), "
          f"{out['seconds']:.1f} s")


def test_c_level_loops_report_no_calls():
    """Why the long run loops in Python: map(len, ...) calls len from C,
    where CPython reports no call at all (nor of map or list: types)."""
    def run():
        list(map(len, ["ab"] * 100))
        len("ab")

    tracer = frametrace.Tracer(buffer_size=SMALL)
    with tracer:
        run()
    events = tracer.getEvents()
    root = only(events, qual("test_c_level_loops_report_no_calls.<locals>.run"))
    assert subtree(events, root)[2] == [("len", C, [])]
