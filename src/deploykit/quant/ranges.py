"""Per-tensor calibration ranges, computed by deploykit while streaming the samples.

Pass 1 runs the FP32 graph (every float tensor exposed as an output) over the samples one at a
time and keeps min/max per tensor. For entropy, percentile and MSE a second pass fills a fixed
histogram of |x| over [0, max|x|] per tensor; the threshold comes from that histogram
(:mod:`deploykit.quant.thresholds`). Memory is one sample's activations plus ``num_bins`` counts
per tensor, whatever the sample count.

Method ``auto`` computes the max, percentile and MSE ranges from the same two passes; the quantize
stage keeps whichever gives the quantized model the smallest error on its check samples.

Entropy is computed here because ``onnxruntime.quantization.quantize_static`` gives its entropy
calibrator 128 bins for 128 quantized levels, so its "entropy" range is the max range.
Bounded tensors (Sigmoid/Softmax/Tanh outputs) always get max calibration: entropy capped a
Sigmoid probability map at 0.063 on a real detector.

±inf is legitimate where a model masks: ``masked_fill(mask, -inf)`` before a Softmax is the
standard way to keep padded tokens out of attention. Such tensors are ranged on their finite values
and listed in ``Calibration.infinite``; the quantize stage keeps them out of Q/DQ (a quantized -inf
becomes a finite value and the masked token gets weight). NaN is still an error.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.choices import CalibrationMethod
from deploykit.errors import ModelError
from deploykit.quant import thresholds

if TYPE_CHECKING:
    import onnx

RANGES_SCHEMA = 1


@dataclass(frozen=True)
class TensorRange:
    """Observed min/max, and the calibrated range the quantizers use.

    ``amax`` is the symmetric threshold (tensorrt: scale = amax / 127 or / 448); ``lo``/``hi`` the
    asymmetric range (onnxruntime: uint8 with a zero point), ``[max(min, -amax), min(max, amax)]``.
    """

    min: float
    max: float
    amax: float
    method: str  # the method that set amax ("max" for bounded tensors whatever was asked)

    @property
    def lo(self) -> float:
        return max(self.min, -self.amax)

    @property
    def hi(self) -> float:
        return min(self.max, self.amax)

    @property
    def absmax(self) -> float:
        return max(abs(self.min), abs(self.max))


@dataclass(frozen=True)
class RangeSettings:
    method: str = "max"  # max | entropy | percentile | mse | auto (see AUTO_METHODS)
    percentile: float = 99.99
    num_bins: int = 2048
    grid: str = "int8"  # the quantized grid MSE measures error on: int8 | fp8 | uint8


# What method "auto" tries (entropy: slower, rarely better).
AUTO_METHODS: tuple[CalibrationMethod, ...] = ("max", "percentile", "mse")


@dataclass
class Calibration:
    """Range sets by method, and the samples held out of them for checking the quantized model."""

    sets: dict[str, dict[str, TensorRange]]
    held_out: list[dict[str, np.ndarray]]  # the first samples of the stream; ranges never saw them
    seen: int  # samples the stream produced
    infinite: frozenset[str] = frozenset()  # tensors that held ±inf (ranged on their finite values)


def collect_ranges(model: onnx.ModelProto, samples: Iterable[dict[str, np.ndarray]], settings: RangeSettings,
                   *, tensors: list[str] | None = None, bounded: set[str] | frozenset[str] = frozenset(),
                   progress: Any = None) -> dict[str, TensorRange]:
    """Calibrate every float tensor of ``model`` (or ``tensors``) on ``samples``, streaming.

    Args:
        model: the FP32 graph (shapes inferred, nodes named).
        samples: a re-iterable of feeds; read once for ``max``, twice otherwise.
        settings: method (not ``auto``), percentile, histogram bins and the grid MSE uses.
        tensors: tensor names to calibrate (default: every float activation).
        bounded: tensors that always get max calibration.
        progress: called with 1 per sample read (a Reporter task's ``advance``).
    """
    result = calibrate(model, samples, settings, (settings.method,), tensors=tensors, bounded=bounded,
                       progress=progress)
    return result.sets[settings.method]


def calibrate(model: onnx.ModelProto, samples: Iterable[dict[str, np.ndarray]], settings: RangeSettings,
              methods: tuple[str, ...], *, hold_out: int = 0, tensors: list[str] | None = None,
              bounded: set[str] | frozenset[str] = frozenset(), progress: Any = None) -> Calibration:
    """Ranges for several methods from the same two passes (min/max, then histograms).

    The first ``hold_out`` samples stay out of the statistics (at most a quarter of the stream:
    a short stream gives some back), so a check on them measures what unseen inputs get; judged
    on its own calibration samples, max calibration never clips and always looks best.
    """
    from deploykit.quant.graph import float_tensors

    names = tensors if tensors is not None else float_tensors(model)
    tap = _Tap(model, names)
    lo, hi = {n: math.inf for n in names}, {n: -math.inf for n in names}
    infinite: set[str] = set()
    first: list[dict[str, np.ndarray]] = []
    seen = 0
    for sample in samples:
        seen += 1
        if len(first) < hold_out:
            first.append(sample)
        else:
            _update_min_max(tap, sample, lo, hi, infinite)
        if progress:
            progress(1)
    held = min(hold_out, seen // 4)
    for sample in first[held:]:  # a short stream: these go back into the statistics
        _update_min_max(tap, sample, lo, hi, infinite)
    absmax = {n: max(abs(lo[n]), abs(hi[n])) if math.isfinite(lo[n]) else 0.0 for n in names}
    calibrated = [n for n in names if n not in bounded and absmax[n] > 0]
    hists = _histograms(tap, itertools.islice(samples, held, None), calibrated, absmax, settings.num_bins,
                        progress) if any(m != "max" for m in methods) else {}
    sets = {m: _range_set(m, names, calibrated, lo, hi, absmax, hists, settings) for m in methods}
    return Calibration(sets, first[:held], seen, frozenset(infinite))


def _range_set(method: str, names: list[str], calibrated: list[str], lo: dict[str, float], hi: dict[str, float],
               absmax: dict[str, float], hists: dict[str, np.ndarray], settings: RangeSettings
               ) -> dict[str, TensorRange]:
    amax, used = dict(absmax), dict.fromkeys(names, "max")
    if method != "max":
        for name in calibrated:
            amax[name] = _threshold(hists[name], absmax[name], dataclasses.replace(settings, method=method))
            used[name] = method
    return {n: TensorRange(_finite_or_zero(lo[n]), _finite_or_zero(hi[n]), amax[n], used[n]) for n in names}


def _update_min_max(tap: _Tap, sample: dict[str, np.ndarray], lo: dict[str, float], hi: dict[str, float],
                    infinite: set[str]) -> None:
    for name, value in tap.run(sample).items():
        if _check_finite(value, name, tap):
            infinite.add(name)
            value = value[np.isfinite(value)]
        if value.size:
            lo[name] = min(lo[name], float(value.min()))
            hi[name] = max(hi[name], float(value.max()))


def _finite_or_zero(v: float) -> float:
    return v if math.isfinite(v) else 0.0


def _histograms(tap: _Tap, samples: Iterable[dict[str, np.ndarray]], names: list[str], absmax: dict[str, float],
                bins: int, progress: Any) -> dict[str, np.ndarray]:
    hists = {n: np.zeros(bins, np.int64) for n in names}
    wanted = set(names)
    for sample in samples:
        for name, value in tap.run(sample).items():
            if name in wanted:
                finite = value if not np.issubdtype(value.dtype, np.floating) else value[np.isfinite(value)]
                hists[name] += thresholds.abs_histogram(finite, absmax[name], bins)
        if progress:
            progress(1)
    return hists


# Entropy and MSE may clip at most this share of the values. Both degenerate on data far from zero:
# class logits all in [-8, -3] got an entropy threshold of 3.05 (every value clipped; the KL of a
# histogram piled into its last bin is ~0) and the example detector's scores went to rel-L2 14.
MAX_CLIPPED_PERCENT = 1.0


# The threshold search of each calibration method but max (deploykit.choices.CalibrationMethod).
SEARCHES: dict[str, Callable[[np.ndarray, float, RangeSettings], float]] = {
    "percentile": lambda hist, absmax, s: thresholds.percentile(hist, absmax, s.percentile),
    "entropy": lambda hist, absmax, s: thresholds.entropy(hist, absmax),
    "mse": lambda hist, absmax, s: thresholds.mse(hist, absmax, s.grid),
}
CLIPPING_CAPPED = ("entropy", "mse")  # searches held to MAX_CLIPPED_PERCENT


def _threshold(hist: np.ndarray, absmax: float, s: RangeSettings) -> float:
    found = SEARCHES[s.method](hist, absmax, s)
    if s.method not in CLIPPING_CAPPED:
        return found
    return max(found, thresholds.percentile(hist, absmax, 100.0 - MAX_CLIPPED_PERCENT))


def _check_finite(value: np.ndarray, name: str, tap: _Tap) -> bool:
    """True when ``value`` holds ±inf (masking); NaN is an error naming the tensor and its node."""
    if not np.issubdtype(value.dtype, np.floating) or np.all(np.isfinite(value)):
        return False
    if np.isnan(value).any():
        node = tap.producer(name)
        raise ModelError(f"the FP32 model computes NaN in tensor {name!r}"
                         + (f" (node {node!r})" if node else "") + " on the calibration data",
                         hint="fix the model or the data (a fully masked attention row gives NaN); "
                              "a range cannot be calibrated from NaN")
    return True


class _Tap:
    """The graph with the wanted tensors exposed, run as written (no graph optimizations)."""

    def __init__(self, model: onnx.ModelProto, names: list[str]) -> None:
        from deploykit.graph.proto import producers
        from deploykit.graph.run import session_from_onnx

        self._producers = {t: n.name for t, n in producers(model).items()}
        inputs = {i.name for i in model.graph.input}
        self.session = session_from_onnx(model, "as_written", expose=tuple(n for n in names if n not in inputs))
        self.names = set(names)

    def run(self, sample: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = self.session.run_all(sample)
        out.update({k: v for k, v in sample.items() if k in self.names})  # graph inputs are tensors too
        return {k: v for k, v in out.items() if k in self.names}

    def producer(self, tensor: str) -> str:
        return self._producers.get(tensor, "")


def ranges_to_json(ranges: dict[str, TensorRange], settings: RangeSettings, extra: dict[str, Any]) -> dict[str, Any]:
    """The ranges file: schema, settings, and per tensor min/max/amax/method."""
    return {"schema": RANGES_SCHEMA, "settings": asdict(settings), **extra,
            "tensors": {k: asdict(v) for k, v in sorted(ranges.items())}}


def write_ranges(path: Path, ranges: dict[str, TensorRange], settings: RangeSettings, extra: dict[str, Any]) -> None:
    path.write_text(json.dumps(ranges_to_json(ranges, settings, extra), indent=1, sort_keys=True))


def read_ranges(path: Path) -> dict[str, TensorRange]:
    data = json.loads(path.read_text())
    return {k: TensorRange(**v) for k, v in data["tensors"].items()}
