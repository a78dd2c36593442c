"""Elementwise parity metrics between a reference output and a candidate output."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from deploykit.config import Tolerance


def compare(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """max/mean abs error, relative L2 error and cosine similarity (computed in float64)."""
    if ref.shape != got.shape:
        raise ValueError(f"shape {got.shape} differs from the reference's {ref.shape}")
    r, g = ref.astype(np.float64).ravel(), got.astype(np.float64).ravel()
    nonfinite = int(np.count_nonzero(~np.isfinite(g)) - np.count_nonzero(~np.isfinite(r)))
    if r.size == 0:
        return {"max_abs": 0.0, "mean_abs": 0.0, "rel_l2": 0.0, "cosine": 1.0, "nonfinite": 0}
    diff = np.abs(r - g)
    ref_norm, got_norm = float(np.linalg.norm(r)), float(np.linalg.norm(g))
    rel_l2 = float(np.linalg.norm(r - g)) / ref_norm if ref_norm > 0 else (0.0 if got_norm == 0 else math.inf)
    if ref_norm > 0 and got_norm > 0:
        cosine = float(np.dot(r, g) / (ref_norm * got_norm))
    else:
        cosine = 1.0 if ref_norm == got_norm else 0.0
    return {"max_abs": float(np.max(diff)), "mean_abs": float(np.mean(diff)), "rel_l2": rel_l2,
            "cosine": cosine, "nonfinite": max(nonfinite, 0)}


def merge(a: dict[str, float] | None, b: dict[str, float]) -> dict[str, float]:
    """Worst case over samples (mean_abs is averaged by the caller's weighting: take the max too)."""
    if a is None:
        return dict(b)
    worst = {k: max(a[k], b[k]) for k in ("max_abs", "mean_abs", "rel_l2", "nonfinite")}
    worst["cosine"] = min(a["cosine"], b["cosine"])
    return worst


def violations(metrics: dict[str, float], tol: Tolerance) -> list[str]:
    """The checks a metric set fails, as readable strings; empty when it passes."""
    out = []
    if metrics["nonfinite"] > 0:
        out.append(f"{int(metrics['nonfinite'])} NaN/Inf values the reference does not have")
    for key in ("max_abs", "mean_abs", "rel_l2"):
        if not metrics[key] <= getattr(tol, key):  # written so NaN fails
            out.append(f"{key} {metrics[key]:.3g} > {getattr(tol, key):.3g}")
    if not metrics["cosine"] >= tol.cosine:
        out.append(f"cosine {metrics['cosine']:.6f} < {tol.cosine}")
    return out


def summarize(values_ms: list[float]) -> dict[str, Any]:
    """Latency statistics in milliseconds."""
    arr = np.asarray(values_ms, dtype=np.float64)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {"p50_ms": float(p50), "p90_ms": float(p90), "p99_ms": float(p99), "mean_ms": float(arr.mean()),
            "min_ms": float(arr.min()), "max_ms": float(arr.max()), "std_ms": float(arr.std()), "n": int(arr.size)}
