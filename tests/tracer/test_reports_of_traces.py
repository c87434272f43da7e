"""frametrace.reports on real traces of known code: summary tables,
pstats (against cProfile), collapsed stacks and SVG flame graphs."""
import cProfile
import pstats
import threading

import pytest

import frametrace
from frametrace import reports
from frametrace.testing import assert_valid_trace
from support import SVG, frames_of, only, qual, traced
from targets import calls


CALLS = calls.__file__


def rows_by_name(table):
    return {r.name: r for r in table.rows}


def test_summary_of_known_program_exact_calls():
    _, events = traced(program_and_recursion)
    table = reports.summary(events, limit=None)
    counts = {(r.name, r.kind): r.calls for r in table.rows}
    expected = {
        ("program", "py"): 1, ("branch", "py"): 1, ("leaf", "py"): 3,
        (qual("Point.__init__"), "py"): 1, (qual("Point.norm"), "py"): 1,
        ("consume", "py"): 1, (qual("numbers"), "py"): 4, ("recurse", "py"): 7,
        ("catcher", "py"): 1, ("level1", "py"): 1, ("level2", "py"): 1, ("level3", "py"): 1,
        ("math.sqrt", "c"): 1, ("sum", "c"): 1, ("len", "c"): 1, ("list.append", "c"): 1,
        ("dict.get", "c"): 1,
    }
    for key, n in expected.items():
        assert counts[key] == n, key
    rows = {r.name: r for r in table.rows}
    rec = rows["recurse"]
    assert rec.primitive_calls == 1
    outer = min((e for e in events if e.name == "recurse"), key=lambda e: e.depth)
    assert rec.total_ns == outer.end_ns - outer.start_ns
    prog = events[only(events, "program")]
    assert rows["program"].total_ns == prog.end_ns - prog.start_ns
    assert (rows["program"].filename, rows["program"].lineno) == (CALLS, 35)
    assert rows["leaf"].function == f"leaf ({CALLS}:15)"
    for r in table.rows:
        assert 0 <= r.self_ns <= r.total_ns
    assert sum(r.self_ns for r in table.rows) == table.traced_ns
    assert table.traced_ns == sum(e.end_ns - e.start_ns for e in events if e.parent == -1)


def test_capped_when_stopped_inside():
    with frametrace.trace() as tracer:
        stopper(tracer)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    table = reports.summary(events, limit=None)
    rows = rows_by_name(table)
    assert rows["stopper"].capped and rows["stopper"].calls == 1
    assert rows["stopper"].total_ns == tracer.stop_ns - events[only(events, "stopper")].start_ns
    assert rows["leaf"].calls == 1 and not rows["leaf"].capped
    me = qual("test_capped_when_stopped_inside")
    assert rows[me].capped  # open at start and at stop
    text = str(table)
    line = next(l for l in text.splitlines() if "stopper (" in l)
    assert "* stopper (" in line
    assert "* leaf" not in text
    assert text.splitlines()[-1].startswith("* capped:")


def test_per_thread_real_thread():
    def run():
        worker = threading.Thread(target=calls.branch, args=(3,))
        worker.start()
        worker.join()
        calls.leaf(9)

    _, events = traced(run)
    tid = events[only(events, "branch")].thread_id
    assert tid != threading.get_ident()
    table = reports.summary(events, per_thread=True, limit=None)
    mine = rows_by_name(table.threads[threading.get_ident()])
    theirs = rows_by_name(table.threads[tid])
    assert theirs["leaf"].calls == 3 and theirs["branch"].calls == 1
    assert mine["leaf"].calls == 1 and "branch" not in mine
    for t in table.threads.values():
        assert sum(r.self_ns for r in t.rows) == t.traced_ns


