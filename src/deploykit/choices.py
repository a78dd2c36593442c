"""Every enumerated value deploykit accepts, defined once.

Config fields are typed with these ``Literal`` types (so loading a config validates them and names
the valid values), the CLI's help and choices come from :func:`listed`, and dispatch tables are
keyed by :func:`values`. Stage names are not here: each stage declares its own (``Stage.name``).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

Precision = Literal["fp32", "fp16", "int8", "fp8", "int4"]
LayerPrecision = Literal["int4", "int8", "fp8", "fp16", "fp32"]  # one layer group's, in quantize.layer_precisions
TargetPrecision = Literal["any", Precision]  # the build a gate target is for
Flavour = Literal["tensorrt", "onnxruntime"]  # what a quantized graph is written for
QuantizeTarget = Literal["auto", Flavour]  # auto: follows build.backend (fp8/int4: tensorrt)
# The backends that can build the Q/DQ graph each flavour writes: the onnxruntime flavour's asymmetric
# UINT8 and INT32-bias Q/DQ is what TensorRT's parser refuses (checked when a config loads)
FLAVOUR_BACKENDS: dict[str, tuple[str, ...]] = {
    "onnxruntime": ("onnxruntime",),
    "tensorrt": ("onnxruntime", "tensorrt"),
}
CalibrationMethod = Literal["max", "entropy", "percentile", "mse", "mean_max"]
# auto: the best of several methods on held-out samples; per_tensor: max, or a clipping method where
# a tensor's own histogram gains from it (quant/ranges.py PER_TENSOR_GAIN)
Method = Literal["auto", CalibrationMethod, "per_tensor"]
Evaluator = Literal["as_written", "onnxruntime"]  # how a graph's numbers are computed on the CPU
Exporter = Literal["auto", "dynamo", "torchscript"]
OptimizationLevel = Literal["disabled", "basic", "extended", "all"]  # ONNX Runtime graph optimizations
Provider = Literal["cpu", "cuda", "tensorrt"]  # ONNX Runtime execution providers
BackendName = Literal["onnxruntime", "tensorrt"]  # build backends (deploykit.backends dispatches on them)
# The TensorRT versions `deploykit lint` has support tables for (deploykit/lint/tables/tensorrt-<v>.json)
TensorRTVersion = Literal["10.13", "11"]
LintRun = Literal["auto", "always", "never"]  # auto: when the graph is bound for TensorRT
InputDtype = Literal["float32", "float16", "int64", "int32", "int8", "uint8", "bool"]
InputKind = Literal["tensor", "image", "tokens", "mask", "padding_mask"]  # what generated/checked data respects
LogFormat = Literal["human", "json"]
CudaGraphMode = Literal["auto", "on", "off"]  # gate.cuda_graph: auto follows build.tensorrt.cuda_graphs
# How cross-layer equalization treats a HardSwish between two convolutions (quant/equalize.py)
EqualizeHardSwish = Literal["exact", "approximate", "skip"]


def values(kind: Any) -> tuple[str, ...]:
    """The values of one of the ``Literal`` types above, in their order."""
    return get_args(kind)


def listed(kind: Any, *, without: tuple[str, ...] = ()) -> str:
    """``a | b | c``: the values as help texts show them."""
    return " | ".join(v for v in values(kind) if v not in without)


def only(kind: Any, *, without: tuple[str, ...]) -> Any:
    """The ``Literal`` of ``kind``'s values less ``without`` (a CLI flag that accepts fewer)."""
    return Literal[tuple(v for v in values(kind) if v not in without)]  # type: ignore[valid-type]


def suggest(value: str, kind: Any) -> str:
    """`` (did you mean 'int8'?)`` for a near miss of one of ``kind``'s values (case ignored), else ''."""
    import difflib

    lower = {v.lower(): v for v in values(kind)}
    key = (
        value.lower()
        if value.lower() in lower
        else next(iter(difflib.get_close_matches(value.lower(), lower, n=1)), None)
    )
    return f" (did you mean {lower[key]!r}?)" if key else ""
