"""Fuzzing frametrace.Tracer: its constructor; its lifecycle, methods and
properties (in a subprocess); and frametrace.Event built from anything."""
from __future__ import annotations

import os
import sys
import weakref


# First: without hypothesis, the harness skips the module.
from fuzzing import (
    ACTIVE,
    CLEARED,
    NEW,
    PYTESTMARK,
    STOPPED,
    _expected_tracer_error,
    _judge_reports,
    _judge_testing_helpers,
    _thread_work,
    _work,
    _young_gc,
    assert_clean,
    attempt,
    backends,
    fuzz,
    guarded,
    in_subprocess,
    nasty,
    observed_phase,
    scratch,
)
from hypothesis import given
from hypothesis import strategies as st

import frametrace
from frametrace import export
from frametrace import Event, _tracer
from frametrace.testing import assert_valid_trace
from support import trace_of

pytestmark = PYTESTMARK


# ---- the Tracer constructor -----------------------------------------------------------------


tracer_kwargs = st.dictionaries(
    st.sampled_from(["buffer_size", "c_calls", "c_calls", "buffer_size", "backend", "backend", "bogus", "clock"]),
    st.one_of(nasty, st.integers(-2, 2**28 + 2), st.booleans(), st.sampled_from(("auto", "setprofile", "monitoring"))),
    max_size=4)


@fuzz(300)
@given(args=st.lists(st.one_of(nasty, st.integers(-2, 2**28 + 2)), max_size=2), kwargs=tracer_kwargs,
       factory=st.sampled_from(["Tracer", "trace", "_tracer.Tracer", "profile"]))
@guarded
def test_fuzz_tracer_constructor(args, kwargs, factory):
    make = {"Tracer": frametrace.Tracer, "trace": frametrace.trace,
            "_tracer.Tracer": _tracer.Tracer, "profile": frametrace.profile}[factory]
    if factory in ("trace", "profile"):
        args = []  # keyword-only
    if factory == "profile":
        kwargs = {k: v for k, v in kwargs.items() if k in ("buffer_size", "c_calls", "backend")}
    out = attempt(make, *args, **kwargs)
    expected = _expected_tracer_error(args, kwargs)
    if expected is None:
        assert out.ok, out
    elif not out.user:
        assert not out.ok and type(out.exc) is expected, (out, expected)
    if not out.ok:
        return
    obj = out.value
    if factory == "profile":
        assert isinstance(obj, frametrace.Profile)
        return
    size = args[0] if args else kwargs.get("buffer_size", frametrace.DEFAULT_BUFFER_SIZE)
    assert obj.buffer_size == size and type(obj.buffer_size) is int
    assert obj.c_calls is kwargs.get("c_calls", True)
    assert obj.start_ns is None and obj.stop_ns is None and not obj.active
    assert obj.stats == (0, 0) and obj.threads == []
    assert obj.clock in ("cycles", "monotonic")
    backend = kwargs.get("backend")
    assert obj.backend == (os.environ.get("FRAMETRACE_BACKEND", "setprofile")
                           if backend in (None, "auto") else str.__str__(backend)), obj.backend
    if size <= 1 << 12:  # a ring small enough to start here
        with obj:
            _work()
        events = obj.getEvents()
        assert_valid_trace(events, obj.start_ns, obj.stop_ns)
        assert any(e.name.endswith("_work") for e in events)
        if not obj.c_calls:
            assert all(e.kind == "py" for e in events)


# ---- the Tracer's lifecycle, methods and properties (subprocess) ---------------------------------

def check_properties(tracer, phase):
    assert (tracer.start_ns is None) == (phase == NEW)
    assert (tracer.stop_ns is None) == (phase in (NEW, ACTIVE))
    assert tracer.active is (phase == ACTIVE)
    if tracer.start_ns is not None and tracer.stop_ns is not None:
        assert tracer.start_ns <= tracer.stop_ns
    assert type(tracer.stats.dropped_records) is int and tracer.stats.dropped_records >= 0
    by_thread = [t.dropped for t in tracer.threads]
    if phase == ACTIVE:  # events lost are counted once stopped
        assert tracer.stats.dropped is None and set(by_thread) <= {None}
    else:
        assert type(tracer.stats.dropped) is int and 0 <= tracer.stats.dropped <= tracer.stats.dropped_records
        assert sum(by_thread) == tracer.stats.dropped
    assert all(t.name is None or isinstance(t.name, str) for t in tracer.threads)
    assert isinstance(tracer._threads, list)
    assert tracer.clock in ("cycles", "monotonic")


LIFECYCLE_OPS = ("start", "stop", "getEvents", "clear", "enter", "exit",
                 "props", "write_chrome", "write_perfetto", "work", "thread", "other_tracer",
                 "setprofile", "decorate", "orphan")


@fuzz(150)
@given(data=st.data(), options=st.fixed_dictionaries({}, optional={
    "buffer_size": st.sampled_from([1, 2, 3, 16, 256, 4096]), "c_calls": st.booleans(), "backend": backends}))
