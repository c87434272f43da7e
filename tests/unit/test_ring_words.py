"""The ring's 8-byte records: a function id below 2**21 and a delta below
2**40 ticks take one word; anything else takes two (an escape), and every
record's time is chained by deltas to the newest one.  Driven through the
private frametrace._testing.replay, whose capacity is in words: replaying a stream with ids
and gaps that need escapes must give exactly what the same stream with
small ids and times gives, through the same overwriting, with the same
drop count."""
import random

import pytest

from frametrace import _testing

FUNC, KIND, START, END = range(4)
ID_LIMIT = 1 << 21      # ids from here take an escape
DELTA_LIMIT = 1 << 40   # and so do gaps from here
GAP_LIMIT = 1 << 59     # what replay() accepts between records
KINDS = ["call", "return", "c_call", "c_return", "c_exception"]


def words(records, base_ts):
    """How many words each record takes: the ring's rule, written again."""
    out, prev = [], base_ts
    for ts, _, func in records:
        delta = ts - prev
        out.append(1 if 0 <= delta < DELTA_LIMIT and func < ID_LIMIT else 2)
        prev = ts
    return out


def retained(records, base_ts, capacity):
    """The newest records whose words fit in capacity."""
    sizes = words(records, base_ts)
    total, keep = 0, 0
    for size in reversed(sizes):
        if total + size > capacity:
            break
        total += size
        keep += 1
    return keep, sum(sizes) > capacity


def test_one_word_limits_are_exact():
    base = 1_000
    t = [base, base + 1, base + DELTA_LIMIT, base + 2 * DELTA_LIMIT,
         base + 2 * DELTA_LIMIT + 1]
    t += [t[-1] + GAP_LIMIT - 1, t[-1] + GAP_LIMIT, t[-1] + GAP_LIMIT]
    records = [
        (t[0], "call", ID_LIMIT - 1),  # one word: the largest id
        (t[1], "call", ID_LIMIT),      # two: the smallest id past it
        (t[2], "call", 5),             # one: the largest delta
        (t[3], "call", 6),             # two: the smallest delta past it
        (t[4], "return", 6),
        (t[5], "return", 5),           # two: the largest gap
        (t[6], "return", ID_LIMIT),
        (t[7], "return", ID_LIMIT - 1),
    ]
    assert words(records, base) == [1, 2, 1, 2, 1, 2, 2, 1]
    stop = records[-1][0] + 1
    # Exactly the words needed: nothing is dropped.
    out, dropped, _ = _testing.replay(records, base_ts=base, stop_ns=stop,
                                   capacity=12, with_dropped=True)
    assert dropped == 0
    got = sorted((ev[FUNC], ev[START], ev[END]) for ev in out)
    assert got == sorted([
        (ID_LIMIT - 1, records[0][0], records[7][0]),
        (ID_LIMIT, records[1][0], records[6][0]),
        (5, records[2][0], records[5][0]),
        (6, records[3][0], records[4][0]),
    ])
    # One word fewer: the oldest record (one word) goes, and only it.
    _, dropped, _ = _testing.replay(records, base_ts=base, stop_ns=stop,
                                 capacity=11, with_dropped=True)
    assert dropped == 1
    # Two fewer: the escape's header goes too; its delta word is left
    # behind as the oldest word, and is no record.
    out, dropped, _ = _testing.replay(records, base_ts=base, stop_ns=stop,
                                   capacity=10, with_dropped=True)
    assert dropped == 2
    assert min(ev[START] for ev in out) == records[2][0]


def test_a_ring_of_one_word_and_an_escape_keeps_nothing():
    out, dropped, _ = _testing.replay([(0, "call", 1), (1, "c_call", ID_LIMIT)],
                                   base_ts=0, stop_ns=5, capacity=1,
                                   with_dropped=True)
    assert out == [] and dropped == 2


def test_gaps_past_what_a_ring_stores_are_refused():
    with pytest.raises(ValueError, match="2\\*\\*59"):
        _testing.replay([(GAP_LIMIT, "call", 1)], base_ts=0, stop_ns=GAP_LIMIT + 1)
    with pytest.raises(ValueError, match="2\\*\\*59"):
        _testing.replay([(0, "call", 1), (GAP_LIMIT, "return", 1)],
                        base_ts=0, stop_ns=GAP_LIMIT + 1)
    # The most negative start is fine, as long as the gaps are not.
    out = _testing.replay([(-2**62, "call", 1), (-2**62 + 5, "return", 1)],
                          base_ts=-2**62, stop_ns=0)
    assert [(ev[START], ev[END]) for ev in out] == [(-2**62, -2**62 + 5)]


