"""CPython can deliver C-call profile events unpaired (CPython issue 122029):
3.12.0-3.12.4 report a C return with no call for a bound method wrapping a C
function; 3.13.0 reports such a call made with f(*args) with no return.  The
replay copes: nothing outlives its parent, nothing is stretched to stop."""
import sys
import types

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import only

bound_len = types.MethodType(len, [1, 2])


def direct():
    return bound_len()


def star():
    return bound_len(*())


def after():
    return 0


def run():
    direct()
    star()
    after()


def raw_c_events():
    """The C events CPython itself delivers for run(), by code name."""
    seen = []

    def profiler(frame, event, arg):
        if event.startswith("c_") and frame.f_code.co_name in ("direct", "star"):
            seen.append((frame.f_code.co_name, event))

    sys.setprofile(profiler)
    try:
        run()
    finally:
        sys.setprofile(None)
    return seen


def raw_monitoring_c_events():
    """The same, as sys.monitoring delivers them to the monitoring backend
    (C calls: builtin functions and method descriptors)."""
    mon = sys.monitoring
    tool = 3  # not the profiler's id, which the backend uses
    seen = []

    def is_c_call(callable_, arg0):
        # What CPython's profile layer reports as a C call (csrc/monitor.c).
        if isinstance(callable_, types.BuiltinFunctionType):
            return True
        if isinstance(callable_, types.MethodDescriptorType):
            return isinstance(arg0, callable_.__objclass__)
        # A bound method wrapping a builtin: on 3.13 only (see
        # FT_PROFILE_UNWRAPS_BOUND_C in csrc/compat.h).
        return (sys.version_info[:2] == (3, 13) and isinstance(callable_, types.MethodType)
                and isinstance(callable_.__func__, types.BuiltinFunctionType))

    def on(event):
        def callback(code, offset, callable_, arg0):
            if is_c_call(callable_, arg0) and code.co_name in ("direct", "star"):
                seen.append((code.co_name, event))
        return callback

    mon.use_tool_id(tool, "test")
    try:
        for event, name in ((mon.events.CALL, "c_call"), (mon.events.C_RETURN, "c_return"),
                            (mon.events.C_RAISE, "c_exception")):
            mon.register_callback(tool, event, on(name))
        mon.set_events(tool, mon.events.CALL | mon.events.C_RETURN | mon.events.C_RAISE)
        run()
    finally:
        mon.set_events(tool, 0)
        for event in (mon.events.CALL, mon.events.C_RETURN, mon.events.C_RAISE):
            mon.register_callback(tool, event, None)
        mon.free_tool_id(tool)
    return seen


def test_unpaired_c_events_are_contained():
    if frametrace.Tracer().backend == "monitoring":
        raw = raw_monitoring_c_events()
        check_contained(raw)
        return
    raw = raw_c_events()
    if (3, 12, 0) <= sys.version_info[:3] <= (3, 12, 4):
        assert ("direct", "c_return") in raw and ("direct", "c_call") not in raw
    if sys.version_info[:3] == (3, 13, 0):
        assert ("star", "c_call") in raw and ("star", "c_return") not in raw
    if sys.version_info >= (3, 14):
        # The profile layer ignores the call's one CALL event (it names the
        # bound method), which gets no C_RETURN: no event at all.
        assert not [e for e in raw if e[0] == "star"], raw
    check_contained(raw)


def check_contained(raw):
    with frametrace.trace() as tracer:
        run()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)

    d = only(events, "direct")
    s = only(events, "star")
    a = events[only(events, "after")]
    kids = {i: [k for k, e in enumerate(events) if e.parent == i] for i in (d, s)}
    for name, idx in (("direct", d), ("star", s)):
        calls_ = [e for e in raw if e[0] == name]
        lens = [events[k] for k in kids[idx]]
        if not calls_:
            assert lens == []
            continue
        assert [e.name for e in lens] == ["len"], (name, raw)
        ln, parent = lens[0], events[idx]
        assert parent.start_ns <= ln.start_ns <= ln.end_ns <= parent.end_ns
        assert not ln.open_at_stop and ln.end_ns < tracer.stop_ns
        if (name, "c_call") not in calls_:
            # Its call was never seen: flagged, and starting no earlier
            # than the previous record (the parent's own call).
            assert ln.open_at_start and ln.start_ns == parent.start_ns
        if (name, "c_return") not in calls_:
            # Its return was never seen: it ends with its parent.
            assert ln.end_ns == parent.end_ns
    assert not a.open_at_stop and a.start_ns >= events[s].end_ns


# An extension that takes the profile function away inside one C call and
# gives it back inside another (frametrace._tracer's test-only toggles,
# which the tracer records like any extension's functions).
from frametrace import _testing  # noqa: E402


def untraced_work():
    return sum(range(10))


def swap_then_c_call():
    saved = _testing.profile_off()  # its return never reaches the hook
    untraced_work()
    _testing.profile_on(saved)  # nor its call: the hook was off
    return len("ab")


def swap_then_return():
    saved = _testing.profile_off()
    untraced_work()
    _testing.profile_on(saved)


def swap_program():
    swap_then_c_call()
    swap_then_return()
    after()


def test_c_call_whose_return_never_arrives_ends_within_its_parent():
    if frametrace.Tracer().backend != "setprofile":
        pytest.skip("swaps the PyEval_SetProfile function, which the monitoring backend does not use")
    with frametrace.trace() as tracer:
        swap_program()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    names = [e.name for e in events]
    assert "untraced_work" not in names and "sum" not in names
    # CPython decides at call time whether a C call's return is reported:
    # profile_on's, called with no hook, is not; it leaves no record.
    assert "profile_on" not in names
    offs = [i for i, e in enumerate(events) if e.name == "profile_off"]
    assert len(offs) == 2
    first, second = (events[i] for i in offs)
    c_parent, r_parent = events[first.parent], events[second.parent]
    assert (c_parent.name, r_parent.name) == ("swap_then_c_call", "swap_then_return")
    for ev, parent in ((first, c_parent), (second, r_parent)):
        assert not ev.open_at_stop and not parent.open_at_stop
        assert parent.start_ns <= ev.start_ns <= ev.end_ns <= parent.end_ns < tracer.stop_ns
    # Closed by the next C call, which gets its own event...
    (ln,) = [e for e in events if e.name == "len" and e.parent == first.parent]
    assert first.end_ns == ln.start_ns and ln.end_ns <= c_parent.end_ns
    # ...or, with none, by its parent's return: never stretched to the stop.
    assert second.end_ns == r_parent.end_ns
    assert events[only(events, "after")].start_ns >= r_parent.end_ns
