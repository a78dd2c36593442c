"""Settings of the quantize stage: one frozen dataclass per concern, every default a real value."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

Precision = Literal["fp32", "fp16", "int8", "fp8", "int4"]
Flavour = Literal["tensorrt", "onnxruntime"]
LayerPrecision = Literal["int4", "int8", "fp8", "fp16", "fp32"]


@dataclass(frozen=True)
class QuantTolerance:
    """Per-output bounds a quantized model must meet against the FP32 graph (worst sample).

    max_abs/mean_abs depend on an output's scale, so they are off (inf) unless set; rel_l2 and
    cosine are scale-free and catch what matters: a dropped Relu (cosine 0.57), a crushed Sigmoid.
    """

    rel_l2: float
    cosine: float
    max_abs: float = math.inf
    mean_abs: float = math.inf

    def __post_init__(self) -> None:
        if not 0 <= self.cosine <= 1:
            raise ValueError(f"cosine must be in [0, 1], got {self.cosine}")
        if self.rel_l2 < 0:
            raise ValueError(f"rel_l2 must be >= 0, got {self.rel_l2}")


@dataclass(frozen=True)
class QuantTolerances:
    """The tolerance for each precision; the parity of a quantized model is judged against these."""

    fp16: QuantTolerance = QuantTolerance(rel_l2=0.01, cosine=0.9999)
    int8: QuantTolerance = QuantTolerance(rel_l2=0.1, cosine=0.995)
    fp8: QuantTolerance = QuantTolerance(rel_l2=0.1, cosine=0.995)
    int4: QuantTolerance = QuantTolerance(rel_l2=0.2, cosine=0.98)


@dataclass(frozen=True)
class RepairConfig:
    """The mixed-precision search (``--auto-repair``): when the quantized model misses parity, raise
    the layer groups whose measured effect on parity's metrics is largest per latency they cost, the
    fewest that pass parity's check on its data, then lower what is not needed
    (``deploykit.quant.sensitivity``, ``deploykit.quant.search``)."""

    enabled: bool = False
    max_iterations: int = 32  # states the search evaluates after measuring (the base and confirmations included)
    max_nodes: int = 64  # layer groups the search may raise above the stage's precision
    nodes_per_step: int = 1  # groups the first step raises; each later step raises twice as many
    samples: int = 4  # judging samples each search evaluation runs on (a pass is confirmed on all of them)
    screen_samples: int = 1  # samples for the first-order ranking (each group quantized alone)
    candidates: int = 12  # top-ranked groups measured leave-one-out to choose FP8 or FP16 (tensorrt INT8)

    def __post_init__(self) -> None:
        for name in ("max_iterations", "max_nodes", "nodes_per_step", "samples", "screen_samples", "candidates"):
            if getattr(self, name) < 1:
                raise ValueError(f"repair.{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class QuantizeConfig:
    """What the quantize stage writes into the ONNX graph, and from which calibration statistics."""

    precision: Precision = "fp32"  # fp32 skips the stage
    target: Literal["auto", "tensorrt", "onnxruntime"] = "auto"  # auto: follows build.backend (fp8/int4: tensorrt)
    # auto: max, percentile and MSE ranges from the same passes; the one whose quantized model checks best
    method: Literal["auto", "max", "entropy", "percentile", "mse"] = "auto"
    percentile: float = 99.99  # of |x| (tensorrt) or of each tail (onnxruntime)
    num_bins: int = 2048  # histogram bins for entropy / percentile / mse
    bounded: Literal["max", "exclude"] = "max"  # Sigmoid/Softmax/Tanh outputs: max calibration, or unquantized
    high_precision: Literal["fp16", "fp32"] = "fp16"  # tensorrt: what the non-quantized rest runs in
    fp16_limit: float = 16384.0  # |x| above this (weights or calibration activations) keeps a node FP32
    fp16_overflow: Literal["keep_fp32", "refuse"] = "keep_fp32"
    per_channel: bool = True  # per-channel weight scales
    reduce_range: Literal["auto", "on", "off"] = "auto"  # onnxruntime: 7-bit weights; auto = on without VNNI
    already_quantized: Literal["refuse", "pass"] = "refuse"  # a model with Q/DQ or ConvInteger
    exclude_nodes: tuple[str, ...] = ()  # node names kept out of quantization
    exclude_op_types: tuple[str, ...] = ()
    exclude_patterns: tuple[str, ...] = ()  # regular expressions matched against node names
    keep_fp32_nodes: tuple[str, ...] = ()  # node names kept in FP32 even where the rest is FP16
    int4_block_size: int = 128
    check_samples: int = 16  # calibration samples held out of the ranges; the check (and auto) runs on them
    repair: RepairConfig = RepairConfig()
    # layer group (named after its first node) -> precision, applied to the quantized graph; the
    # search writes the one it chose into precision.json ready to paste here (then it is replayed)
    layer_precisions: dict[str, LayerPrecision] = field(default_factory=dict)
    tolerances: QuantTolerances = QuantTolerances()

    def __post_init__(self) -> None:
        if not 50.0 < self.percentile <= 100.0:
            raise ValueError(f"percentile must be in (50, 100], got {self.percentile}")
        if self.num_bins < 256:
            raise ValueError(f"num_bins must be >= 256 (entropy needs 128 quantized bins), got {self.num_bins}")
        if not 0 < self.fp16_limit <= 65504:
            raise ValueError(f"fp16_limit must be in (0, 65504], got {self.fp16_limit}")
        if self.check_samples < 1:
            raise ValueError(f"check_samples must be >= 1, got {self.check_samples}")
        for pattern in self.exclude_patterns:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"exclude_patterns: {pattern!r} is not a regular expression ({e})") from e

    @property
    def enabled(self) -> bool:
        return self.precision != "fp32"

    def tolerance(self) -> QuantTolerance:
        """The tolerance for this precision (fp32 has none: the stage does not run)."""
        return getattr(self.tolerances, self.precision)

    def flavour(self, backend: str) -> Flavour:
        """The target flavour: as configured, else the build backend's; FP8 and INT4 exist only as
        the tensorrt flavour (ONNX Runtime's CPU kernels have no FP8 or INT4 convolution)."""
        if self.target != "auto":
            return self.target
        if backend == "tensorrt" or self.precision in ("fp8", "int4"):
            return "tensorrt"
        return "onnxruntime"


__all__ = ["Flavour", "LayerPrecision", "Precision", "QuantTolerance", "QuantTolerances", "QuantizeConfig", "RepairConfig"]
