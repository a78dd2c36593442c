"""Settings of the quantize stage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class QuantizeConfig:
    precision: Literal["fp32", "fp16", "int8", "fp8", "int4"] = "fp32"  # fp32 skips the stage
    target: Literal["auto", "tensorrt", "onnxruntime"] = "auto"  # auto: follows build.backend
    method: Literal["max", "entropy", "percentile", "mse"] = "max"
    percentile: float = 99.99
    high_precision: Literal["fp16", "fp32"] = "fp16"  # what the non-quantized rest of the graph runs in
    exclude_nodes: tuple[str, ...] = ()
    exclude_op_types: tuple[str, ...] = ()
