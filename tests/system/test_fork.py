"""os.fork() and multiprocessing while tracing.

What is promised: the parent goes on tracing, unaffected.  In a child made
by os.fork() (multiprocessing's "fork" start method included), the
inherited tracer is stopped as of the moment just before the fork: its
events are the parent's up to there, none ends later, and the child runs
untraced unless it starts a tracer of its own; a running session is
detached there (step() does nothing, no trace is delivered)."""
import json
import multiprocessing
import os
import select
import sys
import threading
import time
import traceback
import warnings

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import qual
from targets import forking

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    pytest.mark.usefixtures("clock"),  # a tracer runs here: in every setup
    pytest.mark.every_setup,  # before 3.12 too: the hook across fork
]


def fork_and_report(child, timeout=30.0):
    """Forks; the child runs child() and sends back its JSON result.  The
    parent waits (no deadlock: killed after timeout) and returns it."""
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():
        # 3.12+: fork() of a multi-threaded process warns.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read_fd)
            result = json.dumps(child())
        except BaseException:  # noqa: B036 - report everything to the parent
            result = json.dumps({"error": traceback.format_exc()})
            code = 1
        with os.fdopen(write_fd, "w") as out:
            out.write(result)
        os._exit(code)
    os.close(write_fd)
    # Read while the child writes (a result larger than the pipe's buffer
    # would block it), then reap it; killed if either takes too long.
    deadline = time.monotonic() + timeout
    chunks = []
    while True:
        ready, _, _ = select.select([read_fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        chunk = os.read(read_fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode()
    assert os.WIFEXITED(status), f"the child died: status {status:#x}"
    result = json.loads(text)
    assert "error" not in result, result.get("error")
    assert os.WEXITSTATUS(status) == 0
    return result


def work(n):
    return sum(range(n))


def before_fork():
    return work(10)


def after_fork():
    return work(20)


def spin(stop_event):
    while not stop_event.is_set():
        work(5)


def test_fork_while_tracing_stops_the_child_and_spares_the_parent():
    stop_event = threading.Event()
    spinner = threading.Thread(target=spin, args=(stop_event,), name="spinner")
    spinner.start()
    tracer = frametrace.Tracer()
    tracer.start()
    try:
        before_fork()
        fork_started = time.monotonic_ns()

        def child():
            after_fork()  # the child runs untraced
            report = {
                "active": tracer.active,
                "getprofile_is_none": sys.getprofile() is None,
                "threading_profile_is_none": getattr(threading, "getprofile", lambda: None)() is None,
                "stop_ns": tracer.stop_ns,
            }
            tracer.stop()  # a no-op: latched at the fork
            report["stop_ns_after_stop"] = tracer.stop_ns
            events = tracer.getEvents()
            assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
            report["names"] = [e.name for e in events]
            report["threads"] = len({e.thread_id for e in events})
            report["open_at_stop"] = sorted({e.name for e in events if e.open_at_stop})
            report["max_end"] = max(e.end_ns for e in events)
            # A tracer of the child's own.
            with frametrace.trace() as mine:
                work(3)
            own = mine.getEvents()
            assert_valid_trace(own, mine.start_ns, mine.stop_ns)
            report["own"] = [[e.name, own[e.parent].name] for e in own if e.name in ("work", "sum")]
            return report

        report = fork_and_report(child)
        after_fork()
    finally:
        stop_event.set()
        spinner.join(10)
        tracer.stop()

    assert report["active"] is False
    assert report["getprofile_is_none"] and report["threading_profile_is_none"]
    stop = report["stop_ns"]
    assert report["stop_ns_after_stop"] == stop
    assert fork_started <= stop  # the moment of the fork, not the child's later stop()
    assert report["max_end"] <= stop
    names = report["names"]
    assert names.count("before_fork") == 1 and "after_fork" not in names
    assert report["threads"] == 2  # the spinner's events up to the fork are kept
    # Frames running at the fork end there: the test, and the fork call itself.
    assert qual("test_fork_while_tracing_stops_the_child_and_spares_the_parent") in report["open_at_stop"]
    assert {"fork_and_report", "posix.fork"} <= set(report["open_at_stop"])
    assert report["own"] == [
        ["work", qual("test_fork_while_tracing_stops_the_child_and_spares_the_parent.<locals>.child")],
        ["sum", "work"]]

    # The parent: one trace, before and after the fork, both threads.
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    names = [e.name for e in events]
    assert names.count("before_fork") == 1 and names.count("after_fork") == 1
    (fork_call,) = [e for e in events if e.name == "posix.fork"]
    assert not fork_call.open_at_stop and fork_call.end_ns < tracer.stop_ns
    assert len({e.thread_id for e in events}) == 2
    spinner_events = [e for e in events if e.thread_id == spinner.ident and e.name == "work"]
    assert spinner_events


def test_fork_in_a_session_detaches_it_in_the_child():
    traces = []
    with frametrace.profile(schedule=frametrace.schedule(wait=0, warmup=0, active=2),
                            on_trace_ready=traces.append) as prof:
        work(1)

        def child():
            delivered_before = len(traces)
            for _ in range(4):
                prof.step()  # does nothing here
                frametrace.step()
            with frametrace.profile() as own:  # no session is running in the child
                work(2)
            return {"step_num": prof.step_num, "delivered": len(traces) - delivered_before,
                    "own_works": [e.name for e in own.last_trace.events].count("work")}

        report = fork_and_report(child)
        prof.step()
        work(3)
        prof.step()
    assert report == {"step_num": 0, "delivered": 0, "own_works": 1}
    assert [[s.step for s in t.steps] for t in traces[:1]] == [[0, 1]]
    assert [e.name for e in traces[0].events].count("work") == 2


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_while_tracing(method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    ctx = multiprocessing.get_context(method)
    queue = ctx.Queue()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with frametrace.trace() as tracer:
            forking.child_work(2)
            proc = ctx.Process(target=forking.trace_in_child, args=(queue,))
            proc.start()
            report = queue.get(timeout=60)
            proc.join(60)
            forking.child_work(2)
    assert proc.exitcode == 0
    # The child was not traced by the parent's tracer and could trace itself.
    assert report == {"getprofile_is_none": True, "child_work": 1, "leaf": 3,
                      "ends_by_stop": True}
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert [e.name for e in events].count("child_work") == 2
    assert "trace_in_child" not in {e.name for e in events}


def test_fork_while_another_thread_is_inside_start():
    """A child forked by one thread while another is inside start() (here:
    reading a thread's name, Python code start() runs) can start tracers:
    that start() is not the child's, and would never end there."""
    in_start, forked = threading.Event(), threading.Event()
    outcome = {}

    class Named(threading.Thread):
        @property
        def name(self):
            if not in_start.is_set():
                in_start.set()
                forked.wait(30)
            return "named"

        @name.setter
        def name(self, value):
            pass

    def child():
        with frametrace.Tracer(buffer_size=4096) as tracer:
            abs(1)
        return {"abs": sum(e.name == "abs" for e in tracer.getEvents())}

    def forker():
        in_start.wait(30)
        try:
            outcome["child"] = fork_and_report(child)
        except BaseException as exc:  # noqa: B036 - judged by the test
            outcome["error"] = exc
        forked.set()

    release = threading.Event()
    named = Named(target=release.wait)
    named.start()
    thread = threading.Thread(target=forker)
    thread.start()
    try:
        with frametrace.Tracer() as tracer:
            abs(2)
    finally:
        forked.set()
        thread.join()
        release.set()
        named.join()
    assert "error" not in outcome, outcome
    assert outcome["child"] == {"abs": 1}
    assert [t.name for t in tracer.threads if t.thread_id == named.ident] == ["named"]


def test_fork_drops_the_parents_pending_writes():
    """A DataLoader-like worker forked while a window is being written: the
    child neither writes it nor waits for it; its own session writes its
    own; the parent's write goes on."""
    release = threading.Event()
    handled = []

    def handler(trace):
        release.wait(60)
        handled.append((os.getpid(), trace.cycle))

    sched = frametrace.schedule(wait=0, warmup=0, active=1, repeat=1)
    with frametrace.profile(schedule=sched, python_steps=0, on_trace_ready=handler) as prof:
        prof.step()  # closes cycle 0: its handler waits for release

        def child():
            pending = len(prof._writer.queue)
            own = []
            with frametrace.profile(on_trace_ready=own.append):
                work(1)
            return {"pending": pending, "writers": len(frametrace.session._writers),
                    "handled": handled, "own": [t.cycle for t in own]}

        report = fork_and_report(child)
        assert len(prof._writer.queue) == 1  # still the parent's to write
        release.set()
    assert report == {"pending": 0, "writers": 0, "handled": [], "own": [0]}
    assert handled == [(os.getpid(), 0)]
