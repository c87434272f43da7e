"""frametrace.Event: a compact record that behaves as the 14-sequence of its
fields, whether getEvents() made it or Event(sequence) did."""
import copy
import gc
import pickle
import sys
import threading

import pytest

import frametrace
from frametrace import Event
import targets.calls as calls

FIELDS = ("name", "filename", "lineno", "kind", "thread_id", "native_thread_id",
          "start_ns", "end_ns", "depth", "parent", "open_at_start", "open_at_stop",
          "thread_serial", "open_at_loss")


@pytest.fixture  # per setup: each backend and clock records its own events
def recorded():
    with frametrace.trace() as tracer:
        calls.leaf(3)
        len("ab")
    events = tracer.getEvents()
    leaf = next(e for e in events if e.name == "leaf")
    c_call = next(e for e in events if e.name == "len")
    return events, leaf, c_call


def test_fields_by_name_and_index(recorded):
    events, leaf, c_call = recorded
    assert Event.__match_args__ == FIELDS
    assert (Event.n_fields, Event.n_sequence_fields, Event.n_unnamed_fields) == (14, 14, 0)
    assert len(leaf) == 14
    assert [leaf[i] for i in range(14)] == [getattr(leaf, f) for f in FIELDS]
    assert [leaf[i - 14] for i in range(14)] == list(leaf)
    assert leaf[:4] == ("leaf", calls.__file__, 15, "py")
    assert leaf[6:8] == (leaf.start_ns, leaf.end_ns) and leaf[::-1][0] is leaf.open_at_loss is False
    assert leaf.thread_id == threading.get_ident()
    assert leaf.native_thread_id == threading.get_native_id()
    assert events[leaf.parent].depth == leaf.depth - 1
    assert c_call[:4] == ("len", "<built-in>", 0, "c")
    assert type(leaf.open_at_start) is bool and leaf.open_at_start is False
    assert leaf.thread_serial == 1 and type(leaf.thread_serial) is int
    name, filename, *_, stop, serial, loss = leaf
    assert (name, filename, stop, serial, loss) == ("leaf", calls.__file__, False, 1, False)
    assert "leaf" in leaf and 15 in leaf and "nope" not in leaf
    assert leaf.count(False) == 3 and leaf.index("py") == 3
    with pytest.raises(IndexError, match="out of range"):
        leaf[14]
    with pytest.raises(IndexError, match="out of range"):
        leaf[-15]
    with pytest.raises(TypeError, match="integers or slices, not str"):
        leaf["name"]
    with pytest.raises(AttributeError):
        leaf.name = "other"
    with pytest.raises(TypeError):
        leaf[0] = "other"


def test_equal_to_its_tuple_and_to_a_rebuilt_event(recorded):
    events, leaf, _ = recorded
    values = tuple(leaf)
    rebuilt = Event(values)
    for a, b in [(leaf, values), (values, leaf), (leaf, rebuilt), (rebuilt, leaf),
                 (rebuilt, values)]:
        assert a == b and not (a != b) and a <= b and a >= b and not a < b
    assert hash(leaf) == hash(values) == hash(rebuilt)
    assert len({leaf, rebuilt, values}) == 1
    later = Event(values[:6] + (leaf.start_ns + 1,) + values[7:])
    assert leaf != later and leaf < later and later > values and values < later
    assert events == [Event(tuple(e)) for e in events]
    assert leaf != list(values) and (leaf == "leaf") is False
    with pytest.raises(TypeError):
        leaf < 3  # noqa: B015
    assert sorted(events) == sorted(events, key=tuple)


def test_repr_pickle_copy_replace_match(recorded):
    _, leaf, _ = recorded
    text = repr(leaf)
    assert text.startswith("frametrace.Event(name='leaf', filename=")
    assert f"start_ns={leaf.start_ns}," in text and text.endswith("open_at_stop=False, thread_serial=1, open_at_loss=False)")
    assert repr(Event(tuple(leaf))) == text
    for clone in (pickle.loads(pickle.dumps(leaf)), copy.copy(leaf), copy.deepcopy(leaf)):
        assert clone == leaf and type(clone) is Event
    moved = leaf.__replace__(name="moved", depth=7)
    assert moved.name == "moved" and moved.depth == 7 and moved[2:] == leaf[2:8] + (7,) + leaf[9:]
    if sys.version_info >= (3, 13):
        assert copy.replace(leaf, lineno=1).lineno == 1
    with pytest.raises(TypeError, match="unexpected field name"):
        leaf.__replace__(nmae="typo")
    with pytest.raises(TypeError, match="only keyword"):
        leaf.__replace__("x")
    match leaf:
        case Event(name="leaf", kind="py", depth=d):
            assert d == leaf.depth
        case _:
            pytest.fail("class pattern did not match")
    match leaf:
        case [name, _, _, "py", *rest]:
            assert name == "leaf" and len(rest) == 10
        case _:
            pytest.fail("sequence pattern did not match")


def test_recorded_events_are_small_and_untracked(recorded):
    events, leaf, _ = recorded
    # One allocation of 80 bytes (with the GC header), against ~240 for a
    # 12-tuple and its three ints.
    assert sys.getsizeof(leaf) <= 80
    assert not any(gc.is_tracked(e) for e in events)
    assert gc.is_tracked(Event(tuple(leaf)))
    # Events of one function share its name, file and line objects.
    leaves = [e for e in events if e.name == "leaf"]
    assert all(e.name is leaves[0].name and e.filename is leaves[0].filename for e in leaves)


def test_events_outlive_tracer_and_clear():
    with frametrace.trace() as tracer:
        calls.leaf(1)
    events = tracer.getEvents()
    tracer.clear()
    del tracer
    gc.collect()
    leaf = next(e for e in events if e.name == "leaf")
    assert leaf[:4] == ("leaf", calls.__file__, 15, "py") and leaf.end_ns >= leaf.start_ns
