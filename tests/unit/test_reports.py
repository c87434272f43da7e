"""frametrace.reports: summary tables, pstats files, collapsed stacks and SVG
flame graphs, on real traces of known code and on hand-built event lists
where the arithmetic has to be exact."""
import io
import marshal
import pstats
import xml.etree.ElementTree as ET

import pytest

import frametrace
from frametrace import reports
from support import frames_of, needs_plain_allocator
from targets import calls

CALLS = calls.__file__


def ev(name, start, end, parent, depth, *, tid=7, kind="py", filename="m.py", lineno=1,
       oas=False, oast=False):
    if kind == "c":
        filename, lineno = "<built-in>", 0
    return frametrace.Event((name, filename, lineno, kind, tid, tid + 1000, start, end, depth,
                             parent, oas, oast))


US = 1000  # ns


def tree():
    """main > (a > len), a, (b > a), times in microseconds."""
    return [
        ev("main", 0, 100 * US, -1, 0, lineno=1),                    # 0
        ev("a", 10 * US, 40 * US, 0, 1, lineno=5),                   # 1
        ev("len", 15 * US, 20 * US, 1, 2, kind="c"),                 # 2
        ev("a", 50 * US, 70 * US, 0, 1, lineno=5),                   # 3
        ev("b", 75 * US, 95 * US, 0, 1, lineno=9),                   # 4
        ev("a", 80 * US, 90 * US, 4, 2, lineno=5),                   # 5
    ]


def rows_by_name(table):
    return {r.name: r for r in table.rows}


# ---- summary ------------------------------------------------------------------


def test_summary_exact_arithmetic():
    table = reports.summary(tree(), limit=None)
    rows = rows_by_name(table)
    assert table.traced_ns == 100 * US
    assert table.functions == 4 and table.calls == 6
    main, a, b, ln = rows["main"], rows["a"], rows["b"], rows["len"]
    assert (main.calls, main.total_ns, main.self_ns) == (1, 100 * US, 30 * US)
    assert (a.calls, a.primitive_calls, a.total_ns, a.self_ns) == (3, 3, 60 * US, 55 * US)
    assert (b.calls, b.total_ns, b.self_ns) == (1, 20 * US, 10 * US)
    assert (ln.calls, ln.total_ns, ln.self_ns) == (1, 5 * US, 5 * US)
    assert a.mean_ns == 20 * US
    assert a.share == pytest.approx(0.55) and main.share == pytest.approx(0.30)
    assert sum(r.share for r in table.rows) == pytest.approx(1.0)
    assert (a.filename, a.lineno, a.kind, a.thread_id) == ("m.py", 5, "py", None)
    assert a.function == "a (m.py:5)" and ln.function == "len"
    assert not any(r.capped for r in table.rows)
    # Default order: self time descending.
    assert [r.name for r in table.rows] == ["a", "main", "b", "len"]


def test_summary_recursion_counts_outermost_time_once():
    events = [
        ev("f", 0, 100, -1, 0),
        ev("f", 10, 90, 0, 1),
        ev("f", 20, 80, 1, 2),
        ev("g", 30, 40, 2, 3, lineno=2),
        # mutual recursion after it
        ev("a", 200, 300, -1, 0, lineno=3),
        ev("b", 210, 290, 4, 1, lineno=4),
        ev("a", 220, 280, 5, 2, lineno=3),
        ev("b", 230, 270, 6, 3, lineno=4),
    ]
    rows = rows_by_name(reports.summary(events))
    f, g, a, b = rows["f"], rows["g"], rows["a"], rows["b"]
    assert (f.calls, f.primitive_calls, f.total_ns, f.self_ns) == (3, 1, 100, 90)
    assert f.mean_ns == pytest.approx(100 / 3)
    assert (g.calls, g.total_ns, g.self_ns) == (1, 10, 10)
    assert (a.calls, a.primitive_calls, a.total_ns, a.self_ns) == (2, 1, 100, 40)
    assert (b.calls, b.primitive_calls, b.total_ns, b.self_ns) == (2, 1, 80, 60)


