"""Fuzzing frametrace.reports on mutated and arbitrary events, a Trace's
methods (reports, exports) and frametrace.trace_handler."""
from __future__ import annotations

import contextlib
import io


# First: without hypothesis, the harness skips the module.
from fuzzing import (
    Evil,
    PYTESTMARK,
    PathSpec,
    SUFFIXES,
    _judge_reports,
    attempt,
    cached_trace,
    events_arg,
    floats,
    fuzz,
    guarded,
    ints,
    maybe,
    names,
    nasty,
    path_specs,
    scratch,
    strs,
)
from hypothesis import given
from hypothesis import strategies as st

import frametrace
import report_oracle
from frametrace import _tracer, reports
from frametrace._trace import Trace

pytestmark = PYTESTMARK


# ---- Trace methods, frametrace.trace_handler ---------------------------------------------------


@fuzz(150)
@given(data=st.data(), method=st.sampled_from(["summary", "to_pstats", "to_collapsed", "to_flamegraph_svg",
                                                "to_chrome", "to_perfetto", "save", "frametrace.trace_handler"]))
@guarded
def test_fuzz_trace_methods(data, method):
    trace = cached_trace()
    allowed = (TypeError, ValueError, RuntimeError, OSError)
    if method == "summary":
        kwargs = data.draw(st.fixed_dictionaries({}, optional={
            "sort": maybe(nasty, st.sampled_from(reports.SORT_KEYS)), "limit": st.one_of(st.none(), st.integers(-1, 9), nasty),
            "per_thread": st.one_of(st.booleans(), nasty), "print": st.one_of(st.booleans(), nasty)}), label="kwargs")
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            out = attempt(trace.summary, allowed=allowed, **kwargs)
        if out.ok:
            assert isinstance(out.value, reports.SummaryTable)
            assert (buf.getvalue() == "") == (not kwargs.get("print", True)) or isinstance(kwargs.get("print"), Evil)
        return
    with scratch() as d:
        spec = data.draw(maybe(path_specs, st.builds(lambda n, s: PathSpec("file", n, s, "str"), names,
                                                     st.sampled_from(SUFFIXES))), label="path")
        path, expect = spec.make(d)
        kwargs = {}
        if method == "to_chrome":
            kwargs = data.draw(st.fixed_dictionaries({}, optional={
                "process_name": st.one_of(st.none(), strs, nasty),
                "metadata": st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.one_of(ints, strs, floats), max_size=3), nasty)}),
                label="kwargs")
        elif method == "to_flamegraph_svg":
            kwargs = data.draw(st.fixed_dictionaries({}, optional={"title": maybe(nasty, strs)}), label="kwargs")
        elif method == "frametrace.trace_handler":
            kwargs = data.draw(st.fixed_dictionaries({}, optional={"compress": st.one_of(st.booleans(), nasty)}),
                               label="kwargs")
        if method == "frametrace.trace_handler":
            made = attempt(frametrace.trace_handler, path, **kwargs)
            if not made.ok:
                return
            out = attempt(made.value, trace, allowed=allowed)
        else:
            out = attempt(getattr(trace, method), path, allowed=allowed, **kwargs)
        if expect == "fail" and method != "frametrace.trace_handler":
            assert not out.ok, f"{method} wrote to {path!r}"
        if not out.ok:
            return
        written = out.value
        assert isinstance(written, (str, bytes))
        if method in ("to_chrome", "save", "frametrace.trace_handler") and isinstance(written, str) and not out.mutated:
            meta, pname = kwargs.get("metadata"), kwargs.get("process_name")
            if method != "to_chrome" or ((meta is None or (type(meta) is dict and all(type(k) is str for k in meta)))
                                         and (pname is None or type(pname) is str)):
                loaded = attempt(frametrace.load, written)
                assert loaded.ok, loaded
                assert [tuple(e)[:4] for e in loaded.value.events] == [tuple(e)[:4] for e in trace.events]
                assert [(r.name, r.start_ns, r.end_ns) for r in loaded.value.ranges] == \
                    [(r.name, r.start_ns, r.end_ns) for r in trace.ranges]


