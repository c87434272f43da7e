"""Fuzzing frametrace.reports on mutated and arbitrary events, a Trace's
methods (reports, exports) and frametrace.trace_handler."""
from __future__ import annotations

import contextlib
import os
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
from frametrace import reports
from frametrace.session import Trace

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
    as Chrome JSON from its Events; .pftrace is refused, naming why."""
    trace = Trace()
    with scratch() as d:
        path, _ = spec.make(d)
        out = attempt(getattr(trace, method), path, allowed=(TypeError, ValueError, OSError))
        if method == "to_perfetto":
            # A path that is no path is a TypeError first.
            assert not out.ok and isinstance(out.exc, (TypeError, ValueError)), out
            assert isinstance(out.exc, TypeError) or "tracer's records" in str(out.exc)


@fuzz(150)
@given(data=st.data())
@guarded
def test_fuzz_reports(data):
    events, kind = events_arg(data)
    with scratch() as d:
        _judge_reports(events, kind, data, d)


@fuzz(150)
@given(data=st.data(), weight=st.sampled_from(["self", "calls"]), threads=st.booleans())
@guarded
def test_fuzz_reports_c_pass_matches_python_pass(data, weight, threads):
    """The reports' pass in C (``_tracer._report_pass`` and the collapsed
    stacks' helpers) against the Python pass, the reference, on the same
    events: real, mutated (Event(values) the C pass reads by value, or
    declines), shuffled, anything: the same reports, or the same error."""
    events, _ = events_arg(data)

    def every_report(d):
        def run(fn, *args, **kwargs):
            out = attempt(fn, *args, allowed=(TypeError, ValueError), **kwargs)
            return ("ok", out.value) if out.ok else ("error", type(out.exc), str(out.exc))

        results = [
            run(lambda: str(reports.summary(events, limit=None))),
            run(lambda: str(reports.summary(events, per_thread=True, limit=None))),
            run(reports.collapsed_stacks, events, weight=weight, threads=threads),
        ]
        for name, write in (("p.pstats", reports.write_pstats),
                            ("f.svg", reports.write_flamegraph_svg)):
            path = os.path.join(d, name)
            out = run(write, events, path)
            results.append(out if out[0] == "error" else ("ok", open(path, "rb").read()))
        return results

    with scratch() as d:
        c = every_report(d)
        reports._use_c = False
        try:
            python = every_report(d)
        finally:
            reports._use_c = True
    assert c == python
