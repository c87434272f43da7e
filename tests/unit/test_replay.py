"""The replay's rules, on hand-written record streams (through the private
_replay entry point), and random streams that must all come out sound."""
import random

import pytest

from frametrace import _testing

FUNC, KIND, START, END, PARENT, DEPTH, OPEN_START, OPEN_STOP = range(8)


def replay(records, base_ts=0, stop_ns=1000, **kw):
    out = _testing.replay(records, base_ts=base_ts, stop_ns=stop_ns, **kw)
    check(out, base_ts if kw.get("capacity") is None else None, stop_ns)
    return out


def check(out, window_start, stop_ns):
    for i, ev in enumerate(out):
        assert ev[START] <= ev[END] <= stop_ns, (i, ev)
        if window_start is not None:
            assert window_start <= ev[START], (i, ev)
        if ev[OPEN_STOP]:
            assert ev[END] == stop_ns
        if ev[PARENT] == -1:
            assert ev[DEPTH] == 0
        else:
            p = out[ev[PARENT]]
            assert ev[PARENT] < i
            assert p[START] <= ev[START] and ev[END] <= p[END], (p, ev)
            assert ev[DEPTH] == p[DEPTH] + 1
    by_parent = {}
    for ev in out:
        by_parent.setdefault(ev[PARENT], []).append(ev)
    for sibs in by_parent.values():
        sibs.sort(key=lambda e: (e[START], e[END]))
        for a, b in zip(sibs, sibs[1:]):
            assert a[END] <= b[START], (a, b)


def shape(out):
    return [(ev[FUNC], ev[KIND], ev[START], ev[END], ev[PARENT], ev[OPEN_START], ev[OPEN_STOP])
            for ev in out]


def test_paired_stream():
    out = replay([(10, "call", 1), (20, "c_call", 2), (30, "c_return", 2),
                  (35, "c_call", 3), (36, "c_exception", 3), (40, "return", 1)])
    assert shape(out) == [(1, "py", 10, 40, -1, False, False),
                          (2, "c", 20, 30, 0, False, False),
                          (3, "c", 35, 36, 0, False, False)]


def test_base_stack_frames_start_at_base_and_close_or_cap():
    out = replay([(10, "call", 3), (20, "return", 3), (30, "return", 2)],
                 base_ts=5, base_stack=[1, 2])
    assert shape(out) == [(1, "py", 5, 1000, -1, True, True),
                          (2, "py", 5, 30, 0, True, False),
                          (3, "py", 10, 20, 1, False, False)]


def test_records_after_stop_are_discarded():
    out = replay([(10, "call", 1), (20, "call", 2), (2000, "return", 2)], stop_ns=100)
    assert shape(out) == [(1, "py", 10, 100, -1, False, True),
                          (2, "py", 20, 100, 0, False, True)]


def test_unmatched_python_returns_become_enclosing_frames():
    # The ring lost the calls of 8 and 9: their returns enclose what came
    # before them, from the window start.
    out = replay([(10, "call", 1), (20, "return", 1), (30, "return", 8),
                  (40, "call", 2), (50, "return", 2), (60, "return", 9)], base_ts=5)
    assert shape(out) == [(9, "py", 5, 60, -1, True, False),
                          (8, "py", 5, 30, 0, True, False),
                          (1, "py", 10, 20, 1, False, False),
                          (2, "py", 40, 50, 0, False, False)]


def test_stop_stack_restores_frames_open_across_the_window():
    # Overflow: the stack at stop knows frames 0 and 1 were open throughout.
    records = [(1, "call", 7), (2, "return", 7), (3, "call", 7), (4, "return", 7),
               (10, "call", 2), (20, "return", 2), (30, "call", 3)]
    out = replay(records, capacity=3, stop_stack=[0, 1, 3])
    # The ring kept the last three records; the window starts at the first.
    assert shape(out) == [(0, "py", 10, 1000, -1, True, True),
                          (1, "py", 10, 1000, 0, True, True),
                          (2, "py", 10, 20, 1, False, False),
                          (3, "py", 30, 1000, 1, False, True)]


