"""The C join (``_tracer._join_ops``) puts each op on the track of the
thread that ran it when the ops of several threads, traced and not,
alternate in torch's list (each op's thread is looked up only when it
changes from the previous op's)."""
import os
import threading
import types

import frametrace
from frametrace import _tracer
from frametrace.export import Slice


def test_alternating_threads_each_get_their_own_ops():
    def f():
        pass

    tracer = frametrace.Tracer()
    tracer.start()
    f()
    worker = threading.Thread(target=f)
    worker.start()
    worker.join()
    tracer.stop()
    thread_of = {t.native_thread_id: (i, t.serial, t.name or f"thread {t.thread_id}")
                 for i, t in enumerate(tracer.threads) if t.native_thread_id}
    main_id, worker_id = threading.get_native_id(), worker.native_id
    assert {main_id, worker_id} <= set(thread_of)
    untraced = max(thread_of) + 1
    order = [main_id, main_id, worker_id, untraced, main_id, worker_id, worker_id, untraced,
             main_id]
    t0 = tracer.stop_ns + 1000  # after every frame: nested at the top
    acts = [types.SimpleNamespace(name=f"op{i}", category="cpu_op", start=t0 + 10 * i,
                                  end=t0 + 10 * i + 5, device=-1, resource=r, args=None)
            for i, r in enumerate(order)]
    slices, tracks = _tracer._join_ops(tracer, acts, Slice, thread_of, 0, os.getpid(), 250, None)
    got = {serial: [s.name for s in items] for serial, items in slices.items()}
    want = {}
    for i, r in enumerate(order):
        if r != untraced:
            want.setdefault(thread_of[r][1], []).append(f"op{i}")
    assert got == want
    assert [(name, [s.name for s in items]) for name, items in tracks] == [
        (f"torch: thread {untraced}", ["op3", "op7"])]
