"""The quantize stage's reasons as data: why a node stayed in higher precision (:class:`Kept`).

The reason types (:class:`Reason`, :class:`Code`) and the verdict explanations (``Verdict``) are
:mod:`deploykit.metrics.reasons`; the search's stops are :class:`deploykit.quant.search.Stop`.
"""

from __future__ import annotations

from deploykit.metrics.reasons import Code, Reason, as_reason, codes


class Kept(Code):
    """Why a node stayed in higher precision: out of quantization, in FP32 among FP16, or left
    unquantized by the quantizer's own placement rules."""

    # out of quantization (precision.json: excluded_from_quantization)
    BY_NAME = ("by_name", "excluded by name")  # quantize.exclude_nodes
    BY_OP_TYPE = ("by_op_type", "excluded op type {op}")  # quantize.exclude_op_types
    BY_PATTERN = ("by_pattern", "excluded by pattern {pattern!r}")  # quantize.exclude_patterns
    HIGH_PRECISION_OP = ("high_precision_op", "{op} kept in higher precision (quantize.high_precision_ops)")
    MASKING = ("masking", "reads or writes {tensor!r}, which holds ±inf (masking): kept exact")
    MIXED_RANGES = (
        "mixed_ranges",
        "joins {narrow!r} (range {narrow_span:.3g}) and {wide!r} (range {wide_span:.3g}), "
        "{ratio:.0f}x apart: one INT8 scale would flatten the narrower; kept in float",
    )
    OUTPUT_TAIL = ("output_tail", "after the last compute op, on the way to an output: kept in float")
    BOUNDED_READER = ("bounded_reader", "reads bounded output {tensor!r} (quantize.bounded: exclude)")
    KERNEL_MISCOMPUTES = (
        "kernel_miscomputes",
        "ONNX Runtime's integer kernel on this CPU computes it wrong "
        "({op}, {steps:.0f} output steps off the Q/DQ graph): kept in float",
    )
    # in FP32 where the rest is FP16 (precision.json: kept_fp32)
    FP32_BY_CONFIG = ("fp32_by_config", "kept FP32 by configuration")  # quantize.keep_fp32_nodes
    FP16_WEIGHT_OVERFLOW = (
        "fp16_weight_overflow",
        "weight {tensor!r} reaches {peak:.3g} (FP16 limit {limit:g})",
    )
    FP16_ACTIVATION_OVERFLOW = (
        "fp16_activation_overflow",
        "activation {tensor!r} reaches {peak:.3g} on the calibration data (FP16 limit {limit:g})",
    )
    FP16_NONFINITE = ("fp16_nonfinite", "produced NaN/Inf in FP16 (tensor {tensor!r})")
    # left by the quantizer (precision.json: left_unquantized_by_quantizer)
    PLACEMENT_RULES = ("placement_rules", "{op}{shape} left unquantized by {tool}'s placement rules")


__all__ = ["Code", "Kept", "Reason", "as_reason", "codes"]