def test_sort_and_limit():
    events = tree()
    order = lambda **kw: [r.name for r in reports.summary(events, **kw).rows]  # noqa: E731
    assert order(sort="self") == ["a", "main", "b", "len"]
    assert order(sort="total") == ["main", "a", "b", "len"]
    assert order(sort="calls") == ["a", "b", "len", "main"]  # ties by name
    assert order(sort="mean") == ["main", "a", "b", "len"]
    assert order(sort="name") == ["a", "b", "len", "main"]
    assert order(sort="total", limit=2) == ["main", "a"]
    table = reports.summary(events, limit=0)
    assert table.rows == [] and table.functions == 4 and len(table) == 0
    assert len(reports.summary(events, limit=None)) == 4
    assert "top 2 shown" in str(reports.summary(events, limit=2))


def two_threads():
    return [
        ev("main", 0, 100, -1, 0, tid=1),             # 0
        ev("worker", 5, 55, -1, 0, tid=2, lineno=2),  # 1
        ev("a", 10, 20, 0, 1, tid=1, lineno=3),       # 2
        ev("a", 20, 30, 1, 1, tid=2, lineno=3),       # 3  interleaved threads
    ]


def test_per_thread():
    merged = reports.summary(two_threads())
    rows = rows_by_name(merged)
    assert merged.traced_ns == 150 and merged.threads == {}
    assert (rows["a"].calls, rows["a"].self_ns) == (2, 20)
    assert rows["a"].share == pytest.approx(20 / 150)

    table = reports.summary(two_threads(), per_thread=True, thread_names={1: "MainThread"})
    assert list(table.threads) == [1, 2]
    t1, t2 = table.threads[1], table.threads[2]
    assert t1.traced_ns == 100 and t2.traced_ns == 50
    assert [(r.name, r.self_ns, r.thread_id) for r in t1.rows] == [("main", 90, 1), ("a", 10, 1)]
    assert [(r.name, r.self_ns, r.thread_id) for r in t2.rows] == [("worker", 40, 2), ("a", 10, 2)]
    assert rows_by_name(t2)["a"].share == pytest.approx(0.2)
    assert table.rows == t1.rows + t2.rows
    text = str(table)
    assert "thread 1 (MainThread)" in text and "thread 2\n" in text
    limited = reports.summary(two_threads(), per_thread=True, limit=1)
    assert [len(t.rows) for t in limited.threads.values()] == [1, 1]
    assert repr(limited).endswith(", 2 threads>")
    one = reports.summary(two_threads()[::2], per_thread=True)  # thread 1's
    assert repr(one).endswith(", 1 thread>") and str(one).startswith("1 thread, ")


def test_text_table_format():
    events = tree()
    events[0] = ev("main", 0, 100 * US, -1, 0, lineno=1, oast=True)
    text = str(reports.summary(events))
    lines = text.splitlines()
    assert lines[0].startswith("4 functions, 6 calls, 0.100 ms traced (its outermost calls' time)")
    assert lines[1].split() == ["calls", "total", "ms", "self", "ms", "mean", "ms", "share",
                                "function"]
    body = lines[2:6]
    assert body[0].split() == ["3", "0.060", "0.055", "0.020", "55.0%", "a", "(m.py:5)"]
    assert body[1].split() == ["1", "0.100", "0.030", "0.100", "30.0%", "*", "main", "(m.py:1)"]
    assert body[3].split() == ["1", "0.005", "0.005", "0.005", "5.0%", "len"]
    # Aligned: every column ends at the same place on every line.
    col = body[0].index("a (m.py:5)")
    assert body[1][col - 2:].startswith("* main (m.py:1)")
    assert body[3][col:] == "len"
    assert len({l.index("%") for l in lines[2:6]}) == 1
    assert lines[1].index("share") + len("share") == body[0].index("%") + 1
    assert lines[-1].startswith("* capped:")
    out = io.StringIO()
    reports.summary(events).print(file=out)
    assert out.getvalue() == text + "\n"


