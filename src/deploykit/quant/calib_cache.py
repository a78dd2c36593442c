"""Calibration statistics an earlier artifact kept, reused when the same graph meets the same samples.

Calibration is the largest part of a default quantize (a YOLOv8n's 64 samples: 15 of 31 s), and
it depends only on the graph, the samples and a few settings: not on parity's limits, the
calibration method (every method's thresholds come from the same histograms) or the search. A
rerun that changes only those (a tighter tolerance, the search switched on) reads the per-tensor
min/max and histograms (:class:`deploykit.quant.histogram.AbsHistogram`) from the earlier artifact's
``calibration.npz`` instead of running the samples again. The file is found under a key of what it
depends on (:func:`key`) and read through the store, which checks its digest; it holds arrays only
(``allow_pickle=False``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.quant.histogram import HISTOGRAM_VALUES, AbsHistogram

if TYPE_CHECKING:
    import onnx

    from deploykit.quant.ranges import Calibration, RangeSettings

CACHE_SCHEMA = 1  # bumped when what calibration collects, or how, changes
Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class CalibrationCache:
    """What identifies the calibration samples (the stage: its data source's file digests and sample
    count, the inputs and dims that shape them), and where earlier statistics are looked up by key."""

    samples: Mapping[str, Any]
    lookup: Callable[[str], Arrays | None]


def key(
    cache: CalibrationCache,
    model: onnx.ModelProto,
    settings: RangeSettings,
    histograms: bool,
    hold_out: int,
    limit: int | None,
) -> str:
    """The key statistics are filed under: the graph calibrated (its bytes), the samples, the pass's
    settings, the ONNX Runtime that computed the activations, and this module's schema."""
    import onnxruntime

    from deploykit.quant.judge import graph_digest
    from deploykit.quant.ranges import HISTOGRAM_SAMPLES
    from deploykit.store.hashing import digest_value

    return digest_value(
        {
            "schema": CACHE_SCHEMA,
            "graph": graph_digest(model),
            "samples": dict(cache.samples),
            "limit": limit,
            "hold_out": hold_out,
            "histograms": histograms,
            "num_bins": settings.num_bins,
            "histogram_samples": HISTOGRAM_SAMPLES,
            "histogram_values": HISTOGRAM_VALUES,
            "onnxruntime": onnxruntime.__version__,
        }
    )


def pack(calibration: Calibration) -> Arrays:
    """The statistics as arrays (tensors that hold the same values share one histogram, as in the pass)."""
    stats = calibration.statistics
    assert stats is not None, "calibrate() always collects statistics"
    names = list(stats.stats)
    shared: dict[int, AbsHistogram] = {}  # id -> histogram, in the order names first meet them
    for name in names:
        shared.setdefault(id(stats.stats[name]), stats.stats[name])
    row = {k: r for r, k in enumerate(shared)}
    rows = list(shared.values())
    return {
        "names": np.array(names, dtype=str),
        "row": np.array([row[id(stats.stats[n])] for n in names], np.int64),
        "calibrated": np.array([n in stats.calibrated for n in names], bool),
        "infinite": np.array([n in calibration.infinite for n in names], bool),
        "counts": np.stack([h.counts for h in rows]) if rows else np.zeros((0, 0), np.int64),
        "edge": np.array([h.edge for h in rows], np.float64),
        "lo": np.array([h.lo for h in rows], np.float64),
        "hi": np.array([h.hi for h in rows], np.float64),
        "peak_sum": np.array([h.peak_sum for h in rows], np.float64),
        "peaks": np.array([h.peaks for h in rows], np.int64),
        "seen": np.array([calibration.seen, len(calibration.held_out)], np.int64),
    }


def unpack(arrays: Arrays, settings: RangeSettings, first: Callable[[int], list[dict[str, np.ndarray]]]) -> Calibration:
    """The :class:`~deploykit.quant.ranges.Calibration` :func:`pack` stored; ``first(n)``: the stream's
    first ``n`` samples (the ones the pass held out for the check). Raises KeyError, ValueError,
    IndexError or TypeError on arrays of another layout."""
    from deploykit.quant.ranges import Calibration, Statistics

    names = [str(n) for n in arrays["names"]]
    counts, rows = arrays["counts"], arrays["row"]
    if not (len(rows) == len(names) == len(arrays["calibrated"]) == len(arrays["infinite"])):
        raise ValueError("calibration statistics: per-tensor arrays of different lengths")
    hists = []
    for r in range(len(counts)):
        h = AbsHistogram(int(counts.shape[1]))
        h.counts = counts[r].astype(np.int64)
        h.edge, h.lo, h.hi = float(arrays["edge"][r]), float(arrays["lo"][r]), float(arrays["hi"][r])
        h.peak_sum, h.peaks = float(arrays["peak_sum"][r]), int(arrays["peaks"][r])
        hists.append(h)
    stats = {n: hists[int(r)] for n, r in zip(names, rows, strict=True)}
    calibrated = {n for n, c in zip(names, arrays["calibrated"], strict=True) if c}
    infinite = frozenset(n for n, i in zip(names, arrays["infinite"], strict=True) if i)
    seen, held = (int(v) for v in arrays["seen"])
    statistics = Statistics(stats, calibrated, settings)
    return Calibration({"max": statistics.ranges("max")}, first(held), seen, infinite, statistics)
