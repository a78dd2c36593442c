"""The one-pass histogram: growing its range merges bins exactly; thresholds match a two-pass histogram."""

import numpy as np
import pytest

from deploykit.quant import thresholds
from deploykit.quant.histogram import AbsHistogram, bin_counts


def fill(chunks, bins=512):
    h = AbsHistogram(bins)
    for c in chunks:
        h.add(c, float(c.min()), float(c.max()))
    return h


def test_growing_range_counts_what_one_histogram_over_the_final_range_counts():
    rng = np.random.default_rng(0)
    # rising scales force several growths, by 2x and by 64x at once
    chunks = [rng.standard_normal(5000).astype(np.float32) * s for s in (0.1, 0.15, 0.5, 0.4, 32.0, 1.0)]
    h = fill(chunks)
    every = np.abs(np.concatenate(chunks))
    assert h.counts.sum() == every.size
    assert h.edge >= every.max() > h.edge / 2  # the range grew by powers of two, not beyond
    direct = bin_counts(every, h.edge, h.bins)
    # merged bins coincide with the direct bins; only values on a bin edge may round to a neighbour
    assert np.abs(h.counts - direct).sum() <= 4
    assert (h.lo, h.hi) == (float(min(c.min() for c in chunks)), float(max(c.max() for c in chunks)))


def test_a_first_sample_of_zeros_then_values():
    h = fill([np.zeros(100, np.float32), np.linspace(-2, 2, 101, dtype=np.float32)])
    assert h.counts.sum() == 201 and h.counts[0] >= 100 and h.edge == pytest.approx(2.0)


def test_bin_counts_not_a_power_of_two_grow_too():
    h = AbsHistogram(600)
    for scale in (1.0, 3.0, 1000.0):
        x = np.full(10, scale, np.float32)
        h.add(x, scale, scale)
    assert h.counts.sum() == 30 and h.edge >= 1000.0


@pytest.mark.parametrize("pct", [99.0, 99.9, 99.99])
def test_percentile_from_the_one_pass_histogram_matches_numpy(pct):
    rng = np.random.default_rng(1)
    chunks = [rng.standard_t(3, 20000).astype(np.float32) * s for s in (1.0, 0.5, 4.0, 2.0)]
    h = fill(chunks, bins=4096)
    hist, top = h.trimmed()
    got = thresholds.percentile(hist, top, pct)
    want = np.quantile(np.abs(np.concatenate(chunks)), pct / 100)
    assert got == pytest.approx(want, abs=2 * top / len(hist))
    assert len(hist) >= 2048  # at least half the internal bins cover the observed range
