"""The bugs the fuzzers found, as minimal reproducers (now regression tests)."""
from __future__ import annotations

import json
import math
import textwrap

import pytest

# First: without hypothesis, the harness skips the module.
from fuzzing import (
    PYTESTMARK,
    _chrome_text,
    cached_events,
    loader_bases,
    run_in_subprocess,
    stopped_tracer,
)

import frametrace
from frametrace import Event, _testing, export, loader, reports, testing
from frametrace._trace import RangeRecord, StepRecord, Trace
from support import trace_of

pytestmark = PYTESTMARK


# ---- regressions: the bugs this file found (fixed in da0930d), as minimal reproducers ---------------
# Run in a subprocess where they crashed the interpreter.


def _subprocess_ok(code):
    proc = run_in_subprocess(textwrap.dedent(code), timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        f"exit status {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


@pytest.mark.parametrize("call", ["replay", "ticks_to_ns", "perfetto_track", "perfetto_span"])
def test_regression_list_instead_of_tuple_is_systemerror(call, tmp_path):
    """Found by this file's fuzzing, fixed since: A record, anchor, track or span given as a
    list instead of a tuple reaches PyArg_ParseTuple (csrc/testing/records.c,
    csrc/export_perfetto.c), which raises SystemError('new style getargs format but argument
    is not a tuple') instead of TypeError"""
    tracer = stopped_tracer()
    path = str(tmp_path / "x.pftrace")
    calls = {
        "replay": lambda: _testing.replay([[0, "call", 1]], base_ts=0, stop_ns=10),
        "ticks_to_ns": lambda: _testing.ticks_to_ns([[0, 0]], [1]),
        "perfetto_track": lambda: tracer._write_perfetto(path, pid=1, process_name="p",
                                                         thread_names=[None] * len(tracer._threads),
                                                         tracks=[["t", 0, []]]),
        "perfetto_span": lambda: tracer._write_perfetto(path, pid=1, process_name="p",
                                                        thread_names=[None] * len(tracer._threads),
                                                        tracks=[("t", 0, [["s", 0, 1]])]),
    }
    with pytest.raises(TypeError):
        calls[call]()


@pytest.mark.parametrize("how", ["grow_ticks", "shrink_ticks", "shrink_anchors"])
def test_regression_ticks_to_ns_lists_mutated_while_parsed(how):
    """Found by this file's fuzzing, fixed since: ticks_to_ns (csrc/testing/records.c) iterates its
    lists through borrowed items and sizes read once: an __index__ that grows the ticks list
    writes past the result list (heap-buffer-overflow, segfault); one that shrinks it
    returns a list holding NULLs; one that shrinks the anchors list reads freed memory
    (segfault)"""
    _subprocess_ok(f"""
        from frametrace import _tracer
        from frametrace import _testing
        how = {how!r}
        ticks, anchors = [], [(0, 0), (10, 10)]
        class Index:
            def __index__(self):
                if how == "grow_ticks":
                    ticks.extend(range(100_000))
                elif how == "shrink_ticks":
                    ticks.clear()
                else:
                    anchors.clear()
                return 1
        if how == "shrink_anchors":
            anchors[:] = [(0, 0), (Index(), 5), (20, 20), (30, 30)]
            ticks[:] = [1, 2]
        else:
            ticks[:] = [Index(), 1, 2, 3]
        try:
            result = _testing.ticks_to_ns(anchors, ticks)
        except (TypeError, ValueError):
            pass
        else:
            assert all(type(v) is int for v in result), repr(result)
        print("ok")
    """)


@pytest.mark.parametrize("which", ["tracks", "spans"])
def test_regression_write_perfetto_tracks_mutated_while_parsed(which):
    """Found by this file's fuzzing, fixed since: _write_perfetto (csrc/export_perfetto.c)
    parses tracks and spans through borrowed list items: a category's or a time's __index__
    that clears the list frees the tuple (and its name and spans) still being parsed and
    used (AddressSanitizer: heap-use-after-free in emit_spans, export_perfetto.c:300)"""
    _subprocess_ok(f"""
        import frametrace
        which = {which!r}
        tracer = frametrace.Tracer(buffer_size=64)
        with tracer:
            len([])
        freed, freed_while_parsed = [], []
        class Name(str):
            def __del__(self):
                freed.append(str(self))
        class Index:
            def __init__(self, lst):
                self.lst = lst
            def __index__(self):
                self.lst.clear()
                # The tuple being parsed (and its name) must still be alive.
                freed_while_parsed.extend(freed)
                return 1
        tracks = []
        if which == "tracks":
            tracks.append((Name("track"), Index(tracks), [(Name("span"), 0, 1)]))
        else:
            spans = []
            spans.append((Name("span"), Index(spans), 5))
            tracks.append((Name("track"), 0, spans))
        try:
            tracer._write_perfetto("/dev/null", pid=1, process_name="p",
                                   thread_names=[None] * len(tracer._threads), tracks=tracks)
        except Exception as exc:
            error = exc
        else:
            error = None
        assert not freed_while_parsed, "freed while in use: " + repr(freed_while_parsed)
        assert error is None or isinstance(error, (TypeError, ValueError)), repr(error)
        print("ok")
    """)


@pytest.mark.parametrize("where", ["thread_names_key", "track_category"])
def test_regression_write_perfetto_tracer_cleared_midway(where):
    """Found by this file's fuzzing, fixed since: _write_perfetto (csrc/export_perfetto.c)
    reads the tracer again (threads, nthreads, funcs) after running user code (a
    thread_names key's __eq__, a track's __index__): a tracer.clear() there makes it use a
    freed ft_thread (AddressSanitizer: heap-use-after-free, export_perfetto.c:390) and
    return the event count while writing none of the events"""
    _subprocess_ok(f"""
        import frametrace, sys
        sys.path.insert(0, ".")
        from pbwire import message
        where = {where!r}
        tracer = frametrace.Tracer(buffer_size=64)
        with tracer:
            len([])
        n = len(tracer.getEvents())
        tid = tracer._threads[0][0]
        class Key:
            def __hash__(self):
                return hash(tid)
            def __eq__(self, other):
                tracer.clear()
                return False
        class Index:
            def __index__(self):
                tracer.clear()
                return 0
        # thread_names is one name per thread now (a list): no key to compare.
        names, tracks = [None] * len(tracer._threads), []
        if where == "thread_names_key":
            names[0] = Key()
        else:
            tracks.append(("t", Index(), []))
        import tempfile, os
        path = os.path.join(tempfile.mkdtemp(), "t.pftrace")
        try:
            count, _depth = tracer._write_perfetto(path, pid=1, process_name="p", thread_names=names,
                                                   tracks=tracks)
        except RuntimeError:
            print("ok")  # refusing is fine
            raise SystemExit
        with open(path, "rb") as fh:
            packets = [message(p) for p in message(fh.read())[1]]
        slices = sum(1 for p in packets if 11 in p and message(p[11][0]).get(9) == [1])
        assert slices == count == n, (slices, count, n)
        print("ok")
    """)


def test_regression_ticks_to_ns_wide_anchors_wrap():
    """Found by this file's fuzzing, fixed since: ft_clock_to_ns (csrc/clock.c) takes the
    differences of anchors and ticks in int64: anchors spanning more than 2**63 wrap around
    and give ns outside the anchors' range (e.g. anchors (0, -2**63), (2, 2**63-1): tick 1
    gives -2**63)"""
    assert -1 <= _testing.ticks_to_ns([(0, -(2**63)), (2, 2**63 - 1)], [1])[0] <= 0
    assert _testing.ticks_to_ns([(-(2**63), 0), (2**63 - 1, 10)], [0]) == [5]


@pytest.mark.parametrize("writer", ["write_chrome", "write_perfetto"])
@pytest.mark.parametrize("bad", ["tracer", "ranges", "steps"])
def test_regression_export_unchecked_arguments_attributeerror(writer, bad, tmp_path):
    """Found by this file's fuzzing, fixed since: export.write_chrome/write_perfetto read
    attributes of their tracer, ranges and steps arguments unchecked: a non-Tracer tracer,
    or a range/step that is not a record, raises AttributeError (e.g. "'NoneType' object has
    no attribute 'stop_ns'") instead of TypeError"""
    kwargs = {"ranges": [1]} if bad == "ranges" else {"steps": [1]} if bad == "steps" else {}
    tracer = None if bad == "tracer" else stopped_tracer()
    with pytest.raises(TypeError):
        getattr(export, writer)(str(tmp_path / "x"), tracer, **kwargs)


@pytest.mark.parametrize("case", ["chrome_pid", "chrome_origin", "perfetto_pid", "perfetto_range",
                                  "perfetto_step", "perfetto_inf_key"])
def test_regression_export_int64_overflow(case, tmp_path):
    """Found by this file's fuzzing, fixed since: export.write_chrome/write_perfetto pass
    pid, origin_ns and range/step times on to the C writers' int64 conversions unchecked:
    2**64 raises OverflowError ("int too big to convert"), and write_perfetto's int() of a
    float('inf') thread_names key too, instead of ValueError/TypeError"""
    tracer = stopped_tracer()
    path = str(tmp_path / "x")
    call = {
        "chrome_pid": lambda: export.write_chrome(trace_of(tracer, pid=2**64), path),
        "chrome_origin": lambda: export.write_chrome(trace_of(tracer, origin_ns=2**64), path),
        "perfetto_pid": lambda: export.write_perfetto(trace_of(tracer, pid=2**64), path),
        "perfetto_range": lambda: export.write_perfetto(trace_of(tracer, ranges=[RangeRecord("r", 1, 2**64, 2**64)]), path),
        "perfetto_step": lambda: export.write_perfetto(trace_of(tracer, steps=[StepRecord("s", 0, 0, 2**64)]), path),
        "perfetto_inf_key": lambda: export.write_perfetto(trace_of(tracer, threads=[math.inf]), path),
    }[case]
    with pytest.raises((TypeError, ValueError)):
        call()


@pytest.mark.parametrize("bad", ["process_name", "thread_names"])
def test_regression_write_chrome_accepts_nonstr_names(bad, tmp_path):
    """Found by this file's fuzzing, fixed since: export.write_chrome (and Trace.to_chrome)
    take any JSON value as process_name or thread_names' names (write_perfetto rejects them:
    TypeError) and write a file frametrace.load() then rejects ("traceEvents[0]
    (process_name).args.name: a string expected, not [null]")"""
    tracer = stopped_tracer()
    t = tracer.threads[0]
    named = [frametrace.ThreadInfo((t.serial, t.thread_id, t.native_thread_id, 5, t.dropped))]
    kwargs = {"process_name": [None]} if bad == "process_name" else {"threads": named}
    path = str(tmp_path / "t.json")
    try:
        export.write_chrome(trace_of(tracer, **kwargs), path)
    except TypeError:
        return  # rejected, as write_perfetto does
    frametrace.load(path)


@pytest.mark.parametrize("call", ["write_pstats", "write_flamegraph_svg", "pstats_label", "assert_called"])
def test_regression_reports_nonstr_event_name_attributeerror(call, tmp_path):
    """Found by this file's fuzzing, fixed since: reports.write_pstats/pstats_label,
    reports.write_flamegraph_svg and testing.assert_called call str methods (rsplit,
    rpartition, encode) on event names without checking them: an Event whose name is not a
    str raises AttributeError instead of TypeError"""
    ev = list(cached_events()[0])
    ev[0] = 5
    events = [Event(ev)]
    fn = {
        "write_pstats": lambda: reports.write_pstats(events, str(tmp_path / "x.pstats")),
        "write_flamegraph_svg": lambda: reports.write_flamegraph_svg(events, str(tmp_path / "x.svg")),
        "pstats_label": lambda: reports.pstats_label(5, "<built-in>", 0, "c"),
        "assert_called": lambda: testing.assert_called(events, "absent"),
    }[call]
    with pytest.raises((TypeError, AssertionError)):
        fn()


@pytest.mark.parametrize("events", [[None], {}])
def test_regression_describe_event_unchecked_events(events):
    """Found by this file's fuzzing, fixed since: testing.describe_event(events, index) does
    not check its events (the other helpers do): describe_event([None], 0) raises
    AttributeError ("'NoneType' object has no attribute 'lineno'"), describe_event({}, 0)
    KeyError, instead of TypeError"""
    with pytest.raises(TypeError):
        testing.describe_event(events, 0)


@pytest.mark.parametrize("fields", [{"stats": 5}, {"ranges": ["r"]}, {"steps": [1]}],
                         ids=["stats", "ranges", "steps"])
def test_regression_trace_save_unchecked_fields(fields, tmp_path):
    """Found by this file's fuzzing, fixed since: Trace.save() (and Trace.metadata()) read
    fields of the trace's metadata and ._asdict() of ranges/steps unchecked:
    Trace(ranges=['r']).save(path) raises AttributeError, not TypeError"""
    with pytest.raises(TypeError):
        Trace(**fields).save(str(tmp_path / "t.json"))


def _chrome_with(tmp_path, old, new):
    text = loader_bases()["plain"]
    assert old in text
    path = tmp_path / "t.json"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def test_regression_merge_writes_what_load_rejects(tmp_path):
    """Found by this file's fuzzing, fixed since: loader.merge() checks less than load(): an
    input whose process_name (or thread_name) metadata event has a non-str args.name, which
    load() rejects with a ValueError, is merged, and merge writes a file load() rejects too
    ("traceEvents[0] (process_name).args.name: a string expected, not null")"""
    path = _chrome_with(tmp_path, '"args":{"name":"python ', '"args":{"name":null,"x":"')
    with pytest.raises(ValueError):
        frametrace.load(path)
    try:
        loader.merge([str(path)], str(tmp_path / "merged.json"))
    except ValueError:
        return  # rejected, naming the input: fine
    frametrace.load(tmp_path / "merged.json")


@pytest.mark.parametrize("where", ["event", "metadata"])
def test_regression_load_deep_nesting_recursionerror(where, tmp_path):
    """Found by this file's fuzzing, fixed since: loader: deeply nested JSON (an event or
    otherData nested 5000 deep) raises RecursionError out of frametrace.load() (json's
    scanner), not the documented ValueError naming the file"""
    deep = "[" * 100_000 + "]" * 100_000
    old, new = ('"traceEvents":[', '"traceEvents":[' + deep + ",") if where == "event" else \
        ('"metadata":{"cycle"', '"metadata":{"x":' + deep + ',"cycle"')
    with pytest.raises(ValueError):
        frametrace.load(_chrome_with(tmp_path, old, new))


def test_regression_load_huge_exponent_decimal_overflow(tmp_path):
    """Found by this file's fuzzing, fixed since: loader._ns: a ts or dur with a huge
    exponent (1e999999) overflows the decimal context when multiplied by 1000:
    frametrace.load() raises decimal.Overflow (an ArithmeticError), not ValueError"""
    with pytest.raises(ValueError):
        frametrace.load(_chrome_with(tmp_path, '"ts":0.000,', '"ts":1e999999,'))


def test_regression_load_huge_exponent_is_slow(tmp_path):
    """Found by this file's fuzzing, fixed since: loader._ns turns a number like 1e120000
    (us) into an exact int (int(Decimal): quadratic in the exponent): one 8-byte number
    makes frametrace.load() take ~0.7 s (1e999990: ~40 s), and then accept an event
    10**120003 ns long"""
    import time

    path = _chrome_with(tmp_path, '"dur":', '"dur":1e999990,"x":')  # was ~40 s
    start = time.perf_counter()
    try:
        frametrace.load(path)
    except ValueError:
        pass
    assert time.perf_counter() - start < 2


# ---- regressions: bugs this file found, fixed after 2832691 ---------------------------------------


@pytest.mark.parametrize("far", [2**53 + 1, 2**60 + 1])
def test_write_chrome_ranges_far_from_origin_keep_ns(far, tmp_path):
    """Found by this file's fuzzing, fixed since: export.write_chrome wrote ranges' and
    steps' ts/dur through a float (round(ns / 1000, 3)), unlike the events: a range at
    2**60+1 ns from origin_ns loaded back at 2**60+24.  Now exact decimal text."""
    tracer = stopped_tracer()
    tid = tracer._threads[0][0]
    path = str(tmp_path / "t.json")
    export.write_chrome(trace_of(tracer, origin_ns=0, ranges=[RangeRecord("r", tid, far, far + 2)],
                                 steps=[StepRecord("step#0", 0, far, far + 6)]), path)
    trace = frametrace.load(path)
    assert [(r.start_ns, r.end_ns) for r in trace.ranges] == [(far, far + 2)]
    assert [(s.start_ns, s.end_ns) for s in trace.steps] == [(far, far + 6)]


@pytest.mark.parametrize("which", ["base_ts", "stop_ns"])
def test_replay_takes_int64_min(which):
    """Found by this file's fuzzing, fixed since: replay (csrc/testing/records.c) marked base_ts
    and stop_ns missing with LLONG_MIN, so -2**63, a valid int64, raised TypeError."""
    kwargs = {"base_ts": 0, "stop_ns": 0, which: -(2**63)}
    assert isinstance(_testing.replay([], **kwargs), list)


def test_merge_rejects_events_load_rejects(tmp_path):
    """Found by this file's fuzzing, fixed since: loader.merge() checked an input's events
    less than load() did: a step event without "dur" was merged into a file load()
    rejects.  Both now check events with loader._parse_event."""
    doc = json.loads(loader_bases()["session"])
    step = next(e for e in doc["traceEvents"] if e.get("cat") == "step")
    del step["dur"]
    path = tmp_path / "t.json"
    path.write_text(_chrome_text(doc), encoding="utf-8")
    with pytest.raises(ValueError):
        frametrace.load(path)
    try:
        loader.merge([str(path)], str(tmp_path / "merged.json"))
    except ValueError:
        return  # rejected, naming the input: fine
    frametrace.load(tmp_path / "merged.json")


def test_merge_deep_nesting_is_valueerror(tmp_path):
    """Found by this file's fuzzing, fixed since: loader.merge() turned RecursionError into
    ValueError only in its first pass: a top-level member nested 100000 deep raised
    RecursionError from its second.  Both passes and load() share _named_errors()."""
    path = _chrome_with(tmp_path, '"displayTimeUnit":"ns"',
                        '"displayTimeUnit":' + "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError):
        frametrace.load(path)
    with pytest.raises(ValueError):
        loader.merge([str(path)], str(tmp_path / "merged.json"))


# ---- found by longer runs (FRAMETRACE_FUZZ=400) of test_fuzz_reports.py, 2026-12-05 ----------------


def test_regression_float_times_reached_the_flame_graph_as_overflow(tmp_path):
    """An event whose times were floats (-inf) went through the reports'
    Python pass and made the flame graph's pixel arithmetic raise
    OverflowError; the pass refuses times that are not ints (TypeError),
    as the C pass declines them."""
    events = list(cached_events())
    events[1] = Event(tuple(events[1])[:6] + (float("-inf"),) + tuple(events[1])[7:])
    for report in (lambda: reports.write_flamegraph_svg(events, tmp_path / "f.svg"),
                   lambda: reports.summary(events), lambda: reports.collapsed_stacks(events)):
        with pytest.raises(TypeError, match="event 1 .*start_ns and end_ns must be int"):
            report()


def test_regression_trace_with_a_tracer_that_is_not_one(tmp_path):
    """Trace(tracer=True).save() raised AttributeError from the events
    built on first read (the lazy Trace.events)."""
    for method in ("save", "summary"):
        with pytest.raises(TypeError, match="Trace.tracer must be a frametrace.Tracer or None, not bool"):
            getattr(Trace(tracer=True), method)(*([tmp_path / "t.json"] if method == "save" else []))


HUGE_NUMBER_CHILD = r"""
import sys, time
from frametrace.loader import load, merge
path, out = sys.argv[1], sys.argv[2]
for name, read in (("load", load), ("merge", lambda p: merge([p], out))):
    start = time.perf_counter()
    try:
        read(path)
        said = "ok"
    except ValueError as exc:
        said = str(exc)
    print(name, round(time.perf_counter() - start, 3), said)
"""


@pytest.mark.parametrize("old, new", [
    ('"metadata":{"cycle"', '"metadata":{"x":1e999999999,"cycle"'),
    ('"args":{"file":"<built-in>:0"}', '"args":{"v":-1e999999999,"file":"<built-in>:0"}'),
    ('{"ph":"M","name":"process_name"',
     '{"ph":"i","s":"g","pid":1,"tid":1,"ts":0,"name":"x","args":{"v":[1.5e999999999]}},\n'
     '{"ph":"M","name":"process_name"'),
], ids=["metadata", "event-args", "another-event"])
def test_regression_merge_of_a_huge_exponent_runs_for_ever(old, new, tmp_path):
    """merge made the exact int of every decimal it wrote back (int(Decimal("1e999999999")),
    a billion digits): one such number anywhere in a file kept it busy for ever, where
    load() took 0.2 s.  Both now answer at once: merge with a ValueError naming the file
    and the number, which no float holds"""
    import subprocess
    import sys

    path = _chrome_with(tmp_path, old, new)
    out = subprocess.run([sys.executable, "-c", HUGE_NUMBER_CHILD, str(path), str(tmp_path / "m.json")],
                         capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    (load_name, load_s, load_said), (merge_name, merge_s, merge_said) = (l.split(" ", 2) for l in out)
    assert float(load_s) < 5 and float(merge_s) < 5, out
    assert load_said == "ok", out
    assert merge_said.startswith(f"{path}: a number out of range: ") and "E+999999999" in merge_said, out
    assert not (tmp_path / "m.json").exists()


def test_regression_torch_trace_with_a_huge_time_is_overflowerror(tmp_path):
    """torch.profiler's traces are read with json (1e999 a float, inf): a ts of 1e999 made
    merge raise OverflowError (round(inf)), not the ValueError naming the file"""
    path = tmp_path / "torch.json"
    path.write_text(json.dumps({"baseTimeNanoseconds": 10**18, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0},
    ]}).replace('"ts": 1.0', '"ts": 1e999'), encoding="utf-8")
    with pytest.raises(ValueError, match=r"traceEvents\[0\]: inf us is out of range"):
        loader.merge([path], tmp_path / "m.json")


def test_regression_a_line_number_of_5000_digits_is_not_named(tmp_path):
    """A line number ("path:line" in args.file) was converted whatever its length: 5000
    digits raised int()'s own ValueError ("Exceeds the limit (4300 digits)..."), which
    neither names the file nor what was wrong"""
    path = _chrome_with(tmp_path, '"args":{"file":"<built-in>:0"}', '"args":{"file":"x:' + "9" * 5000 + '"}')
    with pytest.raises(ValueError, match=rf"^{path}: traceEvents\[\d+\]\.args\.file: \"path:line\" expected"):
        frametrace.load(path)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_regression_nan_is_read_and_merged_into_a_file_that_is_no_json(constant, tmp_path):
    """The reader took NaN and Infinity (Python's json does, JSON has neither): merge wrote
    them back, a file no strict JSON reader (Perfetto's) takes"""
    path = _chrome_with(tmp_path, '"metadata":{"cycle"', '"metadata":{"x":' + constant + ',"cycle"')
    for read in (frametrace.load, lambda p: loader.merge([p], tmp_path / "m.json")):
        with pytest.raises(ValueError, match=rf"^{path}: not JSON: {constant} \(no JSON number"):
            read(path)
    assert not (tmp_path / "m.json").exists()