def small_twin(records, base_ts, stop_ns):
    """The same stream with ids and times renumbered to need no escape: the
    replay compares times and copies them, so it commutes with any
    increasing map of times and any one-to-one map of ids."""
    times = sorted({base_ts, stop_ns, *(ts for ts, _, _ in records)})
    ids = sorted({func for _, _, func in records})
    small_ts = {t: i for i, t in enumerate(times)}
    small_id = {f: i for i, f in enumerate(ids)}
    twin = [(small_ts[ts], kind, small_id[func]) for ts, kind, func in records]
    return twin, small_ts[base_ts], small_ts[stop_ns], times, ids


def random_stream(rng):
    n = rng.randrange(1, 60)
    base_ts = rng.choice([0, rng.randrange(-2**62, 2**62)])
    records, ts = [], base_ts
    for _ in range(n):
        ts += rng.choice([0, 1, rng.randrange(1000), DELTA_LIMIT - 1, DELTA_LIMIT,
                          rng.randrange(DELTA_LIMIT, GAP_LIMIT)])
        func = rng.choice([rng.randrange(4), ID_LIMIT - 1, ID_LIMIT,
                           rng.randrange(ID_LIMIT, 2**31)])
        records.append((ts, rng.choice(KINDS), func))
    return records, base_ts


def random_case(rng):
    """A random stream, its stop and a ring capacity: room for all of it,
    or less (it overflows)."""
    records, base_ts = random_stream(rng)
    stop_ns = records[-1][0] + rng.choice([0, 1, 10])
    needed = sum(words(records, base_ts))
    capacity = rng.choice([needed, needed + 3, rng.randrange(1, needed + 1)])
    return records, base_ts, stop_ns, capacity


@pytest.mark.parametrize("seed", range(300))
def test_escapes_replay_like_small_records(seed):
    records, base_ts, stop_ns, capacity = random_case(random.Random(seed))
    keep, overflowed = retained(records, base_ts, capacity)
    out, dropped, _ = _testing.replay(records, base_ts=base_ts, stop_ns=stop_ns,
                                   capacity=capacity, with_dropped=True)
    assert dropped == len(records) - keep
    if keep == 0:
        assert all(ev[START] == ev[END] == stop_ns for ev in out)
        return
    twin, twin_base, twin_stop, times, ids = small_twin(records, base_ts, stop_ns)
    # The twin's records take a word each: a ring of `keep` words overflows
    # exactly when the original did and keeps the same records.
    twin_out, twin_dropped, _ = _testing.replay(
        twin, base_ts=twin_base, stop_ns=twin_stop,
        capacity=keep if overflowed else len(twin), with_dropped=True)
    assert twin_dropped == dropped
    assert len(out) == len(twin_out)
    for ev, tw in zip(out, twin_out):
        # Times the replay copied from records, base or stop map back; the
        # twin's times are indices into `times`.
        back = (ids[tw[FUNC]], tw[KIND], times[tw[START]], times[tw[END]], *tw[4:])
        assert tuple(ev) == back, (ev, tw)


@pytest.mark.parametrize("seed", range(300))
def test_a_packed_ring_replays_as_it_was(seed):
    # An ended thread's ring is re-encoded in variable-length bytes (its
    # words freed): escapes, wrapped rings (a lone delta word at the oldest
    # end) and gaps up to 2**59 ticks must read back identically, with the
    # same losses.
    rng = random.Random(seed)
    records, base_ts, stop_ns, capacity = random_case(rng)
    base_stack = rng.choice([[], [rng.randrange(4)]])
    args = dict(base_ts=base_ts, stop_ns=stop_ns, capacity=capacity,
                base_stack=base_stack, with_dropped=True,
                loss_ns=rng.choice([0, stop_ns]))
    assert _testing.replay(records, packed=True, **args) == _testing.replay(records, **args)


def test_a_packed_ring_with_nothing_retained_keeps_its_losses():
    # Two words in a one-word ring: the escape's header is overwritten.
    records = [(10, "call", 1), (20, "call", ID_LIMIT)]
    args = dict(base_ts=0, stop_ns=30, capacity=1, with_dropped=True)
    plain = _testing.replay(records, **args)
    assert plain[1] == 2
    assert _testing.replay(records, packed=True, **args) == plain


@pytest.mark.parametrize("packed", [False, True])
def test_a_ring_after_a_discarded_one_reads_from_its_first_word(packed):
    # A thread's ring discarded under the memory bound, then a new one: its
    # records are read from word 0 (it never wrapped), the earlier ones
    # counted as lost, the frames they leave open as for any loss.
    records = [(10, "call", 1), (20, "call", 2), (30, "return", 2), (40, "return", 1),
               (50, "call", 3), (60, "return", 3)]
    plain = _testing.replay(records, base_ts=0, stop_ns=70, capacity=64, with_dropped=True)
    out, lost, _ = _testing.replay(records, base_ts=0, stop_ns=70, capacity=64,
                                   with_dropped=True, discarded=5, packed=packed)
    assert lost == 5
    assert out == plain[0]
    assert [(ev[FUNC], ev[START], ev[END]) for ev in out] == [(1, 10, 40), (2, 20, 30), (3, 50, 60)]
