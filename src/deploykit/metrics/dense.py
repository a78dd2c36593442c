"""Task metrics on dense outputs: top-k, segmentation, depth, trajectories, probability maps.

Each function takes one sample's reference and candidate arrays and returns *sums* (counts, error
totals) so that samples add up exactly; ``tasks.py`` turns the sums into the reported ratios.
Scores that tie in the reference (or the candidate) may legitimately come out in either order, so
a class counts as agreeing when it is among the tied best, never by position.
"""

from __future__ import annotations

import numpy as np

TIE_EPS = 1e-6  # relative to the row's largest |score|: scores this close are a tie


def _rows(a: np.ndarray, axis: int) -> np.ndarray:
    """Move the class axis last and flatten everything else: (rows, classes). Float32 stays float32
    (every comparison below is exact in it, and partitioning it is twice as fast); other types become
    float64."""
    a = np.asarray(a)
    moved = np.moveaxis(a if a.dtype in (np.float32, np.float64) else a.astype(np.float64), axis, -1)
    return moved.reshape(-1, moved.shape[-1])


def _top_set(s: np.ndarray, k: int) -> np.ndarray:
    """Per row, the classes scoring at least the k-th best score (ties included)."""
    strict, tied = _top_split(s, k)
    return strict | tied


def _top_split(s: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row: classes certainly in the top k (above the k-th score) and those tied with the k-th.
    The tie margin is in float64 (a float32 row's scores are exact there)."""
    hi, lo = s.max(axis=1), s.min(axis=1)
    kth = hi if k == 1 else np.partition(s, s.shape[1] - k, axis=1)[:, s.shape[1] - k]
    kth = kth.astype(np.float64)[:, None]
    eps = (TIE_EPS * np.maximum(np.maximum(np.abs(hi), np.abs(lo)), 1e-30)).astype(np.float64)[:, None]
    return s > kth + eps, s >= kth - eps  # the second holds the first too: see _overlap


def _overlap(r: tuple[np.ndarray, np.ndarray], g: tuple[np.ndarray, np.ndarray], k: int) -> np.ndarray:
    """Per row, the largest overlap of two top-k sets given as :func:`_top_split` pairs, over every way
    of breaking ties (0..k)."""
    (rs, r_at_least), (gs, g_at_least) = r, g
    rt, gt = r_at_least & ~rs, g_at_least & ~gs
    a, b = k - rs.sum(axis=1), k - gs.sum(axis=1)  # how many tied classes each side still takes
    p, q = np.minimum((rs & gt).sum(axis=1), b), np.minimum((rt & gs).sum(axis=1), a)
    both = np.minimum((rt & gt).sum(axis=1), np.minimum(a - q, b - p))
    return (rs & gs).sum(axis=1) + p + q + both


def top_overlap(r: np.ndarray, g: np.ndarray, k: int) -> np.ndarray:
    """Per row, the largest overlap of the two top-k sets over every way of breaking ties (0..k)."""
    return _overlap(_top_split(r, k), _top_split(g, k), k)


def topk_sums(ref: np.ndarray, got: np.ndarray, k: int, axis: int) -> dict[str, float]:
    """Top-1 agreements and top-k set overlap, tie-aware."""
    r, g = _rows(ref, axis), _rows(got, axis)
    r1, g1 = _top_split(r, 1), _top_split(g, 1)
    all_tied = r1[1].all(axis=1)  # every class ties: nothing to agree on
    rk, gk = (r1, g1) if k == 1 else (_top_split(r, k), _top_split(g, k))
    return {
        "rows": r.shape[0],
        "top1": int((_overlap(r1, g1, 1) > 0).sum()),
        "topk": float((_overlap(rk, gk, k) / k).sum()),
        "tied_rows": int(all_tied.sum()),
    }


def segmentation_sums(ref: np.ndarray, got: np.ndarray, axis: int) -> dict[str, np.ndarray | int]:
    """Pixel agreement of the argmax maps, and per-class intersection/union for mIoU."""
    r, g = _rows(ref, axis), _rows(got, axis)
    classes = r.shape[1]
    common = _top_set(r, 1) & _top_set(g, 1)
    agree = common.any(axis=1)
    shared = common.argmax(axis=1)  # a tie broken differently by the two sides is no error
    r_cls = np.where(agree, shared, r.argmax(axis=1))
    g_cls = np.where(agree, shared, g.argmax(axis=1))
    inter = np.bincount(r_cls[agree], minlength=classes)
    union = np.bincount(r_cls, minlength=classes) + np.bincount(g_cls, minlength=classes) - inter
    return {
        "pixels": int(r.shape[0]),
        "agree": int(agree.sum()),
        "inter": inter,
        "union": union,
        "ref_classes": np.bincount(r_cls, minlength=classes),
    }


def depth_sums(ref: np.ndarray, got: np.ndarray, min_depth: float) -> dict[str, float]:
    """Sums for AbsRel and delta < 1.25 over the pixels where the reference depth is valid."""
    r, g = np.asarray(ref, np.float64).ravel(), np.asarray(got, np.float64).ravel()
    valid = np.isfinite(r) & (r > min_depth)
    r, g = r[valid], g[valid]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(g > 0, np.maximum(g / r, r / g), np.inf)  # non-positive depth: never within 1.25
    return {
        "pixels": int(r.size),
        "abs_rel": float(np.sum(np.abs(g - r) / r)) if r.size else 0.0,
        "delta1": int(np.count_nonzero(ratio < 1.25)),
    }


def trajectory_sums(ref: np.ndarray, got: np.ndarray) -> dict[str, float]:
    """Sums for ADE (every step) and FDE (last step) of (..., T, D) trajectories."""
    dist = np.linalg.norm(np.asarray(got, np.float64) - np.asarray(ref, np.float64), axis=-1)  # (..., T)
    final = dist[..., -1]
    return {
        "steps": int(dist.size),
        "ade": float(dist.sum()),
        "agents": int(final.size),
        "fde": float(final.sum()),
        "ref_moving": int(np.count_nonzero(np.asarray(ref) != 0)),
    }


def best_mode_sums(
    ref: np.ndarray, got: np.ndarray, ref_scores: np.ndarray, got_scores: np.ndarray
) -> dict[str, float]:
    """Trajectory sums between each side's best-scored mode of (..., K, T, D), and top-1 mode agreement.

    Where the two sides' best modes can agree (ties included), both use the same mode, so a tie
    broken differently is no error.
    """
    r_s, g_s = _rows(ref_scores, -1), _rows(got_scores, -1)
    common = _top_set(r_s, 1) & _top_set(g_s, 1)
    agree = common.any(axis=1)
    shared = common.argmax(axis=1)
    r_best, g_best = np.where(agree, shared, r_s.argmax(axis=1)), np.where(agree, shared, g_s.argmax(axis=1))
    k, tail = ref.shape[-3], ref.shape[-2:]
    r_t, g_t = ref.reshape(-1, k, *tail), got.reshape(-1, k, *tail)
    rows = np.arange(r_t.shape[0])
    sums = trajectory_sums(r_t[rows, r_best], g_t[rows, g_best])
    return {**sums, "rows": int(r_t.shape[0]), "top1": int(agree.sum())}


def mask_sums(ref: np.ndarray, got: np.ndarray, threshold: float) -> dict[str, int]:
    """Intersection and union of the thresholded probability maps."""
    r, g = np.asarray(ref) >= threshold, np.asarray(got) >= threshold
    return {
        "inter": int(np.count_nonzero(r & g)),
        "union": int(np.count_nonzero(r | g)),
        "ref_on": int(np.count_nonzero(r)),
        "pixels": int(r.size),
        "flipped": int(np.count_nonzero(r ^ g)),
    }


def add_sums(a: dict | None, b: dict) -> dict:
    """Element-wise sum of two sum dicts (numbers or arrays)."""
    return dict(b) if a is None else {k: a[k] + b[k] for k in a}
