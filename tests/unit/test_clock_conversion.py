"""Ticks to monotonic ns (frametrace._testing.ticks_to_ns): exact at the
anchors, monotone, and equal to exact interpolation between them."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frametrace import _testing


def test_conversion_is_exact_at_anchors_and_monotone():
    anchors = [(1000, 50), (4000, 1050), (10000, 4050)]
    ticks = [1000, 2500, 4000, 4001, 7000, 10000, 13000]
    assert _testing.ticks_to_ns(anchors, ticks) == [50, 550, 1050, 1050, 2550, 4050, 5550]
    dense = list(range(1000, 10001, 7))
    ns = _testing.ticks_to_ns(anchors, dense)
    assert ns == sorted(ns)
    # A fresh cursor per call: out-of-order queries still convert right.
    assert _testing.ticks_to_ns(anchors, [7000, 2500]) == [2550, 550]
    with pytest.raises(ValueError, match="increase"):
        _testing.ticks_to_ns([(5, 5), (5, 6)], [5])


@settings(max_examples=400, deadline=None)
@given(data=st.data(),
       steps=st.lists(st.tuples(st.integers(1, 1 << 60), st.integers(0, 1 << 60)),
                      min_size=1, max_size=3),
       origin=st.tuples(st.integers(-(1 << 60), 1 << 60), st.integers(-(1 << 60), 1 << 60)))
def test_conversion_equals_exact_interpolation(data, steps, origin):
    # Slopes above and below one ns per tick (TSC vs a slow cntvct), spans
    # from one tick to 2**60 (anchors stay within int64): the division-free
    # path must give the exact floor.
    anchors = [origin]
    for dticks, dns in steps:
        anchors.append((anchors[-1][0] + dticks, anchors[-1][1] + dns))
    lo, hi = anchors[0][0] + 1, anchors[-1][0]
    ticks = sorted(data.draw(st.lists(st.integers(lo, hi), min_size=1, max_size=20)))
    ticks += [anchors[-1][0]] + [a[0] - 1 for a in anchors[1:]]
    ticks = sorted(t for t in ticks if t > anchors[0][0])
    assert _testing.ticks_to_ns(anchors, ticks) == [_exact_ns(anchors, t) for t in ticks]


def test_conversion_exact_where_a_binary_fraction_rounds_low():
    # rem / span = 1/3: its 64-bit fraction is below 1/3, so 3k ticks would
    # convert to k - 1 ns without the correction.
    anchors = [(0, 0), (3 << 40, 1 << 40)]
    ticks = [3, 6, 3 << 20, (3 << 40) - 3, 1 << 40]
    assert _testing.ticks_to_ns(anchors, ticks) == [_exact_ns(anchors, t) for t in ticks]


def _exact_ns(anchors, t):
    """The conversion's definition: floor of the linear interpolation."""
    seg = max((i for i in range(len(anchors) - 1) if anchors[i][0] < t), default=0)
    (t0, n0), (t1, n1) = anchors[seg], anchors[seg + 1]
    return n0 + (t - t0) * (n1 - n0) // (t1 - t0)