def test_bad_arguments():
    events = tree()
    with pytest.raises(ValueError, match="'self', 'total', 'calls', 'mean', 'name'"):
        reports.summary(events, sort="cumtime")
    with pytest.raises(ValueError, match="sort"):
        reports.summary(events, sort=None)
    with pytest.raises(ValueError, match="limit"):
        reports.summary(events, limit=-1)
    for bad in (1.5, "3", True):
        with pytest.raises(TypeError, match="limit"):
            reports.summary(events, limit=bad)
    with pytest.raises(TypeError, match="list of frametrace.Event, not int"):
        reports.summary(42)
    with pytest.raises(TypeError, match="event 1"):
        reports.summary([events[0], ("a", "m.py", 5)])
    forward = [ev("a", 0, 10, 1, 1), ev("b", 0, 10, -1, 0)]
    with pytest.raises(ValueError, match="event 0"):
        reports.summary(forward)
    with pytest.raises(ValueError, match="event 0"):
        reports.collapsed_stacks(forward)
    cross = [ev("a", 0, 10, -1, 0, tid=1), ev("b", 0, 5, 0, 1, tid=2)]
    with pytest.raises(ValueError, match="another thread"):
        reports.summary(cross)
    with pytest.raises(ValueError, match="another thread"):
        reports.collapsed_stacks(cross)
    with pytest.raises(ValueError, match="weight"):
        reports.collapsed_stacks(events, weight="total")
    with pytest.raises(TypeError, match="width"):
        reports.write_flamegraph_svg(events, "unused.svg", width="wide")
    with pytest.raises(ValueError, match="width"):
        reports.write_flamegraph_svg(events, "unused.svg", width=10)
    with pytest.raises(TypeError, match="title"):
        reports.write_flamegraph_svg(events, "unused.svg", title=None)
    with pytest.raises(TypeError, match="thread_names"):
        reports.summary(events, thread_names=[1])


def test_empty_and_trace_input(tmp_path):
    table = reports.summary([])
    assert table.rows == [] and table.traced_ns == 0 and "(no events)" in str(table)
    assert reports.collapsed_stacks([]) == []
    assert marshal.load(open(reports.write_pstats([], tmp_path / "e.pstats"), "rb")) == {}
    ET.parse(reports.write_flamegraph_svg([], tmp_path / "e.svg"))
    # A frametrace.Trace: its events and its threads' names.
    trace = frametrace.Trace(events=[frametrace.Event(tuple(e)[:12] + (1, False)) for e in tree()],
                             threads=[frametrace.ThreadInfo((1, 7, 1007, "MainThread", 0))])
    assert reports.summary(trace).calls == 6
    assert reports.collapsed_stacks(trace)[0] == "MainThread (thread 7);main (m.py:1) 30"
    # Events out of call order but parents first: still exact.
    shuffled = [tree()[i] for i in (0, 4, 1, 3, 2, 5)]
    remap = {old: new for new, old in enumerate((0, 4, 1, 3, 2, 5))}
    shuffled = [frametrace.Event(tuple(e)[:9] + (remap.get(e.parent, -1),) + tuple(e)[10:])
                for e in shuffled]
    assert ({(r.name, r.calls, r.total_ns, r.self_ns) for r in reports.summary(shuffled).rows}
            == {(r.name, r.calls, r.total_ns, r.self_ns) for r in reports.summary(tree()).rows})


# ---- pstats -------------------------------------------------------------------


