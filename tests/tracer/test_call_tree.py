"""Exact call trees of known code, and the shapes real programs take."""
import gc
import sys
import weakref

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import find, only, qual, subtree, traced
from targets import calls

PY = "py"
C = "c"


def test_known_program_exact_tree():
    tracer, events = traced(calls.program)
    root = only(events, "program")
    numbers = (qual("numbers"), PY, [])
    assert subtree(events, root) == ("program", PY, [
        ("branch", PY, [("leaf", PY, []), ("leaf", PY, [])]),
        (qual("Point.__init__"), PY, []),
        (qual("Point.norm"), PY, [("math.sqrt", C, [])]),
        ("consume", PY, [("sum", C, [numbers, numbers, numbers, numbers])]),
        ("len", C, []),
        ("list.append", C, []),
        ("dict.get", C, []),
    ])
    ev = events[root]
    assert (ev.filename, ev.lineno) == (calls.__file__, 35)
    assert not ev.open_at_start and not ev.open_at_stop
    assert {events[i].lineno for i in find(events, "leaf")} == {15}
    assert events[find(events, qual("Point.norm"))[0]].lineno == 11


def test_without_c_calls():
    _, events = traced(calls.program, c_calls=False)
    root = only(events, "program")
    tree = subtree(events, root)
    assert tree == ("program", PY, [
        ("branch", PY, [("leaf", PY, []), ("leaf", PY, [])]),
        (qual("Point.__init__"), PY, []),
        (qual("Point.norm"), PY, []),
        ("consume", PY, [(qual("numbers"), PY, [])] * 4),
    ])
    assert all(ev.kind == PY for ev in events)


def test_stack_at_start_is_open_at_start():
    def outer():
        return inner()

    def inner():
        with frametrace.trace() as tracer:
            calls.leaf(1)
        return tracer

    tracer = outer()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    me = only(events, qual("test_stack_at_start_is_open_at_start"))
    o = only(events, qual("test_stack_at_start_is_open_at_start.<locals>.outer"))
    i = only(events, qual("test_stack_at_start_is_open_at_start.<locals>.inner"))
    for idx in (me, o, i):
        assert events[idx].open_at_start
        assert events[idx].start_ns == tracer.start_ns
    assert events[o].parent == me and events[i].parent == o
    leaf = only(events, "leaf")
    assert events[leaf].parent == i and not events[leaf].open_at_start
    # inner returned after stop: it ends at the stop, flagged.
    assert events[i].open_at_stop and events[i].end_ns == tracer.stop_ns
    # The tracer's own methods are never recorded.
    assert not find(events, "Tracer.stop") and not find(events, "Tracer.start")


def test_generator_slices():
    def gen():
        yield 1
        yield 2

    def drive():
        g = gen()
        next(g)
        calls.leaf(0)
        next(g)
        for _ in g:
            pass

    _, events = traced(drive)
    root = only(events, qual("test_generator_slices.<locals>.drive"))
    g = qual("test_generator_slices.<locals>.gen")
    assert subtree(events, root) == (events[root].name, PY, [
        ("next", C, [(g, PY, [])]),
        ("leaf", PY, []),
        ("next", C, [(g, PY, [])]),
        (g, PY, []),
    ])


def test_exception_unwinds_three_frames():
    _, events = traced(calls.catcher)
    root = only(events, "catcher")
    assert subtree(events, root) == ("catcher", PY, [
        ("level1", PY, [("level2", PY, [("level3", PY, [])])]),
        ("leaf", PY, []),
    ])
    l1, l2, l3 = (events[only(events, n)] for n in ("level1", "level2", "level3"))
    after = events[only(events, "leaf")]
    # Each frame ends when the exception left it, before the handler ran on.
    assert l3.end_ns <= l2.end_ns <= l1.end_ns <= after.start_ns
    assert not any(e.open_at_stop for e in (l1, l2, l3))


def test_deep_recursion():
    depth = 0
    frame = sys._getframe()
    while frame is not None:
        depth += 1
        frame = frame.f_back
    n = sys.getrecursionlimit() - depth - 30
    assert n > 500
    _, events = traced(calls.recurse, n)
    rec = find(events, "recurse")
    assert len(rec) == n + 1
    depths = [events[i].depth for i in rec]
    assert depths == list(range(depths[0], depths[0] + n + 1))
    for a, b in zip(rec, rec[1:]):
        assert events[b].parent == a


def test_recursion_error_unwinds():
    def bottomless(k):
        return bottomless(k + 1)

    def run():
        try:
            bottomless(0)
        except RecursionError:
            pass
        calls.leaf(2)

    _, events = traced(run)
    frames = find(events, qual("test_recursion_error_unwinds.<locals>.bottomless"))
    assert len(frames) > 100
    assert not any(events[i].open_at_stop for i in frames)


def test_deleted_function_still_named():
    namespace = {}
    exec("def ephemeral():\n    return 42\n", namespace)
    code_ref = weakref.ref(namespace["ephemeral"].__code__)
    with frametrace.trace() as tracer:
        namespace["ephemeral"]()
    del namespace
    gc.collect()
    assert code_ref() is not None  # kept alive by the tracer
    events = tracer.getEvents()
    ev = events[only(events, "ephemeral")]
    assert (ev.filename, ev.lineno, ev.kind) == ("<string>", 1, PY)
    tracer.clear()
    gc.collect()
    assert code_ref() is None  # released by clear()
    with pytest.raises(RuntimeError, match="clear"):
        tracer.getEvents()


def test_event_fields():
    tracer, events = traced(calls.leaf, 3)
    import threading

    ev = events[only(events, "leaf")]
    assert ev.thread_id == threading.get_ident()
    assert ev.native_thread_id == threading.get_native_id()
    assert ev.end_ns >= ev.start_ns
    assert isinstance(ev, frametrace.Event)
    assert tuple(ev)[:4] == ("leaf", calls.__file__, 15, "py")
    assert not hasattr(tracer, "get_events")  # one name: getEvents


def test_decorator_and_exception_in_body():
    tracer = frametrace.trace()

    @tracer
    def job(x):
        return calls.leaf(x)

    assert job(2) == 4
    assert job.tracer is tracer and not tracer.active
    assert only(tracer.getEvents(), "leaf") >= 0
    job(3)  # a second call traces into a fresh tracer
    assert job.tracer is not tracer
    assert only(job.tracer.getEvents(), "leaf") >= 0

    with pytest.raises(ZeroDivisionError):
        with frametrace.trace() as failing:
            1 / 0
    assert not failing.active and failing.stop_ns is not None
    assert_valid_trace(failing.getEvents(), failing.start_ns, failing.stop_ns)
