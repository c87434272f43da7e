"""The reports' pass over the events in C (``_tracer._report_pass``): for
the Events of getEvents() and of load(), and for any other events, it
gives exactly what the Python reference (tests/report_oracle.py) gives:
the same columns, so the same summary, pstats, collapsed stacks and flame
graph, or the same error saying what is wrong."""
import threading

import pytest

import frametrace
from frametrace import _tracer, reports
from frametrace.export import write_chrome
from frametrace.merge import merge
from report_oracle import columns as reference_columns
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
    write_chrome(tracer, d / "a.json")
    with frametrace.trace() as other:
        worker(2)
    write_chrome(other, d / "b.json")
    merge([d / "a.json", d / "b.json"], d / "ab.json")
    return {"recorded": events, "loaded": frametrace.load(d / "a.json").events,
            "merged": frametrace.load(d / "ab.json").events}


def plain(columns):
    return [c.tolist() if isinstance(c, memoryview) else c for c in columns]


def c_columns(events, mode):
    """The C pass's columns the reference has too (the functions' keys and
    each path's function are the C pass's alone, for the collapsed stacks)."""
    out = plain(_tracer._report_pass(events, mode))
    return out[:11] if mode == 0 else out


def outcome(fn, *args):
    try:
        return "ok", fn(*args)
    except (TypeError, ValueError, IndexError) as exc:
        base = next(t for t in (TypeError, ValueError, IndexError) if isinstance(exc, t))
        return base, str(exc)


@pytest.mark.parametrize("which", ["recorded", "loaded", "merged"])
def test_the_same_columns_as_the_reference(traces, which):
    events = traces[which]
    for mode in (0, 1, 2):
        c = c_columns(events, mode)
        assert c == list(reference_columns(events, mode))
        # Insertion order too: the reports list threads in first-seen order.
        assert list(c[8]) == list(reference_columns(events, mode)[8])
    assert isinstance(_tracer._report_pass(events, 0)[2], memoryview)
    assert len(c_columns(events, 0)[0]) > 20 and len(c_columns(events, 2)[9]) > 10


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


def test_any_other_events_are_taken_as_the_reference_takes_them(traces):
    events = traces["recorded"]
    as_tuples = [tuple(ev) for ev in events]
    as_lists = [list(ev) for ev in events]
    bad_name = list(events)
    bad_name[3] = frametrace.Event((b"bytes",) + tuple(events[3])[1:])
    float_parent = list(as_tuples)
    float_parent[5] = as_tuples[5][:9] + (float(as_tuples[5][9]),) + as_tuples[5][10:]
    short = list(events)
    short[7] = tuple(events[7])[:13]
    shuffled = events[::-1]
    for mode in (0, 1, 2):
        for evs in (as_tuples, as_lists, bad_name, float_parent, short, shuffled,
                    tuple(events), [], [("f", "x.py", 1, "py", 1, 2, 0.5, 1, 0, -1, False,
                                         False, 1, False)]):
            c = outcome(c_columns, evs, mode)
            assert c == outcome(lambda e, m: list(reference_columns(e, m)), evs, mode)
        assert c_columns(as_tuples, mode) == c_columns(events, mode)
    with pytest.raises(ValueError, match="parent"):
        reports.summary(shuffled)
    with pytest.raises(TypeError, match="name and filename must be str"):
        reports.collapsed_stacks(bad_name)
    with pytest.raises(TypeError, match="is not a frametrace.Event"):
        reports.summary(short)
    # A duration past int64, and sums past it: ints, as in Python.
    huge = [frametrace.Event(("f", "x.py", 1, "py", 1, 2, -(1 << 63), (1 << 63) - 1, 0, -1,
                              False, False, 1, False))] * 3
    huge = [frametrace.Event(tuple(huge[0])[:9] + (-1 if i == 0 else i - 1,)
                             + tuple(huge[0])[10:]) for i in range(3)]
    for mode in (0, 1, 2):
        assert c_columns(huge, mode) == list(reference_columns(huge, mode))
    assert reports.summary(huge).rows[0].total_ns == (1 << 64) - 1
    assert reports.collapsed_stacks(huge, weight="self") == \
        [f"thread 1;f (x.py:1);f (x.py:1);f (x.py:1) {((1 << 64) - 1 + 500) // 1000}"]
    with pytest.raises(TypeError, match="list | tuple"):
        _tracer._report_pass(range(3), 0)
    with pytest.raises(TypeError, match="mode"):
        _tracer._report_pass(events, "0")
    with pytest.raises(ValueError, match="mode 3"):
        _tracer._report_pass(events, 3)


def test_sums_past_int64_both_ways_and_back():
    """Sums that pass int64 several times, below and above, and come back
    into it: the reference's ints, in every mode."""
    top = (1 << 63) - 1

    def ev(name, start, end, parent):
        return frametrace.Event((name, "x.py", 1, "py", 1, 2, start, end, 0, parent,
                                 False, False, 1, False))

    events = []
    for k in range(5):
        root = len(events)
        events.append(ev("f", 0, top, -1))  # the roots' sum: about 5 * 2**63
        for j in range(3):  # f's self below -2**63 after a few roots
            events.append(ev("g", 0, top // 2 + j, root))
        if k == 2:  # a duration past int64 itself
            events.append(ev("h", -(1 << 63), top, root))
        if k == 3:  # and one that brings h's sums back within int64
            events.append(ev("h", top, -(1 << 63) + 5, root))
    for mode in (0, 1, 2):
        assert c_columns(events, mode) == list(reference_columns(events, mode))
    rows = {r.name: r for r in reports.summary(events, limit=None).rows}
    assert rows["f"].total_ns == 5 * top
    assert rows["g"].total_ns == sum(top // 2 + j for j in range(3)) * 5
    assert rows["h"].total_ns == 5


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
    # A sum past int64: an int, as in Python; values given as ints.
    big = _tracer._collapse_labels(packed(-1, -1), packed(0, 0), [0], [-1],
                                   packed((1 << 63) - 1, 1))
    assert big[2] == [1 << 63]
    assert _tracer._collapsed_batch(*big, ["f"], True, 0, 5) == \
        ([f"f {((1 << 63) + 500) // 1000}"], 1)
    assert _tracer._collapsed_batch(*big, ["f"], False, 0, 5) == ([f"f {1 << 63}"], 1)
    listed = _tracer._collapse_labels(packed(-1, -1), packed(0, 0), [0], [-1],
                                      [1 << 70, -(1 << 70) - 5])
    assert list(listed[2]) == [-5]
    assert _tracer._collapsed_batch(*listed, ["f"], False, 0, 5) == ([], 1)
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
