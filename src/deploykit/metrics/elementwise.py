"""Elementwise parity metrics between a reference output and a candidate output.

Everything is computed in float64 on the elements both sides hold as finite numbers; NaN/Inf are
counted separately, because one NaN would otherwise turn every metric into NaN and hide the rest.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from deploykit.config import Tolerance
from deploykit.metrics.reasons import Reason, Verdict

SNR_CAP_DB = 200.0  # identical outputs: an infinite SNR is stored as this (JSON has no infinity)
# abs-error histogram bins: decades 1e-12 .. 1e4, four bins per decade; exact zeros counted apart.
HIST_EDGES = tuple(10.0 ** (e / 4) for e in range(-48, 17))
_MINIMUMS = ("cosine", "snr_db")  # checks where larger is better


def compare(
    ref: np.ndarray, got: np.ndarray, rel_floor: float = 1e-2, atol: float | None = None, rtol: float | None = None
) -> dict[str, float]:
    """max/mean abs, rel-L2, cosine, SNR (dB), max relative error above a magnitude floor, NaN/Inf;
    with ``atol``/``rtol``, also how many elements are outside both (``outside_tol``).

    Args:
        ref: the reference output.
        got: the candidate output, same shape.
        rel_floor: ``max_rel`` looks only at elements with ``|ref| >= rel_floor * max|ref|``; near
            zero a relative error means nothing.
        atol: an element passes within this absolute difference (Polygraphy's ``--atol``) ...
        rtol: ... or within this many times ``|ref|`` (``--rtol``); unset: that side admits nothing.
    """
    return _Sums(ref, got, rel_floor, atol=atol, rtol=rtol).metrics()


CHUNK = 1 << 15  # elements per block: each block's float64 temporaries (256 KB) are reused, never fresh pages


class _Sums:
    """The sums every metric and the error histogram come from, over the elements both sides hold as
    finite numbers, taken block by block in float64. Whole-array float64 temporaries cost a page fault
    per 4 KB on first touch: on this VM a 230,400-element map's metrics took 66-87 ms that way, of which
    the arithmetic is under 2 ms."""

    def __init__(
        self,
        ref: np.ndarray,
        got: np.ndarray,
        rel_floor: float,
        histogram: bool = False,
        atol: float | None = None,
        rtol: float | None = None,
    ) -> None:
        if ref.shape != got.shape:
            raise ValueError(f"shape {got.shape} differs from the reference's {ref.shape}")
        self.ref, self.got = np.asarray(ref).ravel(), np.asarray(got).ravel()
        self.elements, self.rel_floor = int(self.ref.size), rel_floor
        self.atol, self.rtol = atol, rtol
        self.nonfinite = self.ref_nonfinite = self.count = self.zeros = self.outside = 0
        self.rr = self.gg = self.rg = self.dd = self.abs_sum = 0.0
        self.abs_max, self.ref_max, self.ref_min = 0.0, -math.inf, math.inf
        self.hist = np.zeros(len(HIST_EDGES) - 1, np.int64) if histogram else None
        for block in self._blocks():
            self._add(*block)

    def _blocks(self) -> Any:
        for i in range(0, self.elements, CHUNK):
            r = self.ref[i : i + CHUNK].astype(np.float64)
            g = self.got[i : i + CHUNK].astype(np.float64)
            finite_r, finite_g = np.isfinite(r), np.isfinite(g)
            if not (finite_r.all() and finite_g.all()):
                both = finite_r & finite_g
                r, g = r[both], g[both]
            yield r, g, finite_r, finite_g

    def _add(self, r: np.ndarray, g: np.ndarray, finite_r: np.ndarray, finite_g: np.ndarray) -> None:
        self.ref_nonfinite += int(finite_r.size - np.count_nonzero(finite_r))
        if r.size < finite_r.size:  # the block held NaN/Inf
            self.nonfinite += int(np.count_nonzero(finite_r & ~finite_g))
        if not r.size:
            return
        d = r - g
        self.count += r.size
        self.rr, self.gg = self.rr + _dot(r, r), self.gg + _dot(g, g)
        self.rg, self.dd = self.rg + _dot(r, g), self.dd + _dot(d, d)
        np.abs(d, out=d)
        if self.atol is not None or self.rtol is not None:
            within = (d <= self.atol) if self.atol is not None else np.zeros(d.shape, bool)
            if self.rtol is not None:
                within |= d <= self.rtol * np.abs(r)
            self.outside += int(d.size - np.count_nonzero(within))
        self.abs_sum += float(d.sum())
        self.abs_max = max(self.abs_max, float(d.max()))
        self.ref_max, self.ref_min = max(self.ref_max, float(r.max())), min(self.ref_min, float(r.min()))
        if self.hist is not None:
            self.zeros += _bin_errors(d, self.hist)

    def metrics(self) -> dict[str, float]:
        out = {"nonfinite": self.nonfinite, "ref_nonfinite": self.ref_nonfinite, "elements": self.elements}
        if self.count and (self.atol is not None or self.rtol is not None):
            out["outside_tol"] = self.outside
        if self.count == 0:
            return {
                **out,
                "max_abs": 0.0,
                "mean_abs": 0.0,
                "rel_l2": 0.0,
                "cosine": 1.0,
                "snr_db": SNR_CAP_DB,
                "max_rel": 0.0,
                "ref_absmax": 0.0,
                "ref_range": 0.0,
            }
        ref_norm, got_norm, err_norm = math.sqrt(self.rr), math.sqrt(self.gg), math.sqrt(self.dd)
        ref_absmax = max(abs(self.ref_max), abs(self.ref_min))
        out.update(
            max_abs=self.abs_max,
            mean_abs=self.abs_sum / self.count,
            rel_l2=_ratio(err_norm, ref_norm),
            cosine=_cosine(self.rg, ref_norm, got_norm),
            snr_db=_snr_db(ref_norm, err_norm),
            max_rel=self._max_rel(self.rel_floor * ref_absmax),
            ref_absmax=ref_absmax,
            ref_range=self.ref_max - self.ref_min,
        )
        return out

    def _max_rel(self, floor: float) -> float:
        """The largest |ref - got| / |ref| where |ref| >= floor (a second pass: the floor needs max |ref|)."""
        floor, worst = max(floor, np.finfo(np.float64).tiny), 0.0
        for r, g, _, _ in self._blocks():
            ref_abs = np.abs(r)
            mask = ref_abs >= floor
            if mask.any():
                worst = max(worst, float(np.max(np.abs(r[mask] - g[mask]) / ref_abs[mask])))
        return worst


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """A dot product on this thread: BLAS's threaded ``np.dot`` competes with ONNX Runtime's spinning
    worker threads between inferences (measured 10-40x slower on a 2-core VM under load)."""
    return float(np.einsum("i,i->", a, b))


def _ratio(num: float, den: float) -> float:
    if den > 0:
        return num / den
    return 0.0 if num == 0 else math.inf


def _cosine(dot: float, ref_norm: float, got_norm: float) -> float:
    if ref_norm > 0 and got_norm > 0:
        return float(np.clip(dot / (ref_norm * got_norm), -1.0, 1.0))
    return 1.0 if ref_norm == got_norm else 0.0


def _snr_db(ref_norm: float, err_norm: float) -> float:
    if err_norm == 0:
        return SNR_CAP_DB
    if ref_norm == 0:
        return -SNR_CAP_DB
    return float(min(SNR_CAP_DB, 20.0 * math.log10(ref_norm / err_norm)))


def abs_error_histogram(ref: np.ndarray, got: np.ndarray) -> tuple[int, list[int]]:
    """(exact zeros, counts per HIST_EDGES bin) of |ref - got| over finite elements; for plots."""
    sums = _Sums(ref, got, 0.0, histogram=True)
    return sums.zeros, sums.hist.astype(int).tolist()


_EDGES = np.asarray(HIST_EDGES)


def _bin_errors(diff: np.ndarray, counts: np.ndarray) -> int:
    """Add the non-zero ``diff`` (clipped into the edges) to ``counts`` as ``np.histogram`` over
    :data:`HIST_EDGES` bins them, by arithmetic: the edges are uniform in log10 (a bin index is a
    floor, moved by one where rounding put it across an edge); returns the exact zeros."""
    positive = diff[diff > 0]
    clipped = np.clip(positive, HIST_EDGES[0], HIST_EDGES[-1] * 0.999)
    bins = len(counts)
    idx = np.floor((np.log10(clipped) - math.log10(HIST_EDGES[0])) * 4).astype(np.int64)
    np.clip(idx, 0, bins - 1, out=idx)
    idx -= clipped < _EDGES[idx]
    idx += (clipped >= _EDGES[idx + 1]) & (idx < bins - 1)
    counts += np.bincount(idx, minlength=bins)
    return int(diff.size - positive.size)


class ErrorAccumulator:
    """Worst case over samples of one (reference, output) pair, plus what the plots need."""

    _WORST_MAX = ("max_abs", "mean_abs", "rel_l2", "max_rel", "ref_absmax", "ref_range")

    def __init__(
        self, rel_floor: float, atol: float | None = None, rtol: float | None = None, histogram: bool = True
    ) -> None:
        self.rel_floor, self.atol, self.rtol, self.histogram = rel_floor, atol, rtol, histogram
        self.worst: dict[str, float] | None = None
        self.per_sample_rel_l2: list[float] = []
        self.zeros, self.hist = 0, [0] * (len(HIST_EDGES) - 1)
        self.worst_sample = 0

    def add(self, ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
        """Fold one sample in; return its metrics."""
        sums = _Sums(ref, got, self.rel_floor, histogram=self.histogram, atol=self.atol, rtol=self.rtol)
        m = sums.metrics()
        m.update(topk_agreement(ref, got))
        if sums.hist is not None:
            self.zeros += sums.zeros
            self.hist = [a + int(b) for a, b in zip(self.hist, sums.hist, strict=True)]
        if self.worst is None or m["rel_l2"] > max(self.per_sample_rel_l2):
            self.worst_sample = len(self.per_sample_rel_l2)
        self.per_sample_rel_l2.append(m["rel_l2"])
        self.worst = m if self.worst is None else _merge(self.worst, m)
        return m

    def result(self) -> dict[str, Any]:
        assert self.worst is not None, "no sample was added"
        out: dict[str, Any] = {
            "metrics": dict(self.worst),
            "per_sample_rel_l2": list(self.per_sample_rel_l2),
            "worst_sample": self.worst_sample,
        }
        if self.histogram:
            out["abs_error_histogram"] = {"edges": list(HIST_EDGES), "counts": self.hist, "zeros": self.zeros}
        return out


def _merge(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    out = {k: max(a[k], b[k]) for k in ErrorAccumulator._WORST_MAX}
    out.update(cosine=min(a["cosine"], b["cosine"]), snr_db=min(a["snr_db"], b["snr_db"]))
    for k in ("nonfinite", "ref_nonfinite", "elements", "outside_tol"):
        if k in a:
            out[k] = a[k] + b.get(k, 0)
    for k in ("top1", "topk"):
        if k in a:
            out[k] = min(a[k], b[k])
    if "k" in a:
        out["k"] = a["k"]
    return out


def topk_agreement(ref: np.ndarray, got: np.ndarray, k: int = 5) -> dict[str, float]:
    """For (rows, classes) float outputs: tie-aware top-1 and top-k agreement (reported, not checked)."""
    if ref.ndim != 2 or ref.shape[1] < 2 or not np.issubdtype(ref.dtype, np.floating):
        return {}
    if not (np.all(np.isfinite(ref)) and np.all(np.isfinite(got))):
        return {}
    from deploykit.metrics.dense import topk_sums

    k = min(k, ref.shape[1])
    s = topk_sums(ref, got, k, axis=-1)
    return {"top1": s["top1"] / s["rows"], "topk": s["topk"] / s["rows"], "k": k}


def violations(metrics: dict[str, float], tol: Tolerance, skip: tuple[str, ...] = ()) -> list[Reason]:
    """The checks a metric set fails, each a :class:`~deploykit.metrics.reasons.Verdict` reason naming its
    metric; empty when it passes.

    Args:
        metrics: from :func:`compare` (or the worst case over samples).
        tol: a resolved tolerance; fields that are None are not checked.
        skip: checks not to apply (e.g. max_abs on a probability map).
    """
    out = []
    if metrics["nonfinite"] > 0:
        out.append(Verdict.NONFINITE(count=int(metrics["nonfinite"]), metric="nonfinite"))
    for key in ("max_abs", "mean_abs", "rel_l2", "max_rel", "cosine", "snr_db"):
        limit = getattr(tol, key)
        if limit is None or key in skip:
            continue
        value = metrics[key]
        if key in _MINIMUMS:
            if not value >= limit:  # written so NaN fails
                out.append(Verdict.BELOW_LIMIT(metric=key, value=f"{value:.6g}", limit=f"{limit:g}"))
        elif not value <= limit:
            out.append(Verdict.ABOVE_LIMIT(metric=key, value=f"{value:.3g}", limit=f"{limit:.3g}"))
    outside = metrics.get("outside_tol", 0)
    if (tol.atol is not None or tol.rtol is not None) and outside:
        within = " or ".join(f"{k} {v:g}" for k, v in (("atol", tol.atol), ("rtol", tol.rtol)) if v is not None)
        elements = int(metrics["elements"])
        out.append(
            Verdict.OUTSIDE_TOLERANCE(outside=int(outside), elements=elements, within=within, metric="outside_tol")
        )
    return out


def vacuity(metrics: dict[str, float], vacuous_below: float) -> Reason | None:
    """Why comparing against this reference proves nothing (None when it is a real check)."""
    if metrics["ref_nonfinite"] > 0:
        return Verdict.REFERENCE_NONFINITE(count=int(metrics["ref_nonfinite"]))
    if metrics["ref_absmax"] == 0:
        return Verdict.REFERENCE_ZEROS()
    if metrics["ref_range"] == 0:
        return Verdict.REFERENCE_CONSTANT(value=metrics["ref_absmax"])
    if metrics["ref_absmax"] < vacuous_below:
        return Verdict.REFERENCE_TINY(absmax=metrics["ref_absmax"], below=vacuous_below)
    return None
