"""@frametrace.trace() re-entered: recursion, threads, another tracer
active.  The decorator never changes what the function does."""
import dataclasses
import threading
import warnings

import pytest

import frametrace
from frametrace.testing import assert_valid_trace
from support import find, only, qual, subtree
from targets import calls

PY = "py"
TIMEOUT = 60  # against a hang only: every wait here ends at once when the code is right


def local(test, name):
    """The name frametrace reports for function name defined in test."""
    return qual(f"{test}.<locals>.{name}")


def fib_tree(n, name):
    """The call tree of fib(n) below: (name, kind, children)."""
    if n < 2:
        return (name, PY, [])
    return (name, PY, [fib_tree(n - 1, name), fib_tree(n - 2, name)])


def roots(events, name):
    """Indices of the events named name whose parent is not."""
    return [i for i in find(events, name)
            if events[i].parent < 0 or events[events[i].parent].name != name]


def test_recursion_traced_in_one_trace():
    @frametrace.trace()
    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    name = local("test_recursion_traced_in_one_trace", "fib")
    template = fib.tracer
    assert fib(10) == 55
    assert fib.tracer is template and not template.active
    events = template.getEvents()
    assert_valid_trace(events, template.start_ns, template.stop_ns)
    (root,) = roots(events, name)
    # The whole recursion, every call once, the wrapper's frames left out.
    assert subtree(events, root) == fib_tree(10, name)
    assert len(find(events, name)) == 177
    assert not any(e.open_at_stop or e.open_at_start for e in events if e.name == name)
    # The next call is traced again, into a fresh tracer.
    assert fib(3) == 2
    assert fib.tracer is not template
    events = fib.tracer.getEvents()
    assert subtree(events, roots(events, name)[0]) == fib_tree(3, name)


def test_two_threads_at_once_share_one_trace():
    for _ in range(20):  # who owns the trace is decided again each round
        both_in = threading.Barrier(2, timeout=TIMEOUT)
        both_done = threading.Barrier(2, timeout=TIMEOUT)
        go = threading.Barrier(2, timeout=TIMEOUT)

        @frametrace.trace()
        def work(x):
            both_in.wait()  # both calls are running: the second is inside the first
            y = calls.leaf(x)
            both_done.wait()
            return y

        results, errors = {}, []

        def call(x):
            try:
                go.wait()  # enter at once
                results[x] = work(x)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=call, args=(x,)) for x in (3, 4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [] and results == {3: 6, 4: 8}
        tracer = work.tracer
        assert not tracer.active
        events = tracer.getEvents()
        assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
        ids = {t.ident for t in threads}
        name = local("test_two_threads_at_once_share_one_trace", "work")
        assert {events[i].thread_id for i in find(events, name)} == ids
        # Each thread's work recorded its leaf call, complete.
        for i in find(events, "leaf"):
            assert events[events[i].parent].name == name
            assert not events[i].open_at_stop
        assert {events[i].thread_id for i in find(events, "leaf")} == ids


def test_inside_another_tracer_runs_untraced_by_the_decorator():
    @frametrace.trace()
    def job(x):
        return calls.leaf(x)

    template = job.tracer
    with frametrace.trace() as outer:
        with pytest.warns(RuntimeWarning, match=r"job\(\) runs untraced by its "
                                                r"@frametrace.trace\(\) decorator: another "
                                                r"frametrace Tracer is already active"):
            assert job(2) == 4
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per decorated function
            assert job(3) == 6
    # The calls are in the outer trace; the decorator's tracer never ran.
    assert job.tracer is template and template.start_ns is None
    events = outer.getEvents()
    name = local("test_inside_another_tracer_runs_untraced_by_the_decorator", "job")
    assert len(find(events, name)) == 2
    for i in find(events, name):
        assert subtree(events, i) == (name, PY, [("leaf", PY, [])])
    # Once the other tracer stopped, the decorator traces again.
    assert job(4) == 8
    assert job.tracer is template and template.stop_ns is not None
    assert only(template.getEvents(), "leaf") >= 0


def test_decorated_function_inside_another_decorated_one():
    @frametrace.trace()
    def inner(x):
        return calls.leaf(x)

    @frametrace.trace()
    def outer(x):
        return inner(x) + 1

    with pytest.warns(RuntimeWarning, match=r"inner\(\) runs untraced"):
        assert outer(2) == 5
    events = outer.tracer.getEvents()
    test = "test_decorated_function_inside_another_decorated_one"
    # The decorators' wrapper is left out of their traces (its own C
    # calls are in: inner's looked for a trace to own).
    inner = only(events, local(test, "inner"))
    assert subtree(events, inner) == (local(test, "inner"), PY, [("leaf", PY, [])])
    assert events[events[inner].parent].name == local(test, "outer")


def test_exceptions_propagate_unchanged():
    class Stop(Exception):
        pass

    raised = Stop("at 0")

    @frametrace.trace()
    def down(n):
        if n == 0:
            raise raised
        try:
            return down(n - 1)
        except Stop:
            if n == 2:  # caught in the middle of the recursion, raised anew
                raise ValueError("from 2") from None
            raise

    with pytest.raises(Stop) as info:
        down(1)
    assert info.value is raised and not down.tracer.active
    with pytest.raises(ValueError, match="from 2"):
        down(4)
    tracer = down.tracer
    assert not tracer.active
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert len(find(events, local("test_exceptions_propagate_unchanged", "down"))) == 5
    # Also when the call runs untraced by the decorator.
    with frametrace.trace():
        with pytest.warns(RuntimeWarning):
            with pytest.raises(Stop) as info:
                down(0)
    assert info.value is raised
    # The decorator works again afterwards: nothing left owned.
    with pytest.raises(ValueError):
        down(3)
    assert down.tracer is not tracer and down.tracer.stop_ns is not None


def test_generator_function_keeps_working():
    @frametrace.trace()
    def numbers(n):
        yield from range(n)

    assert list(numbers(3)) == [0, 1, 2]
    # Traced while it made the generator: its body ran after the stop.
    assert not numbers.tracer.active
    assert list(numbers(2)) == [0, 1]


def test_later_tracers_have_the_decorators_options():
    options = frametrace.Options(buffer_size=64, c_calls=False, ignore=["x"],
                                 max_memory=1 << 20)

    @frametrace.trace(options=options)
    def f():
        return 1

    first = f.tracer
    assert first.options == dataclasses.replace(options, backend=first.backend)
    assert f() == f() == 1
    assert f.tracer is not first and f.tracer.options == first.options
