"""Reasons as data: a code that programs and tests read, next to the sentence a person reads.

Every reason the quantize stage gives (why a node stayed in higher precision here; why the
mixed-precision search stopped, :class:`deploykit.quant.search.Stop`) is a member of a :class:`Code`
enumeration: its code and its sentence template side by side. Calling the member with the
template's fields gives a :class:`Reason`. Artifacts store ``{"code": ..., "sentence": ...}``
(:meth:`Reason.to_dict`); renderers print the sentence (``str(reason)``), code compares the code.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any


@dataclass(frozen=True)
class Reason:
    """A code and the sentence that says it; ``also``: the codes of qualifications the sentence adds."""

    code: str
    sentence: str
    also: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.sentence

    @property
    def codes(self) -> tuple[str, ...]:
        """The reason's code, then those of its qualifications."""
        return (self.code, *self.also)

    def qualified(self, other: Reason) -> Reason:
        """This reason with ``other`` appended ("; " between the sentences), its codes kept."""
        return Reason(self.code, f"{self.sentence}; {other.sentence}", (*self.also, *other.codes))

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "sentence": self.sentence,
            **({"also": list(self.also)} if self.also else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reason:
        return cls(str(data["code"]), str(data["sentence"]), tuple(data.get("also", ())))


class Code(Enum):
    """A reason's code and its sentence template (:meth:`str.format` fields); call it to get a Reason."""

    def __init__(self, code: str, template: str) -> None:
        self.code, self.template = code, template

    def __call__(self, **fields: Any) -> Reason:
        return Reason(self.code, self.template.format(**fields))


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


def codes(kind: type[Code]) -> tuple[str, ...]:
    """Every code of one enumeration, in its order (documentation and tests list them from here)."""
    return tuple(member.code for member in kind)


def as_reason(value: Reason | dict[str, Any] | str) -> Reason:
    """A reason as stored: a Reason, its dict, or (a record written before reasons had codes) its sentence."""
    if isinstance(value, Reason):
        return value
    if isinstance(value, dict):
        return Reason.from_dict(value)
    return Reason("", str(value))


__all__ = ["Code", "Kept", "Reason", "as_reason", "codes"]
