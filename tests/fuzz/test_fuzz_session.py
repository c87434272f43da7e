"""Fuzzing schedules, profiling sessions (frametrace.profile) and ranges."""
from __future__ import annotations

import os
import threading

import pytest

# First: without hypothesis, the harness skips the module.
from fuzzing import (
    EvilCall,
    HOWS,
    PYTESTMARK,
    _expected_tracer_error,
    _leaf,
    _thread_work,
    _work,
    _young_gc,
    assert_clean,
    attempt,
    backends,
    fuzz,
    guarded,
    ints,
    nasty,
    scratch,
    strs,
)
from hypothesis import given
from hypothesis import strategies as st

import frametrace
from frametrace import _tracer
from frametrace.schedule import ProfilerAction, Schedule
from frametrace._trace import Trace
from frametrace.testing import assert_valid_trace

pytestmark = PYTESTMARK


# ---- schedules --------------------------------------------------------------------------------


def reference_action(step, wait, warmup, active, repeat, skip_first):
    """The schedule's step semantics, from its docstring."""
    if step < skip_first:
        return ProfilerAction.NONE
    step -= skip_first
    cycle = wait + warmup + active
    if repeat and step // cycle >= repeat:
        return ProfilerAction.NONE
    pos = step % cycle
    if pos < wait:
        return ProfilerAction.NONE
    if pos < wait + warmup:
        return ProfilerAction.WARMUP
    return ProfilerAction.RECORD if pos < cycle - 1 else ProfilerAction.RECORD_AND_SAVE


@fuzz(200)
@given(kwargs=st.dictionaries(st.sampled_from(["wait", "warmup", "active", "repeat", "skip_first", "bogus"]),
                              st.one_of(st.integers(-2, 6), nasty), max_size=6),
       positional=st.lists(st.integers(0, 3), max_size=2),
       steps=st.lists(st.one_of(st.integers(0, 60), ints, nasty), max_size=8),
       via=st.sampled_from(["schedule", "Schedule"]))
@guarded
def test_fuzz_schedule(kwargs, positional, steps, via):
    make = frametrace.schedule if via == "schedule" else Schedule
    out = attempt(make, *positional, **kwargs)
    required = {"wait", "warmup", "active"}
    fields = dict(zip(["wait", "warmup", "active", "repeat", "skip_first"], positional)) if via == "Schedule" else {}
    if via == "schedule" and positional or "bogus" in kwargs or set(fields) & set(kwargs):
        assert not out.ok and isinstance(out.exc, TypeError), out
        return
    fields.update(kwargs)
    if not required <= set(fields):
        assert not out.ok and isinstance(out.exc, TypeError), out
        return
    expected = None
    for name in ("wait", "warmup", "active", "repeat", "skip_first"):
        v = fields.get(name, 0)
        if isinstance(v, bool) or not isinstance(v, int):
            expected = TypeError
            break
        if v < (1 if name == "active" else 0):
            expected = ValueError
            break
    if expected is not None:
        assert not out.ok and (out.user or type(out.exc) is expected), (out, expected)
        return
    assert out.ok, out
    sched = out.value
    assert sched.cycle_length == fields["wait"] + fields["warmup"] + fields["active"]
    params = [fields.get(k, 0) for k in ("wait", "warmup", "active", "repeat", "skip_first")]
    for step in steps + [0, 1, 2, 59]:
        got = attempt(sched, step)
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            assert not got.ok and (got.user or type(got.exc) is ValueError), (step, got)
        else:
            assert got.ok and got.value is reference_action(step, *params), (step, got)
    # A Schedule is frozen: assigning fails, and leaves it as it was.
    with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError
        sched.active = 0
    assert sched.active == fields["active"]


@fuzz(100)
@given(value=st.one_of(st.integers(-2, 5), nasty))
@guarded
def test_fuzz_profiler_action(value):
    out = attempt(ProfilerAction, value)
    if out.ok:
        assert out.value.value == value or out.value is value
    elif not out.user:
        assert isinstance(out.exc, ValueError) or isinstance(out.exc, TypeError), out


# ---- profiling sessions --------------------------------------------------------------------------

