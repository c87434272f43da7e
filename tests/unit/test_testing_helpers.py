"""frametrace.testing on hand-built events: each helper names the offending
event when a trace breaks what it checks (real traces: tests/tracer)."""
from __future__ import annotations

import collections.abc
import re

import pytest

import frametrace
from frametrace import testing
from frametrace.testing import (
    MAX_LISTED,
    assert_called,
    assert_no_events_after_stop,
    assert_valid_trace,
    assert_well_nested,
    describe_event,
    find_events,
)

TID = 1111  # the thread of hand-built events
OTHER_TID = 2222


def ev(name, start, end, *, depth=0, parent=-1, tid=TID, kind="py",
       filename="/src/mod.py", lineno=10, open_at_start=False, open_at_stop=False):
    """A hand-built event (for the traces no tracer would produce)."""
    if kind == "c":
        filename, lineno = "<built-in>", 0
    return frametrace.Event((name, filename, lineno, kind, tid, tid + 1, start, end,
                             depth, parent, open_at_start, open_at_stop))


def good_events():
    """root(0..100) > [a(10..40) > [len(20..30)], b(50..90)], on one thread."""
    return [
        ev("root", 0, 100, lineno=1),
        ev("a", 10, 40, depth=1, parent=0, lineno=5),
        ev("len", 20, 30, depth=2, parent=1, kind="c"),
        ev("b", 50, 90, depth=1, parent=0, lineno=9),
    ]


def replace(event, **fields):
    values = dict(zip(frametrace.Event.__match_args__, event))
    values.update(fields)
    return frametrace.Event(tuple(values.values()))


