"""One profiled layer: what ran, in which precision, on which tensors, and how long each run took."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

# Element sizes by our dtype names; sub-byte types count as fractions.
ITEMSIZE = {
    "fp64": 8,
    "fp32": 4,
    "fp16": 2,
    "bf16": 2,
    "fp8": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int4": 0.5,
    "fp4": 0.5,
}
# ONNX Runtime's type names (profile JSON, numpy) -> ours.
_ALIASES = {
    "float": "fp32",
    "float32": "fp32",
    "double": "fp64",
    "float64": "fp64",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8e4m3fn": "fp8",
    "float8e5m2": "fp8",
    "float8e4m3fnuz": "fp8",
    "float8e5m2fnuz": "fp8",
    "int64_t": "int64",
    "int32_t": "int32",
    "int8_t": "int8",
    "uint8_t": "uint8",
}
# Precisions a layer can compute in, for the roofline's compute ceiling (most to least precise).
PRECISIONS = ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "fp4")


def dtype_name(text: str) -> str:
    """``"float"``, ``"float16"``, ``"Half"`` ... -> ``fp32``, ``fp16``; unknown names lowercased."""
    t = str(text).strip().lower()
    return _ALIASES.get(t, t)


@dataclass(frozen=True)
class Tensor:
    dtype: str  # our names (ITEMSIZE's keys)
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(max(d, 0) for d in self.shape) if self.shape else 1

    @property
    def nbytes(self) -> float:
        return self.elements * ITEMSIZE.get(self.dtype, 4)


@dataclass
class Layer:
    """A node (ONNX Runtime) or a fused layer (TensorRT) and its per-run times in milliseconds."""

    name: str
    op_type: str  # ONNX op type, or TensorRT's LayerType / ParameterType
    precision: str  # what it computes in (see compute_precision), "" when unknown
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)
    times_ms: list[float] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)  # what the cost model reads (kernel_shape, ...)
    weights_bytes: float = 0.0  # weights held inside the layer (TensorRT), not among its inputs
    extra: dict[str, Any] = field(default_factory=dict)  # backend facts for the report (provider, tactic, ...)

    @property
    def ms(self) -> float:
        """The median over runs: robust to the spikes of a shared machine."""
        return statistics.median(self.times_ms) if self.times_ms else 0.0


def compute_precision(op_type: str, inputs: list[Tensor]) -> str:
    """The precision a layer computes in, from its op and input dtypes.

    Integer-arithmetic ops (QLinearConv, ConvInteger, MatMulInteger, QGemm...) are int8; otherwise the
    first floating-point input decides (a Q/DQ-fed TensorRT layer reads int8/fp8 tensors).
    """
    if op_type.startswith("QLinear") or op_type.endswith("Integer") or op_type in ("QGemm", "QAttention"):
        return "int8"
    for tensor in inputs:
        if tensor.dtype in PRECISIONS or tensor.dtype == "uint8":
            return "int8" if tensor.dtype == "uint8" else tensor.dtype
    return inputs[0].dtype if inputs else ""