@fuzz(150)
@given(data=st.data(), fields=st.fixed_dictionaries({}, optional={
    f: nasty for f in ("events", "ranges", "steps", "session_start_ns", "session_end_ns", "tracer_start_ns",
                       "tracer_stop_ns", "stats", "pid", "cycle",
                       "tracer")}),
       method=st.sampled_from(["save", "metadata", "summary", "to_pstats", "to_collapsed",
                               "to_flamegraph_svg", "to_chrome", "to_perfetto"]))
@guarded
def test_fuzz_trace_fields(data, fields, method):
    """A Trace built by hand from anything: its methods still raise only
    what they document."""
    out = attempt(Trace, **fields)
    assert out.ok, out  # a dataclass: takes anything
    trace = out.value
    allowed = (TypeError, ValueError, RuntimeError, OSError)
    with scratch() as d:
        if method == "metadata":
            out = attempt(trace.metadata, allowed=allowed)
        elif method == "summary":
            out = attempt(trace.summary, print=False, allowed=allowed)
        else:
            path, _ = data.draw(maybe(path_specs, st.builds(lambda n: PathSpec("file", n, ".out", "str"), names)),
                                label="path").make(d)
            out = attempt(getattr(trace, method), path, allowed=allowed)
        if out.ok and method == "save":
            loaded = attempt(frametrace.load, out.value, allowed=(ValueError,))
            if loaded.ok:
                assert isinstance(loaded.value, Trace)


@fuzz(50)
@given(method=st.sampled_from(["to_chrome", "to_perfetto"]), spec=path_specs)
@guarded
def test_fuzz_trace_without_tracer(method, spec):
    """A trace without tracer records (python_steps=0, or load()'s) is written
    in either format from its Events, and reads back."""
    trace = Trace()
    with scratch() as d:
        path, _ = spec.make(d)
        out = attempt(getattr(trace, method), path, allowed=(TypeError, ValueError, OSError))
        if out.ok:
            loaded = attempt(frametrace.load, out.value, allowed=(ValueError,))
            assert loaded.ok and loaded.value.events == [], loaded


@fuzz(150)
@given(data=st.data())
@guarded
def test_fuzz_reports(data):
    events, kind = events_arg(data)
    with scratch() as d:
        _judge_reports(events, kind, data, d)


@fuzz(150)
@given(data=st.data())
@guarded
def test_fuzz_reports_c_pass_matches_the_reference(data):
    """The reports' pass in C (``_tracer._report_pass``, which every report
    runs) against the Python reference (tests/report_oracle.py) on the
    same events: real, mutated (Event(values), tuples, lists), shuffled,
    anything: the same columns, or the same error."""
    events, _ = events_arg(data)
    if not isinstance(events, (list, tuple)):
        events = getattr(events, "events", events)
    if not isinstance(events, (list, tuple)):
        return  # the reports' argument checks: test_fuzz_reports
    events = list(events)

    def outcome(fn, mode):
        out = attempt(fn, events, mode, allowed=(TypeError, ValueError, IndexError))
        if out.ok:
            return "ok", [c.tolist() if isinstance(c, memoryview) else c for c in out.value]
        exc = out.exc
        kind = next((t for t in (TypeError, ValueError, IndexError) if isinstance(exc, t)),
                    type(exc))
        return "error", kind, str(exc)

    def c_pass(evs, mode):
        out = _tracer._report_pass(evs, mode)
        return out[:11] if mode == 0 else out

    for mode in (0, 1, 2):
        c = outcome(c_pass, mode)
        reference = outcome(report_oracle.columns, mode)
        assert c == reference, mode
    weight = data.draw(st.sampled_from(["self", "calls"]), label="weight")
    threads = data.draw(st.booleans(), label="threads")
    c = attempt(reports.collapsed_stacks, events, weight=weight, threads=threads,
                allowed=(TypeError, ValueError, IndexError))
    if c.ok:
        assert c.value == report_oracle.collapsed_lines(events, weight, threads)
