"""frametrace.Event made by Event(sequence): any fourteen values (or the
first twelve, as files written before the last two fields hold), and
collected when its values make a cycle."""
import gc
import weakref

import pytest

from frametrace import Event


def test_constructor_takes_any_fourteen_values_and_refuses_others():
    ev = Event(iter(range(14)))
    assert list(ev) == list(range(14)) and ev.name == 0 and ev.open_at_loss == 13
    assert Event(sequence=[None] * 14).parent is None
    for n in (3, 11, 13, 15):
        with pytest.raises(TypeError, match=rf"takes a 14-sequence, or the first 12 fields of "
                                            rf"files written before \({n}-sequence given\)"):
            Event(range(n))
    with pytest.raises(TypeError, match="takes a sequence of its 14 fields, not int"):
        Event(5)
    with pytest.raises(TypeError):
        Event()
    with pytest.raises(TypeError):
        type("Sub", (Event,), {})


def test_event_made_of_values_in_a_cycle_is_collected():
    class Box:
        pass

    box = Box()
    box.event = Event((box,) + (0,) * 13)
    ref = weakref.ref(box)
    del box
    gc.collect()
    assert ref() is None


def test_twelve_values_of_an_older_file_get_serial_0_and_no_loss():
    old = ("f", "m.py", 3, "py", 7, 8, 10, 20, 0, -1, False, True)
    ev = Event(old)
    assert tuple(ev) == old + (0, False)
    assert ev.thread_serial == 0 and ev.open_at_loss is False and ev.open_at_stop is True
    assert ev == Event(old + (0, False)) and hash(ev) == hash(old + (0, False))
    assert ev.__replace__(thread_serial=4).thread_serial == 4