@guarded
def fuzz_tracer_lifecycle(data, options):
    tracer = frametrace.Tracer(**options)
    model = NEW
    actions = (tracer.clear, tracer.stop, tracer.start, tracer.getEvents, _young_gc)
    ops = data.draw(st.lists(st.sampled_from(LIFECYCLE_OPS), min_size=1, max_size=10), label="ops")
    with scratch() as d:
        for op in ops:
            phase = observed_phase(tracer)
            if op not in ("write_chrome", "write_perfetto"):
                assert phase == model, (op, phase, model)
            extra = data.draw(st.one_of(st.just([]), st.just([]), st.lists(nasty, min_size=1, max_size=2)),
                              label=f"{op} args")
            noargs = {"start": tracer.start, "stop": tracer.stop, "getEvents": tracer.getEvents,
                      "clear": tracer.clear, "enter": tracer.__enter__}
            if op in noargs:
                out = attempt(noargs[op], *extra, allowed=(TypeError, RuntimeError))
                if extra:
                    assert not out.ok and type(out.exc) is TypeError, out
                    continue
                if op in ("start", "enter"):
                    assert out.ok == (phase == NEW), (out, phase)
                    if out.ok:
                        model = ACTIVE
                        assert op == "start" or out.value is tracer
                    else:
                        assert isinstance(out.exc, RuntimeError)
                elif op == "stop":
                    assert out.ok
                    if phase == ACTIVE:
                        model = STOPPED
                elif op == "getEvents":
                    assert out.ok == (phase == STOPPED), (out, phase)
                    if out.ok:
                        assert_valid_trace(out.value, tracer.start_ns, tracer.stop_ns)
                elif op == "clear":
                    assert out.ok == (phase != ACTIVE), (out, phase)
                    if phase == STOPPED:
                        model = CLEARED
            elif op == "exit":
                out = attempt(tracer.__exit__, *extra)
                assert out.ok and out.value is False
                if phase == ACTIVE:
                    model = STOPPED
            elif op == "props":
                check_properties(tracer, phase)
            elif op in ("write_chrome", "write_perfetto"):
                # Through the public writers (their arguments: test_fuzz_exports.py),
                # with the fuzzer's objects stopping or clearing the tracer
                # in the middle of the write.
                with scratch() as sub:
                    path = os.path.join(sub, "out.json" if op == "write_chrome" else "out.pftrace")
                    writer = getattr(export, op)
                    process_name = data.draw(st.one_of(st.just("p"), nasty), label="process_name")
                    out = attempt(lambda t, p, process_name: writer(trace_of(t, process_name=process_name), p),
                                  tracer, path, process_name=process_name, actions=actions,
                                  allowed=(TypeError, ValueError, RuntimeError))
                    if not out.mutated and not out.user and isinstance(process_name, str):
                        assert out.ok == (phase == STOPPED), (out, phase)
                        if out.ok:
                            assert out.value == len(tracer.getEvents())
                            if op == "write_chrome":
                                assert len(frametrace.load(path).events) == out.value
                model = observed_phase(tracer)
            elif op == "work":
                _work()
            elif op == "thread":
                _thread_work()
            elif op == "other_tracer":
                other = frametrace.Tracer(buffer_size=16)
                out = attempt(other.start, allowed=(RuntimeError,))
                assert out.ok == (phase != ACTIVE), (out, phase)
                other.stop()
                if out.ok:
                    assert_valid_trace(other.getEvents(), other.start_ns, other.stop_ns)
            elif op == "orphan":
                # A started tracer whose last reference goes: it stops itself.
                other = frametrace.Tracer(buffer_size=16)
                out = attempt(other.start, allowed=(RuntimeError,))
                assert out.ok == (phase != ACTIVE), (out, phase)
                ref = weakref.ref(other)
                del other, out  # (the exception's traceback refers to it)
                _young_gc()
                assert ref() is None
                if phase != ACTIVE:
                    assert_clean()
            elif op == "setprofile":
                # The setprofile backend refuses to start over another
                # profile function; the monitoring one runs beside it.
                sys.setprofile(lambda *a: None)
                try:
                    out = attempt(tracer.start, allowed=(RuntimeError,))
                    beside = tracer.backend == "monitoring" and phase == NEW
                    assert out.ok == beside, (out, tracer.backend, phase)
                    if out.ok:
                        model = ACTIVE
                finally:
                    sys.setprofile(None)
            elif op == "decorate":
                target = data.draw(st.one_of(st.just(_work), nasty), label="decorated")
                out = attempt(tracer, target)
                assert out.ok == callable(target) or out.user, out
                if out.ok and target is _work:
                    call = attempt(out.value, allowed=(RuntimeError,))
                    assert call.ok == (phase != ACTIVE), (call, phase)
                    if call.ok:
                        used = out.value.tracer
                        assert_valid_trace(used.getEvents(), used.start_ns, used.stop_ns)
                        if used is tracer:
                            model = STOPPED
            if op in ("props", "work", "thread"):
                check_properties(tracer, observed_phase(tracer))
        tracer.stop()
        phase = observed_phase(tracer)
        check_properties(tracer, phase)
        if phase == STOPPED:
            events = tracer.getEvents()
            assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
            count = export.write_chrome(tracer, os.path.join(d, "final.json"))
            assert count == len(events)
            tracer.clear()
        assert observed_phase(tracer) in (NEW, CLEARED)


@fuzz(100)
@given(args=st.lists(st.one_of(nasty, st.lists(nasty, min_size=12, max_size=12)), max_size=2))
@guarded
def test_fuzz_event(args):
    out = attempt(Event, *args)
    if out.ok:
        ev = out.value
        assert isinstance(ev, Event) and len(ev) == 12
        # An event of anything: the reports and checks still only
        # raise what they document.
        _judge_reports([ev], "any")
        _judge_testing_helpers([ev], "any")


def test_fuzz_tracer_lifecycle():
    in_subprocess(fuzz_tracer_lifecycle)