def message_of(check, *args, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        check(*args, **kwargs)
    return str(info.value)


# Every failure message names the offending event: index, name, kind,
# thread, times and file:line.

def test_event_after_stop_is_named():
    events = good_events()
    events[3] = replace(events[3], end_ns=130)
    events.append(ev("late", 120, 125, lineno=77))
    msg = message_of(assert_no_events_after_stop, events, 100)
    assert msg.startswith("2 events of 5 after stop_ns=100:")
    assert (
        f"event 3 'b' (py) on thread {TID} (native {TID + 1}), start_ns=50 end_ns=130,"
        " depth=1 parent=0, at /src/mod.py:9: end_ns is 30 ns after the stop"
    ) in msg
    assert "event 4 'late' (py)" in msg and "/src/mod.py:77" in msg
    assert "start_ns is 20 ns after the stop, end_ns is 25 ns after the stop" in msg
    assert "event 0" not in msg and "event 1" not in msg
    assert_no_events_after_stop(events, 130)  # ending exactly at the stop is fine


def test_c_event_location_is_built_in():
    events = good_events()
    events[2] = replace(events[2], end_ns=101)
    msg = message_of(assert_no_events_after_stop, events, 100)
    assert "event 2 'len' (c)" in msg and "at <built-in>" in msg and "<built-in>:0" not in msg


@pytest.mark.parametrize(
    "index, fields, problem",
    [
        (0, {"depth": 1}, "a root (parent -1) must have depth 0"),
        (1, {"parent": 7}, "parent 7 is not the index of an earlier event (valid: -1 or 0..0)"),
        (1, {"parent": 1}, "parent 1 is not the index of an earlier event"),
        (1, {"parent": -3}, "parent -3 is not the index of an earlier event"),
        (3, {"parent": 2, "depth": 3}, "is not within its parent\n    event 2 'len' (c)"),
        (2, {"depth": 5}, "depth should be 2, one more than its parent\n    event 1 'a' (py)"),
        (1, {"start_ns": -5}, "is not within its parent\n    event 0 'root' (py)"),
        (1, {"end_ns": 5}, "ends 5 ns before it starts"),
        (3, {"start_ns": 35}, "overlaps by 5 ns its next sibling\n    event 3 'b' (py)"),
    ],
)
def test_nesting_problem_is_named(index, fields, problem):
    events = good_events()
    assert_well_nested(events)
    events[index] = replace(events[index], **fields)
    msg = message_of(assert_well_nested, events)
    assert msg.startswith("events are not well nested (")
    assert problem in msg
    offender = 1 if "sibling" in problem else index  # an overlap names the earlier sibling first
    assert re.search(rf"^  event {offender} '{events[offender].name}' \(", msg, re.M), msg


def test_nesting_across_threads_is_named():
    events = good_events()
    events[1] = replace(events[1], thread_id=OTHER_TID)
    msg = message_of(assert_well_nested, events)
    assert f"event 1 'a' (py) on thread {OTHER_TID}" in msg
    assert f"is on another thread than its parent\n    event 0 'root' (py) on thread {TID}" in msg


def test_roots_of_a_thread_must_not_overlap_but_other_threads_may():
    events = [ev("r1", 0, 50), ev("r2", 40, 60, lineno=3), ev("t2", 10, 45, tid=OTHER_TID)]
    msg = message_of(assert_well_nested, events)
    assert "event 0 'r1'" in msg and "overlaps by 10 ns its next sibling\n    event 1 'r2'" in msg
    assert "t2" not in msg
    assert_well_nested([events[0], events[2]])
    assert_well_nested([])


def test_long_listings_are_cut():
    events = [ev(f"f{i}", 200 + i, 300 + i) for i in range(MAX_LISTED + 5)]
    msg = message_of(assert_no_events_after_stop, events, 100)
    assert f"event {MAX_LISTED - 1} 'f{MAX_LISTED - 1}'" in msg
    assert f"event {MAX_LISTED} " not in msg
    assert msg.endswith("  ... and 5 more")


def test_called_without_events():
    msg = message_of(assert_called, [], "leaf")
    assert msg == (
        "'leaf' was never called (0 events recorded):\n"
        "  there are no events at all: did the tracer run around the code?"
    )
    assert assert_called([], "leaf", times=0) == []


def test_describe_event():
    events = good_events()
    events[0] = replace(events[0], open_at_start=True, open_at_stop=True)
    assert describe_event(events, 0) == (
        f"event 0 'root' (py) on thread {TID} (native {TID + 1}), start_ns=0 end_ns=100,"
        " depth=0 parent=-1, open_at_start, open_at_stop, at /src/mod.py:1"
    )


# Arguments the helpers cannot check are refused with TypeError/ValueError.

@pytest.mark.parametrize("events", [None, 3, "abc", b"ab", iter([]), (e for e in ()), {1: 2}])
def test_events_must_be_a_sequence(events):
    for check in (assert_well_nested, find_events):
        with pytest.raises(TypeError, match="events must be a sequence of frametrace.Event"):
            check(events)
    with pytest.raises(TypeError, match="events must be a sequence"):
        assert_no_events_after_stop(events, 1)
    with pytest.raises(TypeError, match="events must be a sequence"):
        assert_called(events, "f")


def test_events_must_be_events():
    rows = [list(e) for e in good_events()]
    with pytest.raises(TypeError, match=r"events\[0\] is a list, not a frametrace.Event"):
        assert_well_nested(rows)
    mixed = good_events() + [tuple(good_events()[0])]
    with pytest.raises(TypeError, match=r"events\[4\] is a tuple"):
        find_events(mixed)
    assert_well_nested([frametrace.Event(tuple(r)) for r in rows])  # the suggested conversion


@pytest.mark.parametrize("stop_ns, error, match", [
    (None, TypeError, "has not stopped"),
    (1.5, TypeError, "stop_ns must be an int, not float"),
    (True, TypeError, "stop_ns must be an int, not bool"),
    ("100", TypeError, "stop_ns must be an int, not str"),
])
def test_stop_ns_checked(stop_ns, error, match):
    with pytest.raises(error, match=match):
        assert_no_events_after_stop(good_events(), stop_ns)


@pytest.mark.parametrize("name, times, error, match", [
    (None, None, TypeError, "name must be a str, not NoneType"),
    (b"leaf", None, TypeError, "name must be a str, not bytes"),
    ("leaf", "1", TypeError, "times must be an int, not str"),
    ("leaf", 1.0, TypeError, "times must be an int, not float"),
    ("leaf", True, TypeError, "times must be an int, not bool"),
    ("leaf", -1, ValueError, "times must be >= 0 or None, not -1"),
])
def test_called_arguments_checked(name, times, error, match):
    with pytest.raises(error, match=match):
        assert_called(good_events(), name, times=times)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"name": 3}, TypeError, "name must be a str or None, not int"),
    ({"thread_id": "1"}, TypeError, "thread_id must be an int, not str"),
    ({"thread_id": False}, TypeError, "thread_id must be an int, not bool"),
    ({"kind": 1}, TypeError, "kind must be a str or None, not int"),
    ({"kind": "python"}, ValueError, "kind must be 'py', 'c' or None, not 'python'"),
])
def test_find_arguments_checked(kwargs, error, match):
    with pytest.raises(error, match=match):
        find_events(good_events(), **kwargs)


# assert_valid_trace: the window, kinds, locations, open_at_stop and nesting.

