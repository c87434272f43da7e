"""The reports' pass over the events in C (``_tracer._report_pass``, issue
17 item 6): for the Events of getEvents() and of load() it gives exactly
what the Python pass (``reports._use_c = False``, the reference) gives:
the same columns, so the same summary, pstats, collapsed stacks and flame
graph; for anything else, or anything out of the ordinary, it declines
(None) and the Python pass runs and says what is wrong."""
import threading

import pytest

import frametrace
from frametrace import _tracer, reports
from frametrace.export import write_chrome
from frametrace.merge import merge
from targets import calls


def gen(n):
    for i in range(n):
        yield calls.leaf(i)


def worker(n):
    calls.recurse(n)
    calls.catcher()
    sum(gen(3))


def deep_then_stop(n, tracer):
    if n:
        calls.recurse(2)
        deep_then_stop(n - 1, tracer)
    else:
        tracer.stop()  # frames open at stop: capped


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Events of known programs: threads running the same functions,
    recursion, generators, exceptions, C calls, frames capped at stop; and
    the same loaded from a file (the loader's Events), and two traces
    merged."""
    tracer = frametrace.Tracer()
    tracer.start()
    calls.program()
    threads = [threading.Thread(target=worker, args=(k + 3,)) for k in range(3)]
    for t in threads:
        t.start()
    worker(5)
    for t in threads:
        t.join()
    deep_then_stop(4, tracer)
    events = tracer.getEvents()
    assert any(ev.open_at_stop for ev in events)
    d = tmp_path_factory.mktemp("reports")
    write_chrome(d / "a.json", tracer)
    with frametrace.trace() as other:
        worker(2)
    write_chrome(d / "b.json", other)
    merge([d / "a.json", d / "b.json"], d / "ab.json")
    return {"recorded": events, "loaded": frametrace.load(d / "a.json").events,
            "merged": frametrace.load(d / "ab.json").events}


def python_pass(monkeypatch):
    monkeypatch.setattr(reports, "_use_c", False)


@pytest.mark.parametrize("which", ["recorded", "loaded", "merged"])
def test_the_c_pass_takes_the_events_of_get_events_and_load(traces, which):
    for mode in (0, 1, 2):
        assert _tracer._report_pass(traces[which], mode) is not None
        assert _tracer._report_pass(tuple(traces[which]), mode) is not None


@pytest.mark.parametrize("which", ["recorded", "loaded", "merged"])
def test_the_same_columns_as_the_python_pass(traces, which, monkeypatch):
    events = traces[which]

    def columns():
        # The C pass's numbers are memoryviews over packed bytes.
        # funcs and path_funcs: the C pass's alone, for the collapsed stacks.
        return [{k: v.tolist() if isinstance(v, memoryview) else v for k, v in vars(x).items()
                 if k not in ("funcs", "path_funcs")}
                for x in (reports._Paths(events), reports._Functions(events),
                          reports._Functions(events, edges=True))]

    c = columns()
    assert isinstance(reports._Paths(events).totals, memoryview)
    python_pass(monkeypatch)
    py = columns()
    assert c == py
    # Insertion order too: the reports list threads in first-seen order.
    assert [list(cols["idents"]) for cols in c] == [list(cols["idents"]) for cols in py]
    assert list(c[0]["threads"]) == list(py[0]["threads"])
    assert len(c[0]["parents"]) > 20 and len(c[2]["ecallers"]) > 10


@pytest.mark.parametrize("which", ["recorded", "loaded", "merged"])
def test_the_same_reports_as_the_python_pass(traces, which, tmp_path, monkeypatch):
    events = traces[which]

    def everything(d):
        d.mkdir()
        reports.write_pstats(events, d / "p.pstats")
        reports.write_collapsed(events, d / "c.folded")
        reports.write_collapsed(events, d / "calls.folded", weight="calls", threads=False)
        reports.write_flamegraph_svg(events, d / "f.svg")
        texts = {p.name: p.read_bytes() for p in sorted(d.iterdir())}
        for sort in reports.SORT_KEYS:
            texts[sort] = str(reports.summary(events, sort=sort, limit=None))
        texts["per_thread"] = str(reports.summary(events, per_thread=True, limit=None))
        return texts

    c = everything(tmp_path / "c")
    python_pass(monkeypatch)
    assert everything(tmp_path / "py") == c


def test_events_made_from_values_are_taken_too(traces, monkeypatch):
    """Event(values), as the loader's Python path makes them (the first
    event of each function in a file), alone or among the others."""
    events = traces["recorded"]
    remade = [frametrace.Event(tuple(ev)) for ev in events]
    mixed = [ev if i % 3 else frametrace.Event(tuple(ev)) for i, ev in enumerate(events)]
    for mode in (0, 1, 2):
        expected = _tracer._report_pass(events, mode)
        assert _tracer._report_pass(remade, mode) == expected
        assert _tracer._report_pass(mixed, mode) == expected


def test_anything_else_is_left_to_the_python_pass(traces, monkeypatch):
    events = traces["recorded"]
    as_tuples = [tuple(ev) for ev in events]
    bad_name = list(events)
    bad_name[3] = frametrace.Event((b"bytes",) + tuple(events[3])[1:])
    for mode in (0, 1, 2):
        # Not Events: tuples; a sequence that is no list or tuple.
        assert _tracer._report_pass(as_tuples, mode) is None
        assert _tracer._report_pass(range(3), mode) is None
        # A parent that is not an earlier event (the events reversed); a
        # name that is not a str.
        assert _tracer._report_pass(events[::-1], mode) is None
        assert _tracer._report_pass(bad_name, mode) is None
    # A duration past int64 (the Python pass has big ints).
    huge = [frametrace.Event(("f", "x.py", 1, "py", 1, 2, -(1 << 63), (1 << 63) - 1, 0, -1,
                              False, False, 1, False))]
    for mode in (0, 1, 2):
        assert _tracer._report_pass(huge, mode) is None
    assert reports.summary(huge).rows[0].self_ns == (1 << 64) - 1
    empty = [c.tolist() if isinstance(c, memoryview) else c for c in _tracer._report_pass([], 0)]
    assert empty == [[], [], [], [], [], [], [], [], {}, [], [], [], []]
    # The Python pass then reads them: the same reports as the C pass, or
    # the error that says what is wrong.
    assert reports.collapsed_stacks(as_tuples) == reports.collapsed_stacks(events)
    assert str(reports.summary(as_tuples)) == str(reports.summary(events))
    with pytest.raises(ValueError, match="parent"):
        reports.summary(events[::-1])
    with pytest.raises(TypeError, match="name and filename must be str"):
        reports.collapsed_stacks(bad_name)
    with pytest.raises(TypeError, match="mode"):
        _tracer._report_pass(events, "0")
    with pytest.raises(ValueError, match="mode 3"):
        _tracer._report_pass(events, 3)


def test_collapsed_labels_in_c_check_their_input():
    import array

    def packed(*values):
        return array.array("q", values).tobytes()

    # Two roots of one function on a thread, a child each: one label each,
    # under the thread's top frame.
    labels = _tracer._collapse_labels(packed(-1, 0, -1, 2), packed(0, 1, 0, 1), [0, 1], [2, 2],
                                      packed(5, 7, 11, 13))
    assert [c.tolist() for c in labels] == [[-1, 0, 1], [2, 0, 1], [0, 16, 20]]
    # The C pass's int32 columns (memoryviews, arrays) are read the same.
    labels32 = _tracer._collapse_labels(array.array("i", [-1, 0, -1, 2]),
                                        memoryview(array.array("i", [0, 1, 0, 1])), [0, 1],
                                        [2, 2], array.array("q", [5, 7, 11, 13]))
    assert [c.tolist() for c in labels32] == [[-1, 0, 1], [2, 0, 1], [0, 16, 20]]
    with pytest.raises(ValueError, match="int64 or int32"):
        _tracer._collapse_labels(array.array("h", [-1]), packed(0), [0], [-1], packed(1))
    lines, end = _tracer._collapsed_batch(*labels, ["f", "g", "thread"], False, 0, 10)
    assert (lines, end) == (["thread;f 16", "thread;f;g 20"], 3)
    # ns to rounded us for self time; a batch stops at count lines.
    assert _tracer._collapsed_batch(*labels, ["f", "g", "t"], True, 0, 1) == ([], 3)
    assert _tracer._collapsed_batch(*labels, ["f", "g", "t"], False, 0, 1) == (["t;f 16"], 2)
    # A sum past int64: None (the Python code has big ints).
    assert _tracer._collapse_labels(packed(-1, -1), packed(0, 0), [0], [-1],
                                    packed((1 << 63) - 1, 1)) is None
    with pytest.raises(ValueError, match="out of range"):
        _tracer._collapse_labels(packed(-1, 5), packed(0, 0), [0], [-1], packed(1, 1))
    with pytest.raises(ValueError, match="out of range"):
        _tracer._collapse_labels(packed(-1), packed(3), [0], [-1], packed(1))
    with pytest.raises(ValueError, match="different lengths"):
        _tracer._collapse_labels(packed(-1), packed(0, 0), [0], [-1], packed(1))
    with pytest.raises(ValueError, match="int64"):
        _tracer._collapse_labels(b"abc", packed(0), [0], [-1], packed(1))
    with pytest.raises(ValueError, match="out of range"):
        _tracer._collapsed_batch(packed(-1), packed(9), packed(1), ["f"], False, 0, 5)
    with pytest.raises(ValueError, match="earlier label"):
        _tracer._collapsed_batch(packed(0), packed(0), packed(1), ["f"], False, 0, 5)
