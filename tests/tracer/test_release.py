"""The function table's sweep: entries no retained record
references are released, so that code made at run time does not grow the
table for as long as the tracer records; what the records name stays
right through any number of sweeps and reused ids."""
import gc
import sys
import threading
import weakref

import pytest

import frametrace
from frametrace.testing import assert_valid_trace

# The fewest live functions a sweep waits for (FT_RELEASE_MIN, state.h).
RELEASE_MIN = 2048


def made_function(i):
    """A new function object, f_<i>, of a new code object, defined on line
    i % 7 + 1 of a file named <gen-i>: its name, file and line tell which
    one a record names."""
    ns = {}
    source = "\n" * (i % 7) + f"def f_{i}(x):\n    return len(x) + {i}\n"
    exec(compile(source, f"<gen-{i}>", "exec"), ns)
    return ns[f"f_{i}"]


def rare():
    return 1


def check_made(events, last):
    """Every f_<i> event names its own code, and the ones retained are the
    last calls, consecutive up to f_<last>."""
    made = [ev for ev in events if ev.name.startswith("f_")]
    assert made, "no made function in the window"
    numbers = []
    for ev in made:
        i = int(ev.name[2:])
        assert (ev.filename, ev.lineno) == (f"<gen-{i}>", i % 7 + 1), ev
        numbers.append(i)
    assert numbers == list(range(numbers[0], last + 1))
    return made


def run_made(tracer, n, every_step=None):
    funcs = []
    for i in range(n):
        f = made_function(i)
        f("ab")
        funcs.append(weakref.ref(f.__code__))
        del f
        if every_step is not None:
            every_step(i)
    return funcs


def test_made_functions_are_released_and_named_right():
    """10x the sweep's size of new functions under a small ring: the table
    stays bounded, the code objects no record names are let go, and every
    retained record names its own function."""
    tracer = frametrace.Tracer(buffer_size=4096)
    with tracer:
        rare()
        codes = run_made(tracer, 10 * RELEASE_MIN, every_step=lambda i: i % 100 or tracer.mark())
        held = tracer.functions_held
        rare()
    gc.collect()
    alive = sum(ref() is not None for ref in codes)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    # Each step makes two code objects (the exec'd module and f_<i>).
    assert tracer.functions_freed > 2 * 8 * RELEASE_MIN
    assert held < 3 * RELEASE_MIN
    # What the ring still holds (a few hundred calls) and the last sweep's
    # released entries, no more.
    assert alive < 2 * RELEASE_MIN
    check_made(events, 10 * RELEASE_MIN - 1)
    # A function seen before the sweeps, whose first call was overwritten,
    # is named right when it runs again (a new id).
    (last_rare,) = [ev for ev in events if ev.name == "rare"]
    assert (last_rare.filename, last_rare.lineno) == (__file__, rare.__code__.co_firstlineno)
    if tracer.c_calls:
        lens = [ev for ev in events if ev.kind == "c" and ev.name.endswith("len")]
        assert lens and {ev.name for ev in lens} == {lens[0].name}


def test_sweep_without_marks_from_the_main_thread():
    """No mark(): the hook schedules the sweep (a pending call) as the
    table grows."""
    tracer = frametrace.Tracer(buffer_size=4096)
    with tracer:
        run_made(tracer, 6 * RELEASE_MIN)
        held = tracer.functions_held
    assert tracer.functions_freed > 0
    assert held < 3 * RELEASE_MIN
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    check_made(events, 6 * RELEASE_MIN - 1)


def test_everything_retained_is_kept():
    """A ring that holds every call: sweeps free no function it names (only
    entries no record names: the tracer's own methods, never recorded),
    the trace is whole."""
    tracer = frametrace.Tracer(buffer_size=1 << 20)
    with tracer:
        codes = run_made(tracer, 300)
        tracer.release_functions()
        tracer.release_functions()
        gc.collect()
        assert all(ref() is not None for ref in codes)
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert len(check_made(events, 299)) == 300
    assert tracer.functions_freed < 5