def test_pstats_known_program_matches_cprofile(tmp_path):
    _, events = traced(program_and_recursion)
    st = pstats.Stats(reports.write_pstats(events, tmp_path / "ft.pstats"))

    profiler = cProfile.Profile()
    profiler.runcall(program_and_recursion)
    profiler.create_stats()
    ref = profiler.stats

    mine = {k: v for k, v in st.stats.items() if k[0] == CALLS}
    theirs = {k: v for k, v in ref.items() if k[0] == CALLS}
    assert set(mine) == set(theirs)
    assert len(mine) == 12
    for key in theirs:
        assert mine[key][:2] == theirs[key][:2], key  # primitive and total calls
        edges = lambda v: {c: e[:2] for c, e in v[4].items() if c[0] == CALLS}  # noqa: E731
        assert edges(mine[key]) == edges(theirs[key]), key
    assert mine[(CALLS, 66, "recurse")][:2] == (1, 7)
    assert mine[(CALLS, 66, "recurse")][4][(CALLS, 66, "recurse")][:2] == (6, 1)
    leaf_callers = mine[(CALLS, 15, "leaf")][4]
    assert {c: e[:2] for c, e in leaf_callers.items()} == {
        (CALLS, 19, "branch"): (2, 2), (CALLS, 58, "catcher"): (1, 1)}
    # The C functions of program(): same keys, counts and callers as cProfile.
    for label in ("<built-in method builtins.len>", "<built-in method math.sqrt>",
                  "<built-in method builtins.sum>", "<method 'append' of 'list' objects>",
                  "<method 'get' of 'dict' objects>"):
        key = ("~", 0, label)
        assert st.stats[key][:2] == ref[key][:2] == (1, 1), key
        assert set(st.stats[key][4]) == {c for c in ref[key][4] if c[0] == CALLS}, key
    # Times are seconds, self within total.
    for pc, nc, tt, ct, _ in mine.values():
        assert 0 <= tt <= ct < 1.0


def test_collapsed_real_trace_totals():
    _, events = traced(calls.program)
    lines = reports.collapsed_stacks(events, weight="calls")
    stacks = dict(line.rsplit(" ", 1) for line in lines)
    prefix = next(s for s in stacks if s.endswith(f";program ({CALLS}:35)"))
    assert stacks[prefix + f";branch ({CALLS}:19);leaf ({CALLS}:15)"] == "2"
    assert stacks[prefix + f";consume ({CALLS}:31);sum;{qual('numbers')} ({CALLS}:26)"] == "4"
    assert stacks[prefix + f";{qual('Point.norm')} ({CALLS}:11);math.sqrt"] == "1"
    assert prefix.startswith(f"thread {threading.get_ident()};")
    for line in reports.collapsed_stacks(events):
        stack, weight = line.rsplit(" ", 1)
        assert int(weight) > 0 and "\n" not in stack


def test_svg_real_trace(tmp_path):
    _, events = traced(calls.program)
    path = reports.write_flamegraph_svg(events, tmp_path / "f.svg", title="known <program>")
    root, frames = frames_of(path)
    text = open(path, encoding="utf-8").read()
    # Self-contained: the one script is inline (click to zoom), nothing is fetched.
    assert text.count("<script") == 1 and "src=" not in text
    assert "href" not in text and "@import" not in text and "url(" not in text
    for g in root.iter(SVG + "g"):
        if g.get("class") == "f":  # what the zoom script reads: the drawn geometry
            rect = g.find(SVG + "rect")
            assert (g.get("data-x"), g.get("data-w")) == (rect.get("x"), rect.get("width"))
            assert g.get("data-n") and int(g.get("data-l")) >= 0
    names = {t.split("\n")[0] for t, *_ in frames}
    for expected in (f"program ({CALLS}:35)", f"leaf ({CALLS}:15)", "math.sqrt", "sum",
                     f"{qual('numbers')} ({CALLS}:26)", "all threads"):
        assert expected in names
    assert any(t.text == "known <program>" for t in root.iter(SVG + "text"))
    # leaf merged: one frame for both calls under branch, "2 calls".
    leaf = [t for t, *_ in frames if t.startswith(f"leaf ({CALLS}:15)")]
    assert len(leaf) == 1 and "2 calls" in leaf[0] and "% of traced time" in leaf[0]
    allw = next(w for t, x, w, y in frames if t.startswith("all threads"))
    assert allw == pytest.approx(1200 - 20, abs=0.01)


def program_and_recursion():
    calls.program()
    calls.recurse(6)
    calls.catcher()


def stopper(tracer):
    calls.leaf(1)
    tracer.stop()
    calls.leaf(2)


def test_the_summary_says_thread_time_and_wall_time_apart():
    """Several threads' outermost calls summed are thread time, more than the
    wall time when they ran at once: the header says both."""
    import threading

    from frametrace import reports

    def work():
        sum(range(20000))

    with frametrace.trace() as tracer:
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    table = reports.summary(tracer)
    header = str(table).splitlines()[0]
    wall = (tracer.stop_ns - tracer.start_ns) / 1e6
    assert table.thread_count == 3 and table.wall_ns == tracer.stop_ns - tracer.start_ns
    assert (f"ms of thread time (each thread's outermost calls, summed over 3 threads) in "
            f"{wall:.3f} ms of wall time") in header, header
    one = reports.summary([e for e in tracer.getEvents() if e.thread_serial == 1])
    assert "ms traced (its outermost calls' time)" in str(one).splitlines()[0]