def test_valid_trace_accepts_a_sound_trace():
    events = good_events()
    assert_valid_trace(events, 0, 100)
    assert_valid_trace(events, -5, 1000)
    assert_valid_trace([], 7, 7)
    capped = [ev("root", 0, 100, lineno=1, open_at_stop=True)]
    assert_valid_trace(capped, 0, 100)


@pytest.mark.parametrize("index, fields, start, stop, who, problem", [
    (0, {}, 1, 100, "event 0 'root' (py)", ": is not within [1, 100]"),
    (0, {"end_ns": 101}, 0, 100, "event 0 'root' (py)", ": is not within [0, 100]"),
    (3, {"lineno": 0}, 0, 100, "event 3 'b' (py)", ": a Python event must have a line > 0"),
    (2, {"lineno": 3}, 0, 100, "event 2 'len' (c)", ": a C event must be at <built-in> line 0"),
    (2, {"filename": "m.c"}, 0, 100, "event 2 'len' (c)", ": a C event must be at <built-in> line 0"),
    (1, {"kind": "native"}, 0, 100, "event 1 'a' (native)", ": kind must be 'py' or 'c', not 'native'"),
    (0, {"open_at_stop": True}, 0, 200, "event 0 'root' (py)",
     ", open_at_stop, at /src/mod.py:1: is open_at_stop but does not end at stop_ns=200"),
    (3, {"depth": 2}, 0, 100, "event 3 'b' (py)", ": depth should be 1, one more than its parent"),
])
def test_valid_trace_names_each_problem(index, fields, start, stop, who, problem):
    events = good_events()
    events[index] = replace(events[index], **fields)
    msg = message_of(assert_valid_trace, events, start, stop)
    assert msg.startswith("1 problem in 4 events:\n  " + who), msg
    assert problem in msg, msg


def test_valid_trace_lists_every_problem():
    events = good_events()
    events[1] = replace(events[1], start_ns=5, parent=3)  # later parent: not nested
    events[2] = replace(events[2], lineno=4)
    msg = message_of(assert_valid_trace, events, 10, 100)
    assert msg.startswith("4 problems in 4 events:"), msg
    assert "event 0 'root' (py)" in msg and "is not within [10, 100]" in msg
    assert "a C event must be at <built-in> line 0" in msg
    assert "parent 3 is not the index of an earlier event" in msg


@pytest.mark.parametrize("start, stop, error, match", [
    (None, 100, TypeError, "start_ns is None: the tracer has not stopped"),
    (0, None, TypeError, "stop_ns is None: the tracer has not stopped"),
    (0.0, 100, TypeError, "start_ns must be an int, not float"),
    (0, True, TypeError, "stop_ns must be an int, not bool"),
    (101, 100, ValueError, "start_ns=101 is after stop_ns=100"),
])
def test_valid_trace_arguments_checked(start, stop, error, match):
    with pytest.raises(error, match=match):
        assert_valid_trace(good_events(), start, stop)
    with pytest.raises(TypeError, match="events must be a sequence"):
        assert_valid_trace(iter(good_events()), 0, 100)


class _CountingEvents(collections.abc.Sequence):
    """Events that count how often they are looked at."""

    def __init__(self, events):
        self.events = events
        self.reads = 0

    def __len__(self):
        return len(self.events)

    def __getitem__(self, i):
        self.reads += 1
        return self.events[i]


def _nest(n):
    """A chain of n // 2 calls, and a call with n // 2 children."""
    half = n // 2
    end = 10 ** 9
    evs = [frametrace.Event(("f", "m.py", 1, "py", 1, 1, i, end - i, i, i - 1, False, False, 1,
                             False)) for i in range(half)]
    evs.append(frametrace.Event(("g", "m.py", 2, "py", 1, 1, end, 2 * end, 0, -1, False, False,
                                 1, False)))
    evs += [frametrace.Event(("h", "m.py", 3, "py", 1, 1, end + 2 * i + 1, end + 2 * i + 2, 1,
                              half, False, False, 1, False)) for i in range(n - half - 1)]
    return evs


def test_assert_well_nested_reads_each_event_a_bounded_number_of_times():
    # Deep chains and wide fans: each event read a few times, whatever n
    # (a quadratic check read 20,000 events hundreds of millions of times).
    reads = []
    for n in (20_000, 60_000):
        events = _CountingEvents(_nest(n))
        testing.assert_well_nested(events)
        reads.append(events.reads)
    assert reads[0] < 20 * 20_000
    assert reads[1] < 3.3 * reads[0]
