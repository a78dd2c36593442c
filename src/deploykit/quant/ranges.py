"""Per-tensor calibration ranges, computed by deploykit while streaming the samples once.

One pass runs the FP32 graph (every float tensor exposed as an output) over the samples, two at a
time where there are two cores (:mod:`deploykit.graph.parallel`; folded in the samples' order), and
keeps, per tensor, the exact min/max and a histogram of |x| whose range grows as values arrive
(:class:`deploykit.quant.histogram.AbsHistogram`). Every method's threshold comes from that one
pass: max from min/max, entropy, percentile and MSE from the histogram
(:mod:`deploykit.quant.thresholds`). Memory is two samples' activations plus ``2 * num_bins``
counts per tensor, whatever the sample count; a method asked for later (:meth:`Statistics.ranges`)
needs no further pass.

Method ``auto`` derives several range sets from that pass; the quantize stage keeps whichever gives
the quantized model the smallest error on a few held-out samples.

Entropy is computed here because ``onnxruntime.quantization.quantize_static`` gives its entropy
calibrator 128 bins for 128 quantized levels, so its "entropy" range is the max range. Its KL search
never goes below the mean of each sample's max |x| (:data:`FLOORED`): ONNX Runtime's calibrator
(the one ModelOpt runs) searches only thresholds from its first batch's range up, and unfloored,
entropy cut GELU outputs to a sixth of their range (a real recognizer's top-1 0.936 against 0.980).
Bounded tensors (Sigmoid/Softmax/Tanh outputs) always get max calibration: entropy capped a
Sigmoid probability map at 0.063 on a real detector.

±inf is legitimate where a model masks: ``masked_fill(mask, -inf)`` before a Softmax is the
standard way to keep padded tokens out of attention. Such tensors are ranged on their finite values
and listed in ``Calibration.infinite``; the quantize stage keeps them out of Q/DQ (a quantized -inf
becomes a finite value and the masked token gets weight). NaN is still an error.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.choices import CalibrationMethod
from deploykit.errors import ModelError
from deploykit.graph.parallel import in_order, runs_within_memory, threads_per_run
from deploykit.quant import thresholds
from deploykit.quant.histogram import AbsHistogram, abs_values

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


# What method "auto" tries. Entropy (floored, see FLOORED): ranked first by mean rel-L2, and better on
# the task than what it displaced, on two real models (recognizer tensorrt top-1 0.969 -> 0.980, ViT-S
# onnxruntime saliency IoU 0.881 -> 0.899, on a further held-out set too); the same choice on six
# more rows. Not per_tensor: it never won on the real models (text detector: mean rel-L2 0.18
# against MSE's 0.12; recognizer 0.39 against 0.37) and each candidate costs its check inferences.
# Not mean_max: better on the task metric on two real models (ViT-S saliency IoU 0.79 vs 0.74,
# YOLOv8n recall 0.98 vs 0.97), far worse on a third (text detector 0.91 vs 0.97), and mean rel-L2
# never ranked it first, so auto would only pay for it.
AUTO_METHODS: tuple[CalibrationMethod, ...] = ("max", "percentile", "mse", "entropy")
# Searches whose threshold never goes below the mean over samples of each one's max |x| (mean_max).
FLOORED: tuple[CalibrationMethod, ...] = ("entropy",)
# Methods whose threshold needs no histogram (per-sample min/max are kept whatever the method).
NO_HISTOGRAM: tuple[CalibrationMethod, ...] = ("max", "mean_max")
# per_tensor clips a tensor only where its own quantization error drops at least this many times
PER_TENSOR_GAIN = 2.0


class Statistics:
    """What the one calibration pass collected: per tensor min/max and a histogram of |x|.

    Range sets for any method are derived from it (:meth:`ranges`) without reading the samples again.
    """

    def __init__(self, stats: dict[str, AbsHistogram], calibrated: set[str], settings: RangeSettings) -> None:
        self.stats, self.calibrated, self.settings = stats, calibrated, settings
        self._thresholds: dict[tuple[int, str], float] = {}  # by histogram: aliases share one

    def threshold(self, name: str, method: str) -> float:
        """The |x| threshold ``method`` gives tensor ``name`` (max for bounded or all-zero tensors)."""
        st = self.stats[name]
        if method == "max" or name not in self.calibrated or st.absmax <= 0:
            return st.absmax
        if method == "mean_max":
            return min(st.mean_peak, st.absmax)
        key = (id(st), method)
        if key not in self._thresholds:
            hist, top = st.trimmed()
            found = _threshold(hist, top, dataclasses.replace(self.settings, method=method))
            if method in FLOORED:
                found = max(found, st.mean_peak)
            self._thresholds[key] = min(found, st.absmax)
        return self._thresholds[key]

    def per_tensor(
        self,
        candidates: tuple[str, ...] = ("percentile", "mse"),
        gain: float = PER_TENSOR_GAIN,
        only: set[str] | None = None,
    ) -> dict[str, str]:
        """A method per tensor, chosen from its histogram: the candidate with the smallest
        quantization error of the tensor itself, where that error is at least ``gain`` times
        smaller than max calibration's; max elsewhere.

        Clipping trades a tensor's own rounding error for errors downstream that its histogram
        cannot see (a clipped peak is a lost detection), so it is taken only where it pays clearly.
        """
        grid = self.settings.grid
        out = {}
        for name in sorted(self.calibrated if only is None else self.calibrated & only):
            st = self.stats[name]
            if st.absmax <= 0:
                continue
            hist, top = st.trimmed()
            errors = {
                m: thresholds.quantization_error(hist, top, self.threshold(name, m), grid) for m in ("max", *candidates)
            }
            best = min(candidates, key=lambda m: errors[m])
            out[name] = best if errors[best] * gain <= errors["max"] else "max"
        return out

    def ranges(self, method: str | dict[str, str], only: set[str] | None = None) -> dict[str, TensorRange]:
        """A range set: one method for every tensor (or those in ``only``), or a method per tensor;
        the other tensors get max ranges."""
        out = {}
        for name, st in self.stats.items():
            m = method if isinstance(method, str) else method.get(name, "max")
            used = m if name in self.calibrated and st.absmax > 0 and (only is None or name in only) else "max"
            out[name] = TensorRange(_finite_or_zero(st.lo), _finite_or_zero(st.hi), self.threshold(name, used), used)
        return out


@dataclass
class Calibration:
    """Range sets by method, the samples held out of them for checking, and the statistics."""

    sets: dict[str, dict[str, TensorRange]]
    held_out: list[dict[str, np.ndarray]]  # the first samples of the stream; ranges never saw them
    seen: int  # samples the stream produced
    infinite: frozenset[str] = frozenset()  # tensors that held ±inf (ranged on their finite values)
    statistics: Statistics | None = None


def collect_ranges(
    model: onnx.ModelProto,
    samples: Iterable[dict[str, np.ndarray]],
    settings: RangeSettings,
    *,
    tensors: list[str] | None = None,
    bounded: set[str] | frozenset[str] = frozenset(),
    progress: Any = None,
) -> dict[str, TensorRange]:
    """Calibrate every float tensor of ``model`` (or ``tensors``) on ``samples``, streaming once.

    Args:
        model: the FP32 graph (shapes inferred, nodes named).
        samples: a re-iterable of feeds; read once.
        settings: method (not ``auto``), percentile, histogram bins and the grid MSE uses.
        tensors: tensor names to calibrate (default: every float activation).
        bounded: tensors that always get max calibration.
        progress: called with 1 per sample read (a Reporter task's ``advance``).
    """
    result = calibrate(
        model, samples, settings, (settings.method,), tensors=tensors, bounded=bounded, progress=progress
    )
    return result.sets[settings.method]


def calibrate(
    model: onnx.ModelProto,
    samples: Iterable[dict[str, np.ndarray]],
    settings: RangeSettings,
    methods: tuple[str, ...],
    *,
    hold_out: int = 0,
    tensors: list[str] | None = None,
    bounded: set[str] | frozenset[str] = frozenset(),
    progress: Any = None,
    expected: int | None = None,
) -> Calibration:
    """Ranges for several methods from one pass over ``samples`` (min/max and histograms together);
    the pseudo-method ``histogram`` fills the histograms without deriving a set (derive one later
    with ``statistics.ranges``).

    The first ``hold_out`` samples stay out of the statistics (at most a quarter of the stream:
    a short stream gives some back), so a check on them measures what unseen inputs get; judged
    on its own calibration samples, max calibration never clips and always looks best. Histograms
    are filled only when a method other than max is asked for, from every k-th sample so that
    about :data:`HISTOGRAM_SAMPLES` of the ``expected`` ones feed them (min/max: every sample).
    """
    from deploykit.graph.proto import float_tensors

    names = tensors if tensors is not None else float_tensors(model)
    alias = same_values(model, names)
    roots = [n for n in names if n not in alias]
    tap = _Tap(model, roots)
    wanted = (
        {alias.get(n, n) for n in names if n not in bounded} if any(m not in NO_HISTOGRAM for m in methods) else set()
    )
    methods = tuple(m for m in methods if m != "histogram")  # "histogram": statistics only, no set
    stats = {n: AbsHistogram(2 * settings.num_bins) for n in roots}
    every = max(1, -(-(expected - hold_out) // HISTOGRAM_SAMPLES)) if expected else 1
    infinite: set[str] = set()
    first: list[dict[str, np.ndarray]] = []
    seen = held = 0

    def work() -> Iterator[tuple[dict[str, np.ndarray] | None, set[str], bool]]:
        """(sample or None where held out, tensors to bin, whether it came from the stream), in the
        order the samples are folded in."""
        nonlocal seen, held
        for sample in samples:
            seen += 1
            if len(first) < hold_out:
                first.append(sample)
                yield None, set(), True
            else:
                yield sample, wanted if (seen - len(first) - 1) % every == 0 else set(), True
        held = min(hold_out, seen // 4)
        for sample in first[held:]:  # a short stream: these go back into the statistics
            yield sample, wanted, False

    def measure(item: tuple[dict[str, np.ndarray] | None, set[str], bool]) -> tuple[list[_Measured], bool]:
        sample, bins, streamed = item
        return ([] if sample is None else _measure(tap, sample, bins)), streamed

    for measured, streamed in in_order(measure, work(), tap.runs):
        for name, values, finite, inf in measured:
            if finite is not None:
                stats[name].add_measured(values, *finite)
            if inf:
                infinite.add(name)
        if progress and streamed:
            progress(1)
    stats.update({n: stats[root] for n, root in alias.items()})
    statistics = Statistics({n: stats[n] for n in names}, {n for n in names if n not in bounded}, settings)
    infinite_all = frozenset(n for n in names if alias.get(n, n) in infinite)
    return Calibration({m: statistics.ranges(m) for m in methods}, first[:held], seen, infinite_all, statistics)


# Samples whose values fill the histograms (at most 2^16 values per tensor each, see
# deploykit.quant.histogram); a longer stream contributes every k-th sample. Binning every sample
# once cost more than running the model on it (5 of 14 s on a recognizer), but the extremes a
# percentile rests on come from few samples: 16 of 48 moved the example detector's thresholds by up
# to 11 % and its INT8 boxes to rel-L2 0.104 (0.081 from all 48). 48 = the default 64 calibration
# samples less the 16 held out, so a default run bins every sample; measured on this loaded 2-core
# VM, interleaved, calibration then still took less than ORT's quantize_static minmax (text detector
# 30-31 s vs 35-43 s, 26-31 s from 16 samples; recognizer 7.6-9.0 s vs 8.9-13.5 s).
HISTOGRAM_SAMPLES = 48


# Ops whose output holds exactly the values of their data input, rearranged: same min, max and
# histogram, so calibration reads the input only (a real text detector has 147 Identity nodes).
SAME_VALUES = frozenset(
    {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "DepthToSpace", "SpaceToDepth"}
)


def same_values(model: onnx.ModelProto, names: list[str]) -> dict[str, str]:
    """Tensor -> the tensor whose values it holds (through chains of :data:`SAME_VALUES` ops)."""
    wanted = set(names)
    source = {
        n.output[0]: n.input[0]
        for n in model.graph.node
        if n.op_type in SAME_VALUES and n.input and n.output and n.output[0] in wanted and n.input[0] in wanted
    }
    out = {}
    for name in source:
        root = name
        while root in source:
            root = source[root]
        out[name] = root
    return out


# one tensor of one sample: (name, |x| to bin or None, (min, max) of its finite values or None where it
# has none, whether it held ±inf)
_Measured = tuple[str, np.ndarray | None, tuple[float, float] | None, bool]


def _measure(tap: _Tap, sample: dict[str, np.ndarray], wanted: set[str]) -> list[_Measured]:
    """What calibration keeps of one sample's tensors; independent of every other sample (see
    :mod:`deploykit.graph.parallel`: samples are measured side by side and folded in order)."""
    out = []
    for name, value in tap.run(sample).items():
        if not value.size or not np.issubdtype(value.dtype, np.floating):
            continue
        lo, hi = float(value.min()), float(value.max())
        inf = not (math.isfinite(lo) and math.isfinite(hi)) and _check_finite(value, name, tap)  # NaN: an error
        if inf:
            value = value[np.isfinite(value)]
            if not value.size:  # nothing finite: listed as infinite, no statistics
                out.append((name, None, None, True))
                continue
            lo, hi = float(value.min()), float(value.max())
        out.append((name, abs_values(value) if name in wanted else None, (lo, hi), inf))
    return out


def _finite_or_zero(v: float) -> float:
    return v if math.isfinite(v) else 0.0


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
        raise ModelError(
            f"the FP32 model computes NaN in tensor {name!r}"
            + (f" (node {node!r})" if node else "")
            + " on the calibration data",
            hint="fix the model or the data (a fully masked attention row gives NaN); "
            "a range cannot be calibrated from NaN",
        )
    return True


class _Tap:
    """The graph with the wanted tensors exposed, run as written (no graph optimizations), ``runs``
    samples at a time (:mod:`deploykit.graph.parallel`; one where their tensors would crowd memory)."""

    def __init__(self, model: onnx.ModelProto, names: list[str]) -> None:
        from deploykit.graph.proto import producers, static_shapes
        from deploykit.graph.run import session_from_onnx

        self._producers = {t: n.name for t, n in producers(model).items()}
        inputs = {i.name for i in model.graph.input}
        exposed = tuple(n for n in names if n not in inputs)
        shapes = static_shapes(model)  # a dynamic dim counts as 1
        self.runs = runs_within_memory(4 * sum(math.prod(shapes.get(n, (0,))) for n in exposed))  # float32 at most
        threads = threads_per_run(self.runs)
        self.session = session_from_onnx(model, "as_written", expose=exposed, spin=False, threads=threads)
        self.names = set(names)

    def run(self, sample: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = self.session.run_all(sample)
        out.update({k: v for k, v in sample.items() if k in self.names})  # graph inputs are tensors too
        return {k: v for k, v in out.items() if k in self.names}

    def producer(self, tensor: str) -> str:
        return self._producers.get(tensor, "")


def ranges_to_json(ranges: dict[str, TensorRange], settings: RangeSettings, extra: dict[str, Any]) -> dict[str, Any]:
    """The ranges file: schema, settings, and per tensor min/max/amax/method."""
    return {
        "schema": RANGES_SCHEMA,
        "settings": asdict(settings),
        **extra,
        "tensors": {k: asdict(v) for k, v in sorted(ranges.items())},
    }


def write_ranges(path: Path, ranges: dict[str, TensorRange], settings: RangeSettings, extra: dict[str, Any]) -> None:
    path.write_text(json.dumps(ranges_to_json(ranges, settings, extra), indent=1, sort_keys=True))


def read_ranges(path: Path) -> dict[str, TensorRange]:
    data = json.loads(path.read_text())
    return {k: TensorRange(**v) for k, v in data["tensors"].items()}