def test_c_return_without_call_starts_at_previous_record():
    out = replay([(10, "call", 1), (20, "call", 2), (30, "return", 2),
                  (40, "c_return", 5), (50, "return", 1)])
    assert shape(out) == [(1, "py", 10, 50, -1, False, False),
                          (2, "py", 20, 30, 0, False, False),
                          (5, "c", 30, 40, 0, True, False)]


def test_c_return_without_call_at_window_start():
    out = replay([(10, "c_return", 5), (20, "return", 1)], base_ts=3, base_stack=[1])
    assert shape(out) == [(1, "py", 3, 20, -1, True, False),
                          (5, "c", 3, 10, 0, True, False)]


def test_c_call_without_return_ends_with_its_parent_not_at_stop():
    out = replay([(10, "call", 1), (20, "c_call", 5), (30, "return", 1),
                  (40, "call", 2), (50, "return", 2)])
    assert shape(out) == [(1, "py", 10, 30, -1, False, False),
                          (5, "c", 20, 30, 0, False, False),
                          (2, "py", 40, 50, -1, False, False)]


def test_c_call_on_dangling_c_call_closes_it():
    out = replay([(10, "call", 1), (20, "c_call", 5), (30, "c_call", 6),
                  (40, "c_return", 6), (50, "return", 1)])
    assert shape(out) == [(1, "py", 10, 50, -1, False, False),
                          (5, "c", 20, 30, 0, False, False),
                          (6, "c", 30, 40, 0, False, False)]


def test_python_callback_inside_c_call():
    out = replay([(10, "c_call", 5), (20, "call", 1), (30, "return", 1),
                  (40, "c_return", 5)])
    assert shape(out) == [(5, "c", 10, 40, -1, False, False),
                          (1, "py", 20, 30, 0, False, False)]


def test_return_while_c_call_open_closes_both():
    out = replay([(10, "call", 1), (20, "c_call", 5), (25, "call", 2),
                  (30, "c_call", 6), (40, "return", 1)])
    assert [(e[FUNC], e[END]) for e in out] == [(1, 40), (5, 40), (2, 40), (6, 40)]


def test_bad_records_are_rejected():
    with pytest.raises(ValueError, match="kind"):
        _testing.replay([(1, "jump", 1)], base_ts=0, stop_ns=10)
    with pytest.raises(TypeError):
        _testing.replay([(1, "call")], base_ts=0, stop_ns=10)
    with pytest.raises(TypeError, match="base_ts"):
        _testing.replay([], stop_ns=10)
    with pytest.raises(ValueError, match="time order"):
        _testing.replay([(5, "call", 1), (4, "return", 1)], base_ts=0, stop_ns=10)


def test_records_mutated_while_parsed():
    records = []

    class Shrinking:
        def __index__(self):
            records.clear()
            return 5

    records.extend([(Shrinking(), "call", 1)] + [(i, "call", 1) for i in range(6, 50)])
    out = replay(records)
    assert len(out) == 45 and all(ev[OPEN_STOP] for ev in out)


KINDS = ["call", "return", "c_call", "c_return", "c_exception"]


@pytest.mark.parametrize("seed", range(300))
def test_random_streams_are_sound(seed):
    rng = random.Random(seed)
    n = rng.randrange(0, 80)
    ts = sorted(rng.randrange(0, 1000) for _ in range(n))
    records = [(t, rng.choice(KINDS), rng.randrange(4)) for t in ts]
    stop_ns = rng.choice([1000, rng.randrange(0, 1001)])
    capacity = rng.choice([None, rng.randrange(1, 40)])
    base = [rng.randrange(4) for _ in range(rng.randrange(3))]
    stop_stack = rng.choice([None, [rng.randrange(4) for _ in range(rng.randrange(5))]])
    kw = {"base_stack": base, "stop_stack": stop_stack}
    if capacity is not None:
        kw["capacity"] = capacity
    out = _testing.replay(records, base_ts=0, stop_ns=stop_ns, **kw)
    check(out, 0, stop_ns)


