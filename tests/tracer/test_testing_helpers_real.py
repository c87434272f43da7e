"""frametrace.testing: real tracer output passes every check."""
from __future__ import annotations

import re
import threading

import pytest

import frametrace
from frametrace.testing import (
    assert_called,
    assert_no_events_after_stop,
    assert_valid_trace,
    assert_well_nested,
    find_events,
)
from support import qual
from targets import calls


def message_of(check, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        check(*args, **kwargs)
    return str(info.value)


def test_real_trace_passes(traced_program):
    tracer, events, _ = traced_program
    assert_well_nested(events)
    assert_no_events_after_stop(events, tracer.stop_ns)
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    leaves = assert_called(events, "leaf", times=5)  # 2 in program(), 3 in the worker
    assert [e.name for e in leaves] == ["leaf"] * 5
    assert assert_called(events, qual("Point.norm"), times=1)[0].kind == "py"
    assert assert_called(events, "math.sqrt")[0].kind == "c"
    assert assert_called(events, "recurse", times=0) == []


def test_real_trace_stopped_inside_nested_calls():
    # Frames open at the stop end exactly at stop_ns: still no event after it.
    tracer = frametrace.Tracer()

    def deep(n):
        if n == 0:
            tracer.stop()
            calls.leaf(1)  # untraced
            return
        deep(n - 1)

    tracer.start()
    deep(3)
    events = tracer.getEvents()
    assert_no_events_after_stop(events, tracer.stop_ns)
    assert_well_nested(events)
    assert_called(events, "leaf", times=0)
    opened = assert_called(events, qual("test_real_trace_stopped_inside_nested_calls.<locals>.deep"), times=4)
    assert all(e.open_at_stop and e.end_ns == tracer.stop_ns for e in opened)


def test_find_events(traced_program):
    _, events, worker = traced_program
    main = threading.get_ident()
    assert find_events(events) == events and find_events(events) is not events
    assert find_events(events, name="nothing") == []
    assert [e.name for e in find_events(events, name="leaf")] == ["leaf"] * 5
    on_worker = find_events(events, thread_id=worker)
    assert on_worker and {e.thread_id for e in on_worker} == {worker}
    assert {"branch", "leaf"} <= {e.name for e in on_worker}
    c_events = find_events(events, kind="c")
    assert c_events and all(e.kind == "c" for e in c_events)
    assert {"len", "list.append", "math.sqrt"} <= {e.name for e in c_events}
    assert all(e.kind == "py" for e in find_events(events, kind="py"))
    assert [e.thread_id for e in find_events(events, name="leaf", thread_id=main, kind="py")] == [main] * 2
    assert find_events(events, name="leaf", kind="c") == []
    assert find_events((), name="leaf") == []


def test_called_typo_lists_close_and_most_called_names(traced_program):
    _, events, _ = traced_program
    msg = message_of(assert_called, events, "lef")
    assert msg.startswith(f"'lef' was never called ({len(events)} events recorded):")
    assert "did you mean: 'leaf' (5x)" in msg
    most = re.search(r"most called: (.*)", msg).group(1)
    assert "'leaf' (5x)" in most and "'numbers' (4x)" in most


def test_called_method_name_suggests_the_name_this_python_uses(traced_program):
    # 3.11+ name methods Class.method, 3.10 by co_name: a name written for
    # the other convention is offered the right one.
    _, events, _ = traced_program
    right = qual("Point.norm")
    wrong = "norm" if right == "Point.norm" else "Point.norm"
    msg = message_of(assert_called, events, wrong)
    assert msg.startswith(f"{wrong!r} was never called")
    assert f"did you mean: {right!r} (1x)" in msg


def test_called_wrong_count_names_the_calls(traced_program):
    _, events, _ = traced_program
    msg = message_of(assert_called, events, "branch", times=1)
    assert msg.startswith("'branch' was called 2 times, expected 1:")
    found = [i for i, e in enumerate(events) if e.name == "branch"]
    for i in found:
        assert f"  event {i} 'branch' (py) on thread {events[i].thread_id}" in msg
    assert f"{calls.__file__}:19" in msg
    assert "did you mean" not in msg  # it was called: no guessing

    msg = message_of(assert_called, events, "leaf", times=0)
    assert msg.startswith("'leaf' was called 5 times, expected 0:")
    assert msg.count("'leaf' (py)") == 5


@pytest.fixture
def traced_program():
    """A real trace: calls.program() on this thread, calls.branch(3) on another."""
    worker = threading.Thread(target=calls.branch, args=(3,))
    with frametrace.trace() as tracer:
        calls.program()
        worker.start()
        worker.join()
    return tracer, tracer.getEvents(), worker.ident
