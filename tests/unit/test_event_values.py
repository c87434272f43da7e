"""frametrace.Event made by Event(sequence): any twelve values, and
collected when its values make a cycle."""
import gc
import weakref

import pytest

from frametrace import Event


def test_constructor_takes_any_twelve_values_and_refuses_others():
    ev = Event(iter(range(12)))
    assert list(ev) == list(range(12)) and ev.name == 0 and ev.open_at_stop == 11
    assert Event(sequence=[None] * 12).parent is None
    with pytest.raises(TypeError, match=r"takes a 12-sequence \(3-sequence given\)"):
        Event((1, 2, 3))
    with pytest.raises(TypeError, match="takes a sequence of its 12 fields, not int"):
        Event(5)
    with pytest.raises(TypeError):
        Event()
    with pytest.raises(TypeError):
        type("Sub", (Event,), {})


def test_event_made_of_values_in_a_cycle_is_collected():
    class Box:
        pass

    box = Box()
    box.event = Event((box,) + (0,) * 11)
    ref = weakref.ref(box)
    del box
    gc.collect()
    assert ref() is None
