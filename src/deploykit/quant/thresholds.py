"""Clipping thresholds from a histogram of |x| over [0, absmax]: entropy, percentile, MSE.

Pure functions on counts, so each is tested on distributions whose answer is known.
"""

from __future__ import annotations

import numpy as np

QUANT_BINS = 128  # levels on one side of a symmetric INT8 grid (TensorRT's entropy calibrator uses 128)
_SMOOTH_EPS = 1e-4


def abs_histogram(value: np.ndarray, absmax: float, bins: int) -> np.ndarray:
    """Counts of |value| in ``bins`` equal bins over [0, absmax]; larger values land in the last bin."""
    from deploykit.quant.histogram import bin_counts

    return bin_counts(np.abs(np.asarray(value, dtype=np.float32).ravel()), absmax, bins)


def percentile(hist: np.ndarray, absmax: float, pct: float) -> float:
    """The upper edge of the bin where the cumulative share of |x| reaches ``pct`` percent."""
    cdf = np.cumsum(hist, dtype=np.float64)
    if cdf[-1] == 0:
        return absmax
    k = int(np.searchsorted(cdf, cdf[-1] * pct / 100.0))
    return min(absmax, (k + 1) * absmax / len(hist))


def entropy(hist: np.ndarray, absmax: float, quant_bins: int = QUANT_BINS, stride: int = 0) -> float:
    """The threshold minimising KL(P || Q): P the clipped histogram, Q its ``quant_bins``-level version.

    Candidates are the bin edges from ``quant_bins`` to all bins, every ``stride`` bins (default:
    bins // 512, so 2048 bins try 480 thresholds).
    """
    hist = np.array(hist, dtype=np.float64)
    bins = len(hist)
    if hist[1:].sum() == 0:
        return absmax
    # Relu outputs put about half their values at exactly 0, which every grid represents exactly;
    # left in, that spike dominates the divergence and drags the threshold down (relu outputs
    # clipped to half their range were measured here). pytorch-quantization does the same.
    hist[0] = hist[1]
    stride = stride or max(1, bins // 512)
    candidates = list(range(quant_bins, bins + 1, stride))
    if candidates[-1] != bins:
        candidates.append(bins)
    best_kl, best_i = np.inf, bins
    for i in candidates:
        kl = _kl_at(hist, i, quant_bins)
        if kl < best_kl:
            best_kl, best_i = kl, i
    return best_i * absmax / bins


def _kl_at(hist: np.ndarray, i: int, quant_bins: int) -> float:
    ref = hist[:i].copy()
    ref[-1] += hist[i:].sum()  # clipped values pile up in the last kept bin
    kept = hist[:i]
    nonzero = kept != 0
    starts = (np.arange(quant_bins) * i) // quant_bins
    sums = np.add.reduceat(kept, starts)
    counts = np.add.reduceat(nonzero.astype(np.float64), starts)
    per_bin = np.divide(sums, counts, out=np.zeros_like(sums), where=counts > 0)
    expanded = np.repeat(per_bin, np.diff(np.append(starts, i))) * nonzero
    p, q = _smooth(ref), _smooth(expanded)
    if p is None or q is None:
        return np.inf
    mask = p > 0
    # Smoothing can push a tiny bin below zero; such a bin is as wrong as an empty one.
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))


def _smooth(d: np.ndarray) -> np.ndarray | None:
    """Normalise and move a little mass into empty bins, so KL stays finite."""
    total = d.sum()
    if total <= 0:
        return None
    d = d / total
    zeros = d == 0
    n_zero, n_nonzero = int(zeros.sum()), int((~zeros).sum())
    if n_zero == 0:
        return d
    eps1 = _SMOOTH_EPS * n_zero / n_nonzero
    if eps1 >= 1.0:
        return None
    return d + _SMOOTH_EPS * zeros - eps1 * ~zeros


def mse(hist: np.ndarray, absmax: float, grid: str = "int8", candidates: int = 256) -> float:
    """The threshold minimising the mean squared quantize-dequantize error of the histogram.

    ``grid``: ``int8`` (127 uniform levels a side, also used for uint8) or ``fp8`` (E4M3, max 448).
    """
    hist = np.asarray(hist, dtype=np.float64)
    bins = len(hist)
    width = absmax / bins
    nz = hist > 0
    if absmax <= 0 or not nz.any():
        return absmax
    centers, weights = ((np.arange(bins) + 0.5) * width)[nz], hist[nz]
    ks = np.unique(np.linspace(max(1, bins // 50), bins, candidates).astype(np.int64))
    ts = ks * width
    errors = np.array([np.sum(weights * (_fake_quant(centers, t, grid) - centers) ** 2) for t in ts])
    return float(ts[int(np.argmin(errors))])


def quantization_error(hist: np.ndarray, absmax: float, threshold: float, grid: str = "int8") -> float:
    """Mean squared quantize-dequantize error of the histogram's values (bin centres) at ``threshold``."""
    hist = np.asarray(hist, dtype=np.float64)
    total = hist.sum()
    if total == 0 or absmax <= 0 or threshold <= 0:
        return 0.0
    centers = (np.arange(len(hist)) + 0.5) * (absmax / len(hist))
    nz = hist > 0
    c = centers[nz]
    return float(np.sum(hist[nz] * (_fake_quant(c, threshold, grid) - c) ** 2) / total)


def _fake_quant(x: np.ndarray, amax: float, grid: str) -> np.ndarray:
    if grid == "fp8":
        import ml_dtypes

        scale = amax / 448.0
        v = np.clip(x / scale, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
        return v * scale
    scale = amax / 127.0
    return np.clip(np.rint(x / scale), -127, 127) * scale