def test_pstats_hand_built_exact(tmp_path):
    events = [
        ev("main", 0, 1000, -1, 0),
        ev("f", 0, 100, 0, 1, lineno=2),
        ev("f", 10, 90, 1, 2, lineno=2),
        ev("f", 20, 80, 2, 3, lineno=2),
        ev("len", 30, 40, 3, 4, kind="c"),
        ev("f", 200, 300, 0, 1, lineno=2),
    ]
    path = reports.write_pstats(events, tmp_path / "sub" / "h.pstats")
    st = pstats.Stats(path)
    main, f, ln = ("m.py", 1, "main"), ("m.py", 2, "f"), ("~", 0, "<built-in method builtins.len>")
    assert set(st.stats) == {main, f, ln}
    pc, nc, tt, ct, callers = st.stats[f]
    assert (pc, nc) == (2, 4)
    assert tt == pytest.approx((20 + 20 + 50 + 100) / 1e9)
    assert ct == pytest.approx(200 / 1e9)
    # Edges (nc, pc, tt, ct), cProfile's order: main->f twice, f->f twice of
    # which one not within another f->f call.
    assert callers[main] == pytest.approx((2, 2, (20 + 100) / 1e9, 200 / 1e9))
    assert callers[f] == pytest.approx((2, 1, 70 / 1e9, 80 / 1e9))
    assert st.stats[ln][:4] == pytest.approx((1, 1, 10 / 1e9, 10 / 1e9))
    assert st.stats[ln][4] == {f: pytest.approx((1, 1, 10 / 1e9, 10 / 1e9))}
    assert st.stats[main][:2] == (1, 1) and st.stats[main][4] == {}
    assert st.total_calls == 6 and st.prim_calls == 4
    out = io.StringIO()
    st.stream = out
    st.sort_stats("cumulative").print_stats()
    st.print_callers()
    st.print_callees()
    assert "{built-in method builtins.len}" in out.getvalue()
    assert "4/2" in out.getvalue()


def test_pstats_labels():
    assert reports.pstats_label("len", "<built-in>", 0, "c") == (
        "~", 0, "<built-in method builtins.len>")
    assert reports.pstats_label("math.sqrt", "<built-in>", 0, "c") == (
        "~", 0, "<built-in method math.sqrt>")
    assert reports.pstats_label("list.append", "<built-in>", 0, "c") == (
        "~", 0, "<method 'append' of 'list' objects>")
    assert reports.pstats_label("Point.norm", "p.py", 11, "py") == ("p.py", 11, "norm")
    assert reports.pstats_label("f.<locals>.g", "p.py", 3, "py", qualnames=True) == (
        "p.py", 3, "f.<locals>.g")


# ---- collapsed stacks ---------------------------------------------------------


def test_collapsed_exact_lines(tmp_path):
    assert reports.collapsed_stacks(tree()) == [
        "thread 7;main (m.py:1) 30",
        "thread 7;main (m.py:1);a (m.py:5) 45",
        "thread 7;main (m.py:1);a (m.py:5);len 5",
        "thread 7;main (m.py:1);b (m.py:9) 10",
        "thread 7;main (m.py:1);b (m.py:9);a (m.py:5) 10",
    ]
    assert reports.collapsed_stacks(tree(), weight="calls", threads=False) == [
        "main (m.py:1) 1",
        "main (m.py:1);a (m.py:5) 2",
        "main (m.py:1);a (m.py:5);len 1",
        "main (m.py:1);b (m.py:9) 1",
        "main (m.py:1);b (m.py:9);a (m.py:5) 1",
    ]
    assert reports.collapsed_stacks(tree(), thread_names={7: "MainThread"})[0] == (
        "MainThread (thread 7);main (m.py:1) 30")
    path = reports.write_collapsed(tree(), tmp_path / "t.folded")
    with open(path, encoding="utf-8") as fh:
        assert fh.read() == "\n".join(reports.collapsed_stacks(tree())) + "\n"


def test_collapsed_sanitizes_rounds_and_merges_threads():
    events = [
        ev("we;ird\nname", 0, 10_000, -1, 0, filename="a;b.py"),
        ev("tiny", 1000, 1400, 0, 1, kind="c"),   # 0.4 us: rounds to 0, left out
        ev("half", 2000, 3500, 0, 1, kind="c"),   # 1.5 us: rounds to 2
        ev("we;ird\nname", 0, 3000, -1, 0, tid=8, filename="a;b.py"),
    ]
    assert reports.collapsed_stacks(events) == [
        "thread 7;we:ird name (a:b.py:1) 8",
        "thread 7;we:ird name (a:b.py:1);half 2",
        "thread 8;we:ird name (a:b.py:1) 3",
    ]
    assert reports.collapsed_stacks(events, threads=False) == [
        "we:ird name (a:b.py:1) 11",
        "we:ird name (a:b.py:1);half 2",
    ]


