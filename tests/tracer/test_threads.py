"""Every thread is traced: alive at start, or started while tracing."""
import threading
import time

import frametrace
from frametrace.testing import assert_valid_trace
from support import find, only, qual
from targets import calls


def work_before():
    calls.branch(2)


def work_during():
    calls.leaf(7)
    calls.leaf(8)


def test_thread_alive_at_start_and_thread_started_during():
    ready = threading.Event()
    go = threading.Event()

    def waiting_worker():
        ready.set()
        go.wait()  # blocked in a C call (lock.acquire) when tracing starts
        work_before()

    early = threading.Thread(target=waiting_worker, name="early")
    early.start()
    ready.wait()
    with frametrace.trace() as tracer:
        go.set()
        late = threading.Thread(target=work_during, name="late")
        late.start()
        late.join()
        early.join()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)

    main_id = threading.get_ident()
    assert {ev.thread_id for ev in events} >= {main_id, early.ident, late.ident}

    # The early thread: its frames from before the start are open_at_start,
    # and what it ran after the start is recorded exactly.
    w = events[only(events, qual("test_thread_alive_at_start_and_thread_started_during.<locals>.waiting_worker"))]
    assert w.thread_id == early.ident and w.open_at_start and not w.open_at_stop
    assert w.native_thread_id == early.native_id
    wb = only(events, "work_before")
    assert events[wb].thread_id == early.ident
    branch = only(events, "branch")
    assert events[branch].parent == wb
    assert [events[i].name for i in find(events, "leaf", thread_id=early.ident)] == ["leaf", "leaf"]

    # The late thread: hooked by threading's bootstrap, all its calls seen.
    wd = events[only(events, "work_during")]
    assert wd.thread_id == late.ident and wd.native_thread_id == late.native_id
    assert not wd.open_at_start and not wd.open_at_stop
    leaves = find(events, "leaf", thread_id=late.ident)
    assert len(leaves) == 2 and all(events[i].parent == only(events, "work_during") for i in leaves)
    assert events[wd.parent].name == qual("Thread.run")


def test_threads_started_after_stop_are_not_traced():
    with frametrace.trace() as tracer:
        pass
    t = threading.Thread(target=work_during)
    t.start()
    t.join()
    assert not find(tracer.getEvents(), "work_during")
    assert threading.getprofile() is None  # threading's hook restored


def test_thread_running_at_stop_is_capped():
    inside = threading.Event()
    release = threading.Event()

    def spinner():
        inside.set()
        while not release.is_set():
            calls.leaf(0)

    t = threading.Thread(target=spinner)
    with frametrace.trace() as tracer:
        t.start()
        inside.wait()
    release.set()
    t.join()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    s = events[only(events, qual("test_thread_running_at_stop_is_capped.<locals>.spinner"))]
    assert s.thread_id == t.ident and s.open_at_stop and s.end_ns == tracer.stop_ns
    assert all(ev.end_ns <= tracer.stop_ns for ev in events)


def test_many_threads():
    def worker(n):
        for i in range(n):
            calls.leaf(i)

    # All alive at once, so that no thread id is reused by the OS.
    barrier = threading.Barrier(8)

    def worker_in_step(n):
        barrier.wait()
        worker(n)
        barrier.wait()

    threads = [threading.Thread(target=worker_in_step, args=(50,)) for _ in range(8)]
    with frametrace.trace() as tracer:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    for t in threads:
        assert len(find(events, "leaf", thread_id=t.ident)) == 50


def test_c_return_without_call_from_a_previous_tracer():
    """The PyTorch case: a thread blocked in lock.acquire() under one tracer
    returns under the next one, which sees a C return with no call."""
    for _attempt in range(5):
        lock = threading.Lock()
        lock.acquire()
        ready = threading.Event()

        def blocked():
            ready.set()
            lock.acquire()
            calls.leaf(1)

        t = threading.Thread(target=blocked)
        first = frametrace.Tracer()
        first.start()
        t.start()
        ready.wait()
        time.sleep(0.05)  # let it get into acquire()
        first.stop()
        open_acquire = [e for e in first.getEvents() if e.thread_id == t.ident
                        and e.name == "lock.acquire" and e.open_at_stop]
        with frametrace.trace() as second:
            lock.release()
            t.join()
        if open_acquire:
            break
    assert open_acquire, "the thread never blocked inside lock.acquire()"
    events = second.getEvents()
    assert_valid_trace(events, second.start_ns, second.stop_ns)
    acq = [e for e in events if e.thread_id == t.ident and e.name == "lock.acquire"]
    assert len(acq) == 1
    assert acq[0].open_at_start and acq[0].start_ns == second.start_ns
    assert events[acq[0].parent].name == qual(
        "test_c_return_without_call_from_a_previous_tracer.<locals>.blocked")
    leaf = events[only(events, "leaf", thread_id=t.ident)]
    assert leaf.start_ns >= acq[0].end_ns


def test_thread_not_yet_running_at_start_gets_its_own_ids():
    """A thread whose OS thread has not bound its thread state yet when
    start() runs (started with _thread, which does not wait for it) is
    registered then with no ids (3.12+: 0; 3.10/3.11: its creator's); its
    events carry the ids the thread itself has."""
    import _thread

    for _ in range(20):
        ids = []
        started = threading.Event()
        done = threading.Event()

        def work():
            ids.append((threading.get_ident(), threading.get_native_id()))
            # A loaded machine may run the thread before start(): then its
            # work waits here, on its stack at start (its root is still work).
            started.wait(10)
            calls.leaf(1)
            done.set()

        tracer = frametrace.Tracer(buffer_size=4096)
        _thread.start_new_thread(work, ())
        tracer.start()
        started.set()
        assert done.wait(10)
        time.sleep(0.001)  # work() returns
        tracer.stop()
        events = tracer.getEvents()
        assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
        main = (threading.get_ident(), threading.get_native_id())
        assert {(e.thread_id, e.native_thread_id) for e in events} <= {main, ids[0]}
        roots = [e.name for e in events if e.thread_id == ids[0][0] and e.depth == 0]
        assert roots and roots[0].endswith("work"), roots
