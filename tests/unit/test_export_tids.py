"""The writers' tid per thread (``_tracer._export_tids``) against the rule
it implements, written out plainly: the native id, else the ident; a tid
an earlier thread was given gets base + serial instead."""
import random

from frametrace import _tracer

SYNTHETIC_TID_BASE = 1 << 30
MAX = (1 << 64) - 1


def rule(threads):
    given = []
    for serial, ident, native in threads:
        tid = native or ident
        given.append(SYNTHETIC_TID_BASE + serial if tid in given else tid)
    return given


def test_reused_ids_among_many_threads():
    rng = random.Random(7)
    # Few distinct ids: most threads reuse one, some an earlier synthetic
    # tid, and the extremes of the range.
    pool = [1, 2, 3, 0, MAX, MAX - 1] + [SYNTHETIC_TID_BASE + s for s in range(1, 40)]
    threads = [(serial, rng.choice(pool[:5]) or 1, rng.choice(pool))
               for serial in range(1, 3001)]
    assert _tracer._export_tids(threads) == rule(threads)


def test_distinct_ids_keep_their_own():
    # Natives given, or 0 (the ident then), never one another's.
    threads = [(s, 10**9 + s, 0 if s % 2 else s) for s in range(1, 20001)]
    assert _tracer._export_tids(threads) == [10**9 + s if s % 2 else s for s in range(1, 20001)]
