"""The progress line's runs-left and time-left estimate (nsys_cc.launch.eta), on made-up run durations."""

from __future__ import annotations

import pytest

from nsys_cc.launch import eta


def test_fixed_runs_left_and_median_time():
    # 3 of 6 runs made, taking 40, 90 (a slow first run) and 44 s: the median 44 s, not the mean 58 s, sets the pace.
    left = eta.remaining([90.0, 40.0, 44.0], made=3, repeat=6)
    assert (left.low, left.expected, left.high) == (3, 3, 3)
    assert left.per_run_s == 44.0
    assert left.seconds == 132.0
    assert left.describe() == "3 runs left, ~2 min 12 s at 44 s a run"


def test_no_time_before_a_run_completes():
    left = eta.remaining([], made=0, repeat=4)
    assert left.seconds is None
    assert left.describe() == "4 runs left, time not known before the first run completes"


def test_precision_expected_runs_from_one_over_root_n():
    # After 3 runs the worst half-width is ±20 %, the goal ±10 %: (0.2/0.1)² = 4 times the runs, 12 in all, 9 left.
    left = eta.remaining([30.0, 30.0, 30.0], made=3, repeat=3, max_repeat=30, precision=0.10, worst=0.20)
    assert (left.low, left.expected, left.high) == (0, 9, 27)
    assert left.seconds == 270.0
    assert left.describe() == "about 9 runs left, ~4 min 30 s at 30 s a run; 0 to 27 until the precision is reached"


def test_precision_expected_is_capped_by_max_repeat_and_floored_by_repeat():
    # ±50 % after 2 runs toward ±10 %: 50 runs in all, more than max_repeat 6 allows: 4 left at most.
    capped = eta.remaining([10.0, 12.0], made=2, repeat=3, max_repeat=6, precision=0.10, worst=0.50)
    assert (capped.low, capped.expected, capped.high) == (1, 4, 4)
    # Already within the precision after 2 of the 3 first runs: the third is still made.
    floored = eta.remaining([10.0, 12.0], made=2, repeat=3, max_repeat=6, precision=0.10, worst=0.05)
    assert (floored.low, floored.expected, floored.high) == (1, 1, 4)


def test_runs_needed():
    assert eta.runs_needed(4, 0.15, 0.10) == 9          # 4 · 2.25 = 9
    assert eta.runs_needed(4, 0.101, 0.10) == 5         # 4.08 → 5: always at least one more
    assert eta.runs_needed(4, 0.09, 0.10) == 4
    assert eta.runs_needed(2, float("inf"), 0.10) == 3  # no interval yet: one more, then look again
    with pytest.raises(ValueError):
        eta.runs_needed(0, 0.2, 0.1)


def test_duration_words():
    assert [eta.duration(s) for s in (0, 44.4, 59.6, 130, 3725)] == ["0 s", "44 s", "1 min 00 s", "2 min 10 s",
                                                                     "1 h 02 min"]


def test_nothing_left():
    assert eta.remaining([20.0], made=5, repeat=5).describe() == "no runs left"
