"""The latched stop: nothing ends after it, whatever is still running."""
import time

import frametrace
from frametrace.testing import assert_valid_trace
from support import find, only, qual


def train_step(step):
    return sum(range(step))


def after_stop_work():
    return 1


def train_loop(tracer, steps=10, stop_at=3):
    for step in range(steps):
        train_step(step)
        if step == stop_at:
            tracer.stop()
    after_stop_work()


def run_training(tracer):
    train_loop(tracer)
    time.sleep(0.01)  # the session goes on after the tracer stopped


def test_stop_inside_training_loop():
    with frametrace.trace() as tracer:
        run_training(tracer)
        first_stop = tracer.stop_ns
        tracer.stop()
        assert tracer.stop_ns == first_stop
    assert tracer.stop_ns == first_stop  # leaving the block did not move it
    assert not tracer.active
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)

    stop = tracer.stop_ns
    assert all(ev.end_ns <= stop for ev in events)
    assert len(find(events, "train_step")) == 4  # steps 0..3, not after stop
    assert not find(events, "after_stop_work")
    assert not find(events, "time.sleep")
    loop = events[only(events, "train_loop")]
    caller = events[only(events, "run_training")]
    me = events[only(events, qual("test_stop_inside_training_loop"))]
    for ev in (loop, caller, me):
        assert ev.open_at_stop and ev.end_ns == stop
    assert not loop.open_at_start and not caller.open_at_start
    assert me.open_at_start
    # Steps are children of the loop; their sums are C calls under them.
    for i in find(events, "train_step"):
        assert events[events[i].parent].name == "train_loop"
        assert [events[k].name for k in range(len(events)) if events[k].parent == i] == ["sum"]


def test_stop_before_anything_and_again():
    tracer = frametrace.Tracer()
    tracer.start()
    start = tracer.start_ns
    assert tracer.active and tracer.stop_ns is None
    tracer.stop()
    stop = tracer.stop_ns
    assert start <= stop
    for _ in range(3):
        tracer.stop()
        assert tracer.stop_ns == stop
    assert_valid_trace(tracer.getEvents(), tracer.start_ns, tracer.stop_ns)


def test_clock_base_is_monotonic_ns():
    before = time.monotonic_ns()
    with frametrace.trace() as tracer:
        pass
    after = time.monotonic_ns()
    assert before <= tracer.start_ns <= tracer.stop_ns <= after


def test_stop_and_start_from_code_without_builtins():
    """Code exec()'d in a bare dict has no __builtins__ in its globals;
    stopping there still frees the hook (and sys.monitoring's tool id), and
    starting there works."""
    namespace = {}
    exec("def stop(t):\n    t.stop()\n\ndef start(t):\n    t.start()\n", namespace)
    del namespace["__builtins__"]
    with frametrace.trace() as tracer:
        namespace["stop"](tracer)
    assert not tracer.active and tracer.stop_ns is not None
    again = frametrace.Tracer()
    namespace["start"](again)
    assert again.active
    namespace["stop"](again)
    assert not again.active
