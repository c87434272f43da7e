"""Assertion helpers for tests of traced code.

    from frametrace.testing import assert_called, assert_well_nested

    with frametrace.trace() as tracer:
        train_step()
    events = tracer.getEvents()
    assert_well_nested(events)
    assert_no_events_after_stop(events, tracer.stop_ns)
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)  # the above, and more
    assert_called(events, "optimizer.step", times=1)

Each helper raises AssertionError whose message names the offending events
(index, name, kind, thread, times, file:line), and TypeError or ValueError
for arguments it cannot check.  They depend on nothing but the standard
library: pytest shows their messages as they are, and hides their frames
from tracebacks (``__tracebackhide__``).
"""
from __future__ import annotations

import collections
import difflib
from collections.abc import Sequence
from typing import Any, Iterable

from ._tracer import Event

__all__ = [
    "assert_called",
    "assert_no_events_after_stop",
    "assert_valid_trace",
    "assert_well_nested",
    "describe_event",
    "find_events",
]

# A message lists at most this many offending events, then counts the rest:
# the first few locate the problem; thousands of lines would bury it.
MAX_LISTED = 10

_KINDS = ("py", "c")


def describe_event(events: Sequence[Event], index: int) -> str:
    """One line naming ``events[index]``: index, name, kind, thread, times
    and where its code is, as the failure messages show it."""
    _check_events(events)
    return _describe(events, index)


def _describe(events: Sequence[Event], index: int) -> str:
    # describe_event() without checking the whole list each time: the
    # helpers check it once (checking per event made them quadratic).
    ev = events[index]
    where = ev.filename if ev.lineno <= 0 else f"{ev.filename}:{ev.lineno}"
    flags = "".join(
        f", {flag}" for flag in ("open_at_start", "open_at_stop", "open_at_loss") if getattr(ev, flag)
    )
    return (
        f"event {index} {ev.name!r} ({ev.kind}) on thread {ev.thread_id}"
        f" (native {ev.native_thread_id}), start_ns={ev.start_ns} end_ns={ev.end_ns}"
        f", depth={ev.depth} parent={ev.parent}{flags}, at {where}"
    )


def assert_no_events_after_stop(events: Sequence[Event], stop_ns: int) -> None:
    """Asserts that no event starts or ends after ``stop_ns`` (normally the
    tracer's ``stop_ns``): what a stopped tracer guarantees."""
    __tracebackhide__ = True
    _check_events(events)
    if stop_ns is None:
        raise TypeError("stop_ns is None: the tracer has not stopped (pass tracer.stop_ns after stop())")
    _check_int("stop_ns", stop_ns)
    problems = []
    for i, ev in enumerate(events):
        late = [
            f"{field} is {value - stop_ns} ns after the stop"
            for field, value in (("start_ns", ev.start_ns), ("end_ns", ev.end_ns))
            if value > stop_ns
        ]
        if late:
            problems.append(f"{_describe(events, i)}: {', '.join(late)}")
    if problems:
        raise AssertionError(
            _listing(
                f"{_plural(len(problems), 'event')} of {len(events)} after stop_ns={stop_ns}",
                problems,
            )
        )


def assert_well_nested(events: Sequence[Event]) -> None:
    """Asserts that the events form proper per-thread call trees: each
    ``parent`` is -1 (a root, depth 0) or the index of an earlier event of
    the same thread whose [start_ns, end_ns] holds the child, with
    ``depth == parent.depth + 1``; no event ends before it starts; and
    siblings (the children of one parent, or the roots of one thread) follow
    one another without overlapping."""
    __tracebackhide__ = True
    _check_events(events)
    problems = _nesting_problems(events)
    if problems:
        raise AssertionError(
            _listing(f"events are not well nested ({_plural(len(problems), 'problem')})", problems)
        )


