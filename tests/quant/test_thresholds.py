"""Clipping thresholds on distributions whose answer is known."""

import numpy as np
import pytest

from deploykit.quant import thresholds


def hist_of(x, bins=2048):
    amax = float(np.abs(x).max())
    return thresholds.abs_histogram(x, amax, bins), amax


def test_abs_histogram_counts_every_value_and_clips_into_the_last_bin():
    x = np.array([0.0, -0.5, 0.5, 1.0, -1.0, 3.0])
    h = thresholds.abs_histogram(x, 1.0, 4)
    assert h.tolist() == [1, 0, 2, 3]  # 3.0 lands in the last bin with the two 1.0s
    assert h.sum() == x.size


def test_entropy_clips_a_heavy_tail_that_max_keeps():
    x = np.random.default_rng(0).standard_t(3, 200_000)
    h, amax = hist_of(x)
    t = thresholds.entropy(h, amax)
    assert t < 0.4 * amax  # the tail holds a few far outliers: entropy cuts them
    assert t > np.quantile(np.abs(x), 0.99)  # ... but keeps the bulk


def test_entropy_keeps_the_full_range_of_a_uniform_tensor():
    x = np.random.default_rng(1).uniform(-1, 1, 100_000)
    h, amax = hist_of(x)
    assert thresholds.entropy(h, amax) == pytest.approx(amax, rel=0.01)


def test_percentile_matches_numpy_quantile_of_abs():
    x = np.random.default_rng(2).standard_normal(500_000)
    h, amax = hist_of(x)
    assert thresholds.percentile(h, amax, 99.0) == pytest.approx(np.quantile(np.abs(x), 0.99), abs=2 * amax / 2048)
    assert thresholds.percentile(h, amax, 100.0) == pytest.approx(amax)


def test_mse_threshold_beats_max_and_a_tight_clip_on_its_own_objective():
    x = np.random.default_rng(3).laplace(size=200_000)
    h, amax = hist_of(x)
    t = thresholds.mse(h, amax)

    def err(threshold):
        return float(np.mean((thresholds._fake_quant(np.abs(x), threshold, "int8") - np.abs(x)) ** 2))

    assert amax * 0.2 < t < amax
    assert err(t) < err(amax) and err(t) < err(amax * 0.1)


def test_mse_on_the_fp8_grid_clips_less_than_on_the_int8_grid():
    # E4M3 keeps relative precision for small values, so clipping pays off less than for INT8.
    x = np.random.default_rng(4).standard_t(4, 200_000)
    h, amax = hist_of(x)
    assert thresholds.mse(h, amax, "fp8") > thresholds.mse(h, amax, "int8")


def test_all_zero_tensor_keeps_its_zero_range():
    h = thresholds.abs_histogram(np.zeros(10), 0.0, 2048)
    assert thresholds.entropy(h, 0.0) == 0.0 and thresholds.percentile(h, 0.0, 99.9) == 0.0


def test_quantization_error_of_uniform_values_is_a_twelfth_of_the_step_squared():
    hist = np.full(127 * 64, 10)  # uniform over [0, 1]: 64 bins per INT8 step
    step = 1.0 / 127
    assert thresholds.quantization_error(hist, 1.0, 1.0) == pytest.approx(step**2 / 12, rel=0.01)
    # clipping at half the range: the upper half's values all lose their distance to 0.5
    clipped = thresholds.quantization_error(hist, 1.0, 0.5)
    assert clipped == pytest.approx(0.5 * (0.5**2) / 3 + 0.5 * (step / 2) ** 2 / 12, rel=0.02)


def test_entropy_scores_every_candidate_as_the_kl_divergence_of_its_clipped_histogram():
    """The vectorised KL equals KL(P || Q) computed directly for a few candidate thresholds."""
    x = np.abs(np.random.default_rng(4).standard_t(3, 100_000))
    h, _ = np.histogram(x, bins=1024, range=(0, x.max()))
    h = h.astype(np.float64)
    for i in (128, 300, 777, 1024):
        ref = h[:i].copy()
        ref[-1] += h[i:].sum()
        kept = h[:i]
        q = np.zeros(i)
        for j in range(128):
            lo, hi = (j * i) // 128, ((j + 1) * i) // 128
            nz = kept[lo:hi] > 0
            if nz.any():
                q[lo:hi][nz] = kept[lo:hi].sum() / nz.sum()
        p, q = ref / ref.sum(), q / q.sum()
        want = np.sum(p[p > 0] * np.log(p[p > 0] / q[p > 0])) if np.all(q[p > 0] > 0) else np.inf
        got = thresholds._kl_all(h, np.array([i]), 128)[0]
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