def test_released_then_freed_on_the_next_sweep():
    """An entry unreferenced at one sweep is released (out of the map, names
    kept) and freed at the next if still unreferenced: its code object goes
    then, and its id is reused by a new function, named right."""
    tracer = frametrace.Tracer(buffer_size=1024)
    with tracer:
        f = made_function(1)
        f("a")
        code = weakref.ref(f.__code__)
        del f
        for _ in range(2000):  # overwrites f_1's records
            rare()
        assert tracer.release_functions() == 0  # released, not freed
        gc.collect()
        assert code() is not None
        for _ in range(2000):
            rare()
        assert tracer.release_functions() > 0
        gc.collect()
        assert code() is None
        g = made_function(2)
        g("b")
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    check_made(events, 2)


def test_pinned_and_filtered_entries_stay_ignored():
    """_ignore() is never released; ignore= patterns still apply to a
    function met again after its entry was freed."""
    def noisy():
        return 2

    def hidden():
        return 3

    tracer = frametrace.Tracer(buffer_size=1024, ignore=["*noisy"])
    tracer._ignore(hidden)
    with tracer:
        noisy()
        hidden()
        for _ in range(3):
            for _ in range(1000):
                rare()
            tracer.release_functions()
        noisy()
        hidden()
        rare()
    names = {ev.name for ev in tracer.getEvents()}
    assert "rare" in names
    assert not {n for n in names if n.endswith(("noisy", "hidden"))}


def test_snapshot_keeps_its_names_through_sweeps():
    """A snapshot (a pending dump) holds its own copy of the table: sweeps
    of the live tracer after it leave its names whole."""
    tracer = frametrace.Tracer(buffer_size=4096)
    with tracer:
        run_made(tracer, 50)
        snap = tracer.snapshot()
        for _ in range(3):
            for _ in range(3000):
                rare()
            tracer.release_functions()
        assert tracer.functions_freed > 0
    events = snap.getEvents()
    assert_valid_trace(events, snap.start_ns, snap.stop_ns)
    assert len(check_made(events, 49)) == 50


def test_threads_making_functions_while_the_main_thread_sweeps():
    """Threads make and call new functions while another sweeps as often as
    it can: each record names its own function (a thread between finding an
    id and writing it, as a sweep runs, is what released entries are kept
    for)."""
    tracer = frametrace.Tracer(buffer_size=8192)
    stop = threading.Event()

    def maker(base):
        i = base
        while not stop.is_set():
            made_function(i)("xy")
            i += 1

    with tracer:
        threads = [threading.Thread(target=maker, args=(k * 10**6,)) for k in (1, 2)]
        for th in threads:
            th.start()
        sweeps = 0
        while sweeps < 200:
            tracer.release_functions()
            sweeps += 1
        stop.set()
        for th in threads:
            th.join()
    events = tracer.getEvents()
    assert_valid_trace(events, tracer.start_ns, tracer.stop_ns)
    assert tracer.functions_freed > 0
    for tid in {ev.thread_id for ev in events if ev.name.startswith("f_")}:
        made = [ev for ev in events if ev.thread_id == tid and ev.name.startswith("f_")]
        for ev in made:
            i = int(ev.name[2:])
            assert (ev.filename, ev.lineno) == (f"<gen-{i}>", i % 7 + 1), ev
        numbers = [int(ev.name[2:]) for ev in made]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))


@pytest.mark.one_setup
def test_release_functions_needs_a_recording_tracer():
    tracer = frametrace.Tracer()
    with pytest.raises(RuntimeError, match="recording"):
        tracer.release_functions()
    with tracer:
        pass
    with pytest.raises(RuntimeError, match="recording"):
        tracer.release_functions()
    assert tracer.functions_held > 0 and tracer.functions_freed == 0