def assert_valid_trace(events: Sequence[Event], start_ns: int, stop_ns: int) -> None:
    """Asserts every guarantee the events of a stopped tracer (``getEvents()``,
    a session's ``Trace.events``) make, given its ``start_ns`` and ``stop_ns``:
    each event starts and ends within [start_ns, stop_ns]; ``kind`` is "py"
    or "c"; a C event is at ``<built-in>`` line 0 and a Python event at a line
    > 0; an event ``open_at_stop`` ends at ``stop_ns`` and is not also
    ``open_at_loss``; and the events are well nested (``assert_well_nested``).
    One pass over the events for each."""
    __tracebackhide__ = True
    _check_events(events)
    for what, value in (("start_ns", start_ns), ("stop_ns", stop_ns)):
        if value is None:
            raise TypeError(
                f"{what} is None: the tracer has not stopped (pass tracer.{what} after stop())"
            )
        _check_int(what, value)
    if start_ns > stop_ns:
        raise ValueError(f"start_ns={start_ns} is after stop_ns={stop_ns}")
    problems: list[str] = []
    for i, ev in enumerate(events):
        if ev.start_ns < start_ns or ev.end_ns > stop_ns:
            problems.append(f"{_Lazy(events, i)}: is not within [{start_ns}, {stop_ns}]")
        if ev.kind == "c":
            if ev.lineno != 0 or ev.filename != "<built-in>":
                problems.append(f"{_Lazy(events, i)}: a C event must be at <built-in> line 0")
        elif ev.kind == "py":
            if ev.lineno <= 0:
                problems.append(f"{_Lazy(events, i)}: a Python event must have a line > 0")
        else:
            problems.append(f"{_Lazy(events, i)}: kind must be 'py' or 'c', not {ev.kind!r}")
        if ev.open_at_stop and ev.end_ns != stop_ns:
            problems.append(f"{_Lazy(events, i)}: is open_at_stop but does not end at stop_ns={stop_ns}")
        if ev.open_at_stop and ev.open_at_loss:
            problems.append(f"{_Lazy(events, i)}: cannot be both open_at_stop and open_at_loss")
    problems.extend(_nesting_problems(events))
    if problems:
        raise AssertionError(
            _listing(f"{_plural(len(problems), 'problem')} in {_plural(len(events), 'event')}", problems)
        )


def _thread_of(ev: Any) -> Any:
    """An event's thread: thread_serial (unique per OS thread, whatever the
    reuse of idents), or thread_id for an event with none (0)."""
    return ("serial", ev.thread_serial) if ev.thread_serial else ("ident", ev.thread_id)


def _nesting_problems(events: Sequence[Event]) -> list[str]:
    """What assert_well_nested() reports, for events already checked."""
    problems: list[str] = []
    siblings: dict[tuple[Any, int], list[int]] = collections.defaultdict(list)
    for i, ev in enumerate(events):
        here = _Lazy(events, i)
        if ev.end_ns < ev.start_ns:
            problems.append(f"{here}: ends {ev.start_ns - ev.end_ns} ns before it starts")
        if ev.parent == -1:
            if ev.depth != 0:
                problems.append(f"{here}: a root (parent -1) must have depth 0")
            siblings[(_thread_of(ev), -1)].append(i)
            continue
        if not isinstance(ev.parent, int) or not 0 <= ev.parent < i:
            # Parents come before their children, so a later (or missing)
            # index is as broken as one outside the list.
            problems.append(
                f"{here}: parent {ev.parent!r} is not the index of an earlier event"
                f" (valid: -1 or 0..{i - 1})"
            )
            continue
        parent = events[ev.parent]
        # The related event goes on its own, further indented line.
        of_parent = _Lazy(events, ev.parent, "its parent\n    ")
        if _thread_of(parent) != _thread_of(ev) or parent.thread_id != ev.thread_id:
            problems.append(f"{here}: is on another thread than {of_parent}")
            continue
        if ev.start_ns < parent.start_ns or ev.end_ns > parent.end_ns:
            problems.append(f"{here}: is not within {of_parent}")
        if ev.depth != parent.depth + 1:
            problems.append(f"{here}: depth should be {parent.depth + 1}, one more than {of_parent}")
        siblings[(_thread_of(ev), ev.parent)].append(i)
    for group in siblings.values():
        group.sort(key=lambda k: (events[k].start_ns, events[k].end_ns))
        for a, b in zip(group, group[1:]):
            if events[a].end_ns > events[b].start_ns:
                problems.append(
                    f"{_describe(events, a)}: overlaps by"
                    f" {events[a].end_ns - events[b].start_ns} ns its next sibling\n"
                    f"    {_describe(events, b)}"
                )
    return problems