# ---- SVG flame graph ----------------------------------------------------------


def test_svg_geometry_and_escaping(tmp_path):
    events = [
        ev("main", 0, 10**9, -1, 0),
        ev("<lambda> & \"q\"", 0, 5 * 10**8, 0, 1, lineno=2),
        ev("speck", 6 * 10**8, 6 * 10**8 + 1, 0, 1, lineno=3),  # 1 ns of 1 s: < 0.1 px
        ev("main", 0, 10**9, -1, 0, tid=8),
    ]
    path = reports.write_flamegraph_svg(events, tmp_path / "g.svg", width=1020,
                                        thread_names={8: "loader"})
    _, frames = frames_of(path)
    by = {t.split("\n")[0]: (x, w, y) for t, x, w, y in frames if "thread 7" not in t}
    assert "speck (m.py:3)" not in by and not any("speck" in t for t, *_ in frames)
    assert by["all threads"][1] == pytest.approx(1000, abs=0.01)
    assert by["loader (thread 8)"][1] == pytest.approx(500, abs=0.01)
    lam = by['<lambda> & "q" (m.py:2)']
    assert lam[1] == pytest.approx(250, abs=0.01) and lam[0] == pytest.approx(10, abs=0.01)
    # Flame: children above (smaller y) their parents.
    mains = sorted((x, y) for t, x, w, y in frames if t.startswith("main ("))
    assert len(mains) == 2 and mains[0][1] == mains[1][1] > lam[2]
    assert by["all threads"][2] > by["loader (thread 8)"][2] > mains[0][1]
    tip = next(t for t, *_ in frames if t.startswith("<lambda>"))
    assert "500.000 ms, 25.00% of traced time" in tip and "1 call" in tip


def deep_chain(depth):
    """One chain of depth calls, the innermost the only one with a self
    time of a microsecond or more: one line of depth frames."""
    end = 10 ** 7
    return [ev(f"f{i % 7}", i, end - i, i - 1, i, lineno=1 + i % 7) for i in range(depth)]


def collapsed_peak(events):
    import tracemalloc
    tracemalloc.start()
    try:
        lines = reports.collapsed_stacks(events)
        return tracemalloc.get_traced_memory()[1], lines
    finally:
        tracemalloc.stop()


# tracemalloc in this process: CPython 3.11's leaks tracebacks at exit,
# which LeakSanitizer reports.
@needs_plain_allocator
def test_collapsed_memory_is_linear_in_depth():
    # Each path's label spelt out whole cost memory quadratic in depth (a
    # 12,000-deep chain: about 900 MB); now a line is made when written.
    small, lines = collapsed_peak(deep_chain(4000))
    big, lines = collapsed_peak(deep_chain(12000))
    assert len(lines) == 1 and lines[0].count(";") == 12000
    assert lines[0].endswith(" 9976")
    # Three times the depth: quadratic would be nine times the memory;
    # linear is three, up to four with the C pass's tables growing by
    # doubling.
    assert big < 5 * small
    assert big < 40 << 20


@pytest.mark.parametrize("report", ["summary", "collapsed", "flamegraph", "pstats"])
def test_a_name_that_is_not_a_string_is_named(tmp_path, report):
    bad = frametrace.Event((7, "m.py", 1, "py", 7, 1007, 5, 6, 1, 0, False, False))
    events = [ev("f", 0, 10, -1, 0), bad]
    run = {"summary": lambda: reports.summary(events),
           "collapsed": lambda: reports.collapsed_stacks(events),
           "flamegraph": lambda: reports.write_flamegraph_svg(events, tmp_path / "f.svg"),
           "pstats": lambda: reports.write_pstats(events, tmp_path / "p.prof")}[report]
    with pytest.raises(TypeError, match=r"event 1 .*: its name and filename must be str"):
        run()
