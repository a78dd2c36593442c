"""Real-time statistics on made-up latency series: worst case, deadline misses, averaged runs."""

import pytest

from deploykit.metrics.realtime import (
    averaged,
    deadline_check,
    deadline_misses,
    longest_run,
    worst_case,
)


def test_worst_case_over_every_value():
    series = [1.0] * 995 + [2.0, 3.0, 4.0, 5.0, 50.0]
    w = worst_case(series)
    assert w["p50_ms"] == 1.0 and w["max_ms"] == 50.0 and w["n"] == 1000
    assert 5.0 <= w["p999_ms"] <= 50.0  # between the last two values, linear interpolation
    assert w["jitter_ms"] == pytest.approx(w["p99_ms"] - w["p50_ms"])
    assert worst_case([])["n"] == 0


def test_misses_count_strictly_over_the_deadline_and_the_longest_run():
    series = [10, 34, 35, 36, 10, 40, 10, 33]
    d = deadline_misses(series, 33.0)
    assert d["misses"] == 4 and d["frames"] == 8 and d["miss_rate"] == 0.5  # 33 is on time
    assert d["longest_miss_run"] == 3


def test_dropped_frames_are_misses_and_join_runs():
    d = deadline_misses([10, 40, 10, 10], 33.0, dropped=[2, 2, 4])  # two skipped before frame 2, one at the end
    assert d["frames"] == 7 and d["misses"] == 4 and d["dropped"] == 3
    assert d["longest_miss_run"] == 3  # frame 1 late, then the two dropped before frame 2


def test_deadline_check_judges_the_miss_rate():
    stats = deadline_misses([1.0] * 99 + [9.0], 5.0)
    ok, bad = deadline_check(stats, 0.01), deadline_check(stats, 0.0)
    assert ok["passed"] and not bad["passed"] and ok["name"] == "deadline 5 ms" and ok["measured"] == 0.01
    assert "1 of 100 frames late" in bad["message"] and "> allowed 0%" in bad["message"]


def test_longest_run():
    assert longest_run([]) == 0 and longest_run([True, True, False, True]) == 2


def test_averaged_runs():
    assert averaged([1, 3, 5, 7, 9], 2) == [2.0, 6.0]  # the short tail dropped
    assert averaged([1, 3], 5) == [2.0] and averaged([1, 2], 1) == [1, 2]