def assert_called(events: Sequence[Event], name: str, times: int | None = None) -> list[Event]:
    """Asserts that a function named ``name`` was called at least once, or
    exactly ``times`` times (0: never); returns its events.

    ``name`` is an event name: the qualified name (``Class.method``) on
    CPython 3.11 and later, the bare ``co_name`` on 3.10; C functions as
    ``len`` or ``list.append``.  When the count is wrong the message lists
    the names closest to ``name`` and the most called ones, so a typo or a
    missing class prefix shows at once.
    """
    __tracebackhide__ = True
    _check_events(events)
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    if times is not None:
        _check_int("times", times)
        if times < 0:
            raise ValueError(f"times must be >= 0 or None, not {times}")
    found = [i for i, ev in enumerate(events) if ev.name == name]
    if (times is None and found) or times == len(found):
        return [events[i] for i in found]

    if times is None:
        head = f"{name!r} was never called ({_plural(len(events), 'event')} recorded)"
    else:
        head = f"{name!r} was called {_plural(len(found), 'time')}, expected {times}"
    lines = [_describe(events, i) for i in found]
    counts = collections.Counter(ev.name for ev in events)
    if not found:
        lines.extend(_hints(name, counts))
    raise AssertionError(_listing(head, lines) if lines else head)


def find_events(
    events: Sequence[Event],
    name: str | None = None,
    thread_id: int | None = None,
    kind: str | None = None,
) -> list[Event]:
    """The events, in order, with this name, thread (``threading.get_ident()``)
    and kind (``"py"`` or ``"c"``); a criterion left None matches all."""
    _check_events(events)
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be a str or None, not {type(name).__name__}")
    if thread_id is not None:
        _check_int("thread_id", thread_id)
    if kind is not None:
        if not isinstance(kind, str):
            raise TypeError(f"kind must be a str or None, not {type(kind).__name__}")
        if kind not in _KINDS:
            raise ValueError(f"kind must be 'py', 'c' or None, not {kind!r}")
    return [
        ev for ev in events
        if (name is None or ev.name == name)
        and (thread_id is None or ev.thread_id == thread_id)
        and (kind is None or ev.kind == kind)
    ]


def _hints(name: str, counts: collections.Counter[str]) -> Iterable[str]:
    """What the caller may have meant by a name no event has."""
    if not counts:
        yield "there are no events at all: did the tracer run around the code?"
        return
    # On 3.11+ methods are named Class.method, so a bare method name (or a
    # 3.10-style one) matches no event: offer the names it is the end of.
    suffixed = sorted(n for n in counts if n.rsplit(".", 1)[-1] == name.rsplit(".", 1)[-1])
    close = difflib.get_close_matches(name, list(counts), n=5, cutoff=0.6)
    similar = list(dict.fromkeys(suffixed + close))[:5]
    if similar:
        yield "did you mean: " + ", ".join(f"{n!r} ({counts[n]}x)" for n in similar)
    yield "most called: " + ", ".join(f"{n!r} ({c}x)" for n, c in counts.most_common(8))


def _listing(head: str, lines: list[str]) -> str:
    shown = [f"  {line}" for line in lines[:MAX_LISTED]]
    if len(lines) > MAX_LISTED:
        shown.append(f"  ... and {len(lines) - MAX_LISTED} more")
    return head + ":\n" + "\n".join(shown)


class _Lazy:
    """An event's description, made only if a message uses it."""

    __slots__ = ("events", "index", "prefix")

    def __init__(self, events: Sequence[Event], index: int, prefix: str = ""):
        self.events, self.index, self.prefix = events, index, prefix

    def __format__(self, spec: str) -> str:
        return self.prefix + _describe(self.events, self.index)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _check_int(what: str, value: object) -> None:
    # bool is an int subclass, but True as a count or a time is a mistake.
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")


def _check_events(events: object) -> None:
    # The helpers index events (parent is an index), so an iterator, which
    # would be consumed, is refused along with str and bytes.
    if not isinstance(events, Sequence) or isinstance(events, (str, bytes, bytearray)):
        raise TypeError(
            f"events must be a sequence of frametrace.Event (tracer.getEvents()),"
            f" not {type(events).__name__}"
        )
    for i, ev in enumerate(events):
        if not isinstance(ev, Event):
            raise TypeError(
                f"events[{i}] is a {type(ev).__name__}, not a frametrace.Event"
                " (rows read from a JSON trace: frametrace.Event(tuple(row)))"
            )
        if not isinstance(ev.name, str) or not isinstance(ev.filename, str):
            raise TypeError(f"events[{i}] has a name or filename that is not a str: {ev!r}")
