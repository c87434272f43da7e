"""The flight recorders' slow-step and hang bounds (frametrace.flight.StepBounds)
on made-up step durations: which step counts as slow, and when a running
one counts as hung.  No clock, no tracer."""
import pytest

from frametrace.flight import NOISE_WINDOW, SLOW_MARGIN_MS, WINDOW, StepBounds

MS = 1_000_000


def bounds(**options):
    # frametrace.flight_recorder's defaults
    defaults = dict(slow_factor=3.0, slow_ms=None, margin_ms=SLOW_MARGIN_MS, hang_ms=None,
                    warmup=5)
    return StepBounds(**{**defaults, **options})


def fed(durations_ms, **options):
    b = bounds(**options)
    for d in durations_ms:
        b.add(int(d * MS))
    return b


def slow(b, duration_ms):
    """Whether a step of duration_ms after those fed would be slow (the
    bounds left as they were)."""
    return b.slow_ns is not None and duration_ms * MS > b.slow_ns


def test_quiet_short_steps_are_slow_past_the_margin():
    assert SLOW_MARGIN_MS == 100.0
    b = fed([0.3] * 200)
    assert not slow(b, 100.0) and slow(b, 100.4)  # the median (0.3) plus 100 ms
    # add() answers for the bound of the steps before it.
    assert b.add(int(101 * MS)) is True
    assert b.add(int(0.3 * MS)) is False


def test_scheduler_noise_on_short_steps_stays_under_three_times_its_quantile():
    # 0.3 ms steps on a busy machine: one in ten delayed by time slices
    # (20 ms), one in 500 by much more (150 ms): the 99.9th percentile of
    # the last 5,000 steps is 150 ms.
    noisy = ([0.3] * 9 + [20.0]) * 49 + [0.3] * 9 + [150.0]
    b = fed(noisy * (NOISE_WINDOW // len(noisy)))
    assert b.slow_ns == pytest.approx((0.3 + 3 * (150 - 0.3)) * MS)
    assert not slow(b, 400.0) and slow(b, 450.0)


def test_a_few_slow_steps_do_not_raise_the_bound():
    b = fed([0.3] * NOISE_WINDOW + [2000.0] * 3)
    assert b.slow_ns == pytest.approx(100.3 * MS)
    assert b.add(2000 * MS) is True


def test_long_steps_are_slow_past_slow_factor_times_their_median():
    b = fed([1000.0, 1010.0, 990.0, 1005.0, 995.0] * 20)
    assert b.slow_ns == pytest.approx(3 * 1000.0 * MS)
    assert not slow(b, 2990.0) and slow(b, 3010.0)


def test_steps_that_vary_are_not_slow():
    # Every other step does more (600 ms against 100): 3x the median (100
    # ms) would take every long step for a slow one, and the median plus
    # the margin (200 ms) too.
    b = fed([100.0, 600.0] * 50 + [100.0])
    assert not slow(b, 600.0) and not slow(b, 1500.0)
    assert b.slow_ns == pytest.approx((100 + 3 * (600 - 100)) * MS)
    assert slow(b, 1610.0)


def test_no_step_is_slow_during_warmup_without_slow_ms():
    b = bounds(warmup=5)
    for _ in range(4):
        assert b.slow_ns is None and b.hang_ns is None
        assert b.add(10_000 * MS) is False
    b.add(10_000 * MS)
    assert b.slow_ns is not None  # the fifth step ended: bounds from now on


def test_slow_ms_is_a_bound_of_its_own_from_the_first_step():
    b = bounds(slow_ms=20.0)
    assert b.slow_ns == 20 * MS
    assert b.add(21 * MS) is True
    # Over the warmup: the relative bound (0.3 + 100 ms) is above slow_ms,
    # which stays the bound; a lower relative one would win.
    b = fed([0.3] * 10, slow_ms=20.0)
    assert b.slow_ns == 20 * MS
    b = fed([1.0] * 10, slow_ms=80.0, margin_ms=5.0)
    assert b.slow_ns == pytest.approx(6 * MS)


def test_slow_factor_none_leaves_only_slow_ms():
    b = fed([0.3] * 20 + [500.0] * 80, slow_factor=None, slow_ms=600.0)
    assert b.slow_ns == 600 * MS


def test_the_margin_can_be_lowered():
    b = fed([0.3] * 20, margin_ms=0.0)
    assert b.slow_ns == pytest.approx(0.9 * MS)


def test_the_windows_forget_older_steps():
    # The median's at once, the noise's after 5,000 steps.
    b = fed([1000.0] * WINDOW + [10.0] * WINDOW)
    assert len(b.durations) == WINDOW
    assert b.slow_ns == pytest.approx((10 + 3 * (1000 - 10)) * MS)
    b = fed([1000.0] * WINDOW + [10.0] * NOISE_WINDOW)
    assert b.slow_ns == pytest.approx(110 * MS)  # 10 ms + the margin


def test_hang_bound_is_ten_slow_bounds_at_least_a_second():
    assert fed([0.3] * 20).hang_ns == pytest.approx(10 * 100.3 * MS)
    assert fed([0.3] * 20, margin_ms=50.0).hang_ns == 1000 * MS  # not 503 ms
    b = fed([1000.0] * 20)
    assert b.hang_ns == pytest.approx(10 * 3000.0 * MS)
    assert fed([0.3] * 20, slow_factor=None, slow_ms=500.0).hang_ns == 5000 * MS


def test_hang_ms_is_the_hang_bound_even_during_warmup():
    b = bounds(hang_ms=250.0)
    assert b.slow_ns is None and b.hang_ns == 250 * MS
    b = fed([1000.0] * 20, hang_ms=250.0)
    assert b.hang_ns == 250 * MS