schedules = st.one_of(
    st.none(),
    st.builds(lambda w, u, a, r, s: frametrace.schedule(wait=w, warmup=u, active=a, repeat=r, skip_first=s),
              st.integers(0, 2), st.integers(0, 1), st.integers(1, 3), st.integers(0, 2), st.integers(0, 2)),
    st.lists(st.sampled_from(list(ProfilerAction)), min_size=1, max_size=6).map(
        lambda acts: (lambda step: acts[step % len(acts)])),
    st.builds(EvilCall, HOWS, st.integers(0, 7), st.sampled_from(list(ProfilerAction) + [None, 3, "RECORD"])),
    nasty,
)
SESSION_STEP_OPS = ("range", "stop", "global_step", "work", "thread", "nested", "decorated_range",
                    "bad_range")


def check_trace(trace):
    assert isinstance(trace, Trace)
    assert trace.session_start_ns <= trace.session_end_ns
    if trace.tracer is not None:
        assert trace.tracer_stop_ns == trace.tracer.stop_ns is not None
        assert trace.session_start_ns <= trace.tracer_start_ns <= trace.tracer_stop_ns <= trace.session_end_ns
        assert_valid_trace(trace.events, trace.tracer.start_ns, trace.tracer.stop_ns)
    else:
        assert trace.events == [] and trace.tracer_stop_ns is None
    for r in trace.ranges:
        assert trace.session_start_ns <= r.start_ns <= r.end_ns <= trace.session_end_ns, r
    for s in trace.steps:
        assert s.name == f"step#{s.step}" and s.start_ns <= s.end_ns, s
        assert trace.session_start_ns <= s.start_ns and s.end_ns <= trace.session_end_ns, s


@fuzz(150)
@given(data=st.data(),
       kwargs=st.fixed_dictionaries({}, optional={
           "schedule": schedules,
           "python_steps": st.one_of(st.none(), st.integers(-1, 4), nasty),
           "on_trace_ready": st.one_of(st.none(), st.just("collect"), st.just("save"),
                                       st.builds(EvilCall, HOWS, st.integers(0, 7)), nasty),
           "buffer_size": st.one_of(st.sampled_from([1, 16, 512]), st.sampled_from([0, -1, 2**28 + 1, 2**64]), nasty),
           "c_calls": st.one_of(st.booleans(), nasty),
           "backend": st.one_of(backends, nasty)}),
       ignore=st.one_of(st.none(), st.lists(st.one_of(st.sampled_from([_leaf, _leaf.__code__]), nasty), max_size=3)))
@guarded
def test_fuzz_profile_session(data, kwargs, ignore):
    traces = []
    nested = []
    with scratch() as d:
        if kwargs.get("on_trace_ready") == "collect":
            kwargs["on_trace_ready"] = traces.append
        elif kwargs.get("on_trace_ready") == "save":
            kwargs["on_trace_ready"] = frametrace.trace_handler(os.path.join(d, "saved"))
        if ignore is None:
            out = attempt(frametrace.profile, **kwargs)
        else:  # the Profile class, with its private _ignore (code kept out of the trace)
            out = attempt(frametrace.Profile, **kwargs, _ignore=ignore)
        expected = _expected_profile_error(kwargs)
        if expected is None and ignore is not None and not isinstance(ignore, (list, tuple)):
            expected = TypeError
        if expected is None:
            assert out.ok, out
        elif not out.user:
            assert not out.ok and type(out.exc) is expected, (out, expected)
        if not out.ok:
            return
        prof = out.value
        assert_clean()  # nothing happens before the session is entered

        def nested_session():
            other = frametrace.profile()
            other.__enter__()
            nested.append(other)  # entered: exited at the end

        actions = (prof.step, prof.stop, frametrace.step, lambda: prof.__exit__(None, None, None),
                   nested_session, _young_gc)
        ops = data.draw(st.lists(st.lists(st.sampled_from(SESSION_STEP_OPS), max_size=3), max_size=6),
                        label="steps")

        def run():
            with prof:
                for step_ops in ops:
                    for op in step_ops:
                        if op == "range":
                            with frametrace.range("r"):
                                _work()
                        elif op == "stop":
                            prof.stop()
                        elif op == "global_step":
                            frametrace.step()
                        elif op == "work":
                            _work()
                        elif op == "thread":
                            _thread_work()
                        elif op == "nested":
                            try:
                                nested_session()
                            except RuntimeError:
                                pass  # sessions do not nest
                            else:
                                assert prof._finished, "a session nested in a running one"
                        elif op == "decorated_range":
                            frametrace.range("deco")(_work)()
                        elif op == "bad_range":
                            try:
                                with frametrace.range("boom"):
                                    raise KeyError("inside a range")
                            except KeyError:
                                pass
                    prof.step()

        outcome = attempt(run, allowed=(TypeError, ValueError, RuntimeError, OSError), actions=actions)
        for other in reversed(nested):
            other.__exit__(None, None, None)
        # Whatever happened, the session is over and left nothing behind.
        assert frametrace._running.session is None
        assert_clean()
        if outcome.ok:
            assert attempt(prof.step, allowed=(RuntimeError,)).exc is not None
        again = attempt(prof.__enter__, allowed=(RuntimeError,))
        assert not again.ok and isinstance(again.exc, RuntimeError), again
        for trace in traces + ([prof.last_trace] if prof.last_trace is not None else []):
            check_trace(trace)
        if isinstance(kwargs.get("python_steps"), int) and kwargs["python_steps"] == 0:
            assert all(t.tracer is None for t in traces)
        saved = os.path.join(d, "saved")
        if os.path.isdir(saved):
            for name in os.listdir(saved):
                loaded = frametrace.load(os.path.join(saved, name))
                assert isinstance(loaded, Trace)


