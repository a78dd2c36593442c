"""Trial statistics and the noise-aware baseline comparison."""

import pytest

from deploykit.metrics.latency import aggregate_trials, naive_regression, regression


def test_median_of_trials_and_spread():
    trials = [[1.0] * 9 + [5.0], [2.0] * 10, [1.5] * 10]
    agg = aggregate_trials(trials)
    assert agg["latency"]["p50_ms"] == 1.5  # median of 1.0, 2.0, 1.5
    assert agg["spread"]["p50_ms"] == {"min": 1.0, "max": 2.0, "rel": pytest.approx(1.0 / 1.5)}
    assert agg["latency"]["n"] == 30 and agg["latency"]["max_ms"] == 5.0
    assert [t["p50_ms"] for t in agg["trials"]] == [1.0, 2.0, 1.5]


def test_a_clear_regression_fails_and_says_by_how_much():
    base = [10.0, 10.2, 9.9, 10.1, 10.0]
    slow = [13.0, 13.1, 12.9, 13.2, 13.0]  # 30 % slower, trials tight
    check = regression("p99 latency", "ms", slow, base, 0.10, higher_is_better=False)
    assert not check["passed"]
    assert check["slowdown"] == pytest.approx(0.30)
    assert "30.0% slower" in check["message"] and "at least 26.5%" in check["message"]


def test_a_slowdown_inside_the_measured_spread_is_not_a_regression():
    base = [10.0, 8.0, 12.0, 9.0, 11.0]
    noisy = [11.5, 9.0, 14.0, 10.0, 12.0]  # median 15 % slower, but the trials overlap
    check = regression("p99 latency", "ms", noisy, base, 0.10, higher_is_better=False)
    assert check["passed"] and check["slowdown"] == pytest.approx(0.15)
    assert "within the measured noise" in check["message"]
    assert naive_regression(sum(noisy) / 5, sum(base) / 5, 0.10)  # a bare percentage would have failed


def test_throughput_regression_is_expressed_as_slowdown():
    check = regression("fps", "FPS", [50.0, 51.0, 49.0], [100.0, 101.0, 99.0], 0.10, higher_is_better=True)
    assert not check["passed"] and check["slowdown"] == pytest.approx(1.0)  # half the FPS = twice the time
    faster = regression("fps", "FPS", [150.0, 151.0], [100.0, 101.0], 0.10, higher_is_better=True)
    assert faster["passed"] and "faster" in faster["message"]


def test_identical_measurements_never_regress():
    trials = [1.0, 1.1, 0.9, 1.05, 0.95]
    for higher in (True, False):
        check = regression("x", "u", trials, trials, 0.0, higher_is_better=higher)
        assert check["passed"] and check["slowdown"] == 0.0