def test_python_return_without_call_keeps_the_stack():
    """What CPython 3.11 and 3.13 report when a signal handler raises at a
    function's entry (the previous test, with Python calls): a return with
    no call.  It is an event in the open frame, and closes nothing else."""
    from frametrace import _testing

    # Frames 1, 2 open at start; 3 calls 4; a return of 9 (never called)
    # comes while 4 runs.
    out = _testing.replay(
        [(10, "call", 3), (20, "call", 4), (30, "return", 9),
         (40, "return", 4), (50, "return", 3)],
        base_ts=5, stop_ns=1000, base_stack=[1, 2], stop_stack=[1, 2])
    shape = [(func, start, end, parent, open_start, open_stop)
             for func, _, start, end, parent, _, open_start, open_stop, _ in out]
    # As a C return with no call: it ran at most since the previous record.
    assert shape == [(1, 5, 1000, -1, True, True),
                     (2, 5, 1000, 0, True, True),
                     (3, 10, 50, 1, False, False),
                     (4, 20, 40, 2, False, False),
                     (9, 20, 30, 3, True, False)]


def test_recording_ended_early_ends_open_frames_at_the_loss():
    """A thread whose hook another tool took: what was open at its last
    record ends at loss_ns, flagged open_at_loss, not stretched to the stop,
    and the stop stack (taken later) adds nothing."""
    records = [(10, "call", 1), (20, "call", 2), (30, "c_call", 7), (40, "c_return", 7)]
    out = replay(records, base_ts=0, stop_ns=1000, base_stack=[9], stop_stack=[9, 1, 2, 5],
                 loss_ns=45)
    assert [(ev[FUNC], ev[START], ev[END], ev[OPEN_START], ev[OPEN_STOP], ev[8]) for ev in out] == [
        (9, 0, 45, True, False, True),
        (1, 10, 45, False, False, True),
        (2, 20, 45, False, False, True),
        (7, 30, 40, False, False, False),
    ]
    # Never before the last record, never after the stop.
    assert [ev[END] for ev in replay(records, loss_ns=35)[:3]] == [40, 40, 40]
    assert [ev[END] for ev in replay(records, stop_ns=100, loss_ns=500)[:2]] == [100, 100]
    # Without a loss the same stream ends at the stop.
    assert all(ev[OPEN_STOP] and not ev[8] for ev in replay(records)[:2])


@pytest.mark.parametrize("seed", range(200))
def test_events_lost_entirely_are_counted_exactly_for_python_frames(seed):
    """A random well-nested Python stream through a ring too small for it:
    the events lost entirely (every record of theirs overwritten) are
    counted exactly, frames open at the hook's installation included."""
    rng = random.Random(seed)
    base = [rng.randrange(1, 5) for _ in range(rng.randrange(0, 4))]
    open_frames = [(func, None) for func in base]  # (func, index of its call)
    frames = []  # (call index or None, return index or None)
    records = []
    for ts in range(1, rng.randrange(2, 80)):
        if open_frames and rng.random() < 0.45:
            func, call = open_frames.pop()
            frames.append((call, len(records)))
            records.append((ts, "return", func))
        else:
            func = rng.randrange(1, 9)
            open_frames.append((func, len(records)))
            records.append((ts, "call", func))
    frames += [(call, None) for _, call in open_frames]
    stop_stack = [func for func, _ in open_frames]
    capacity = rng.randrange(1, len(records) + 1)
    lost = len(records) - capacity
    out, lost_records, lost_events = _testing.replay(
        records, base_ts=0, stop_ns=1000, capacity=capacity, base_stack=base,
        stop_stack=stop_stack, with_dropped=True)
    assert lost_records == lost
    gone = [f for f in frames if f[1] is not None and f[1] < lost
            and (f[0] is None or f[0] < lost)]
    assert lost_events == len(gone)
    assert len(out) == len(frames) - len(gone)