def _expected_profile_error(kwargs):
    sched = kwargs.get("schedule")
    if sched is not None and not callable(sched):
        return TypeError
    steps = kwargs.get("python_steps")
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, int):
            return TypeError
        if steps < 0:
            return ValueError
        if isinstance(sched, Schedule) and steps > sched.active:
            return ValueError
    ready = kwargs.get("on_trace_ready")
    if ready is not None and not callable(ready):
        return TypeError
    return _expected_tracer_error([], {k: kwargs[k] for k in ("buffer_size", "c_calls", "backend") if k in kwargs})


@fuzz(100)
@given(call=st.sampled_from(["step", "stop", "exit", "global_step"]), args=st.lists(nasty, max_size=2))
@guarded
def test_fuzz_session_methods_outside_a_session(call, args):
    prof = frametrace.profile()
    fn = {"step": prof.step, "stop": prof.stop, "exit": prof.__exit__, "global_step": frametrace.step}[call]
    out = attempt(fn, *args, allowed=(TypeError, RuntimeError))
    if call == "exit":  # never entered: refused, and the session stays whole
        assert not out.ok and isinstance(out.exc, RuntimeError), out
    elif args:
        assert not out.ok and isinstance(out.exc, TypeError), out
    elif call == "step":
        assert not out.ok and isinstance(out.exc, RuntimeError), out
    else:
        assert out.ok, out  # stop() and frametrace.step(): no-ops outside a session
    with prof:  # still usable
        prof.step()
    check_trace(prof.last_trace)


# ---- ranges and the range sink -------------------------------------------------------------------


@fuzz(200)
@given(name=st.one_of(strs, nasty), how=st.sampled_from(["range", "Range", "Range(name=)", "two", "none"]),
       sink=st.sampled_from(["list", None]), decorated=st.one_of(st.just(_work), nasty),
       exit_args=st.lists(nasty, max_size=3))
@guarded
def test_fuzz_range(name, how, sink, decorated, exit_args):
    make = {"range": lambda: frametrace.range(name), "Range": lambda: _tracer.Range(name),
            "Range(name=)": lambda: _tracer.Range(name=name), "two": lambda: frametrace.range(name, name),
            "none": lambda: frametrace.range()}[how]
    out = attempt(make)
    if how in ("two", "none"):
        assert not out.ok and isinstance(out.exc, TypeError), out
        return
    assert out.ok == isinstance(name, str), out
    if not out.ok:
        return
    r = out.value
    assert r.name is name
    # The sink a session sets (private: set as the package does, not fuzzed).
    marks = [] if sink == "list" else sink
    _tracer._set_range_sink(marks)
    before = len(marks) if type(marks) is list else 0
    try:
        entered = attempt(r.__enter__)
        assert entered.ok and entered.value is r, entered
        left = attempt(r.__exit__, *exit_args)
        assert left.ok and left.value is False, left
        if type(marks) is list:
            new = marks[before:]
            assert [(m[0], m[1]) for m in new] == [("B", name), ("E", name)]
            assert new[0][1] is name and new[0][2] == new[1][2] == threading.get_ident()
            assert new[0][3] <= new[1][3]
        if how == "range":
            deco = attempt(r, decorated)
            assert deco.ok == callable(decorated) or deco.user, deco
            if deco.ok and decorated is _work:
                assert deco.value() == _work()
    finally:
        _tracer._set_range_sink(None)
