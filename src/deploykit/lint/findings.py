"""What the lint found: one :class:`Finding` per node and rule, the TensorRT versions it applies to and
what to do about it; a :class:`LintReport` holds them with each version's verdict.

Every rule has a code (``op.unsupported``, ``qdq.zero_point`` ...) defined once in :data:`RULES`;
renderers print the sentences, code and tests read the codes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]  # an error: the parser or the builder would refuse the graph

RULES: dict[str, str] = {
    "opset.range": "the model's opset against the range the parser documents",
    "op.unsupported": "an operator the support matrix marks unsupported, or does not list",
    "op.attribute": "a static restriction of the support matrix (attributes, constant inputs, ranks)",
    "op.type": "an input type the support matrix does not list for the operator",
    "type.double": "DOUBLE tensors: TensorRT casts them down to FLOAT",
    "type.uint8": "UINT8 away from the network's inputs and outputs",
    "type.int64": "INT64 constants beyond INT32 where TensorRT narrows them",
    "type.strong": "inputs of one layer in two types (Pow's exponent): a strongly typed network converts neither",
    "type.quantized": "an INT8/FP8/INT4/FP4 tensor outside a Q/DQ pair (they exist only through Q/DQ)",
    "qdq.zero_point": "a Q/DQ zero point that is not all zeros (TensorRT is symmetric only)",
    "qdq.type": "a quantized type TensorRT has no Q/DQ for (UINT8, INT16, ...)",
    "qdq.scale": "a Q/DQ scale that is not a constant of positive, finite values",
    "qdq.axis": "per-channel scales on an activation, on the wrong axis, or of the wrong size",
    "qdq.bias": "a DequantizeLinear of an INT32 tensor (ONNX Runtime's quantized bias)",
    "qdq.opset": "a quantized type or scale type the model's opset cannot express",
    "qdq.placement": "Q/DQ placement TensorRT cannot fuse (an unpaired Q, a DQ into an unquantizable op)",
    "shape.profile": "dynamic input dims against the optimization profiles",
    "shape.tensor": "a network input TensorRT would treat as a shape tensor (it needs profile values)",
    "plugin.missing": "a plugin node no given library, built-in plugin or ONNX function provides",
    "plugin.function": "a custom node the parser would import by inlining its ONNX function body",
    "plugin.headers": "a plugin library compiled against another TensorRT major's headers",
    "plugin.library": "a plugin library that cannot be read as a TensorRT plugin library",
    "plugin.removed": "a TensorRT built-in plugin that TensorRT 11 no longer ships",
    "plugin.deprecated": "a deprecated TensorRT built-in plugin version",
    "plugin.domain": "a custom-domain node the parser imports as the ONNX operator of that name",
}


@dataclass(frozen=True)
class Issue:
    """One rule's finding for one table, before versions are attached."""

    rule: str
    severity: Severity
    node: str  # node name (or "#index Op"), a tensor or input name; "" for the whole model
    op: str
    message: str
    fix: str


@dataclass(frozen=True)
class Finding:
    """An issue with the TensorRT versions it applies to."""

    rule: str
    severity: Severity
    node: str
    op: str
    message: str
    fix: str
    versions: tuple[str, ...] = ()

    def line(self) -> str:
        """``error op.unsupported 'q' (ConvInteger) [TensorRT 10.13, 11]: ...; fix: ...``"""
        where = f"{self.node!r} ({self.op})" if self.node and self.op else repr(self.node) if self.node else "model"
        return f"{self.severity} {self.rule} {where} [TensorRT {', '.join(self.versions)}]: {self.message}" + (
            f"; fix: {self.fix}" if self.fix else ""
        )


@dataclass(frozen=True)
class Verdict:
    """One TensorRT version's count: ``TensorRT 10.13: 0 errors, 2 warnings``."""

    version: str
    errors: int
    warnings: int

    @property
    def passed(self) -> bool:
        return self.errors == 0

    def line(self) -> str:
        def count(n: int, word: str) -> str:
            return f"{n} {word}{'' if n == 1 else 's'}"

        return f"TensorRT {self.version}: {count(self.errors, 'error')}, {count(self.warnings, 'warning')}"


@dataclass(frozen=True)
class LintReport:
    """Everything one lint found, for every version it checked."""

    model: str
    versions: tuple[str, ...]
    findings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()  # what a reader must know (how plugins were read, what was not checked)
    tables: dict[str, Any] = field(default_factory=dict)  # version -> its table's source
    plugins: tuple[str, ...] = ()  # the libraries considered; empty with ``plugins_known`` False: none given
    plugins_known: bool = True

    def verdicts(self) -> list[Verdict]:
        return [Verdict(v, *self.counts(v)) for v in self.versions]

    def counts(self, version: str) -> tuple[int, int]:
        mine = [f for f in self.findings if version in f.versions]
        return sum(f.severity == "error" for f in mine), sum(f.severity == "warning" for f in mine)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def passed(self) -> bool:
        return not self.errors

    @property
    def exit_code(self) -> int:
        """``deploykit lint``'s: 4 (invalid model) when any version would refuse the graph."""
        return 4 if self.errors else 0

    def summary(self) -> str:
        return "; ".join(v.line() for v in self.verdicts())

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.update(
            passed=self.passed,
            exit_code=self.exit_code,
            verdicts=[dataclasses.asdict(v) | {"line": v.line()} for v in self.verdicts()],
        )
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LintReport:
        return cls(
            model=data.get("model", ""),
            versions=tuple(data.get("versions", ())),
            findings=tuple(
                Finding(**{**f, "versions": tuple(f.get("versions", ()))}) for f in data.get("findings", ())
            ),
            notes=tuple(data.get("notes", ())),
            tables=dict(data.get("tables", {})),
            plugins=tuple(data.get("plugins", ())),
            plugins_known=bool(data.get("plugins_known", True)),
        )


def merged(per_version: Mapping[str, Iterable[Issue]]) -> tuple[Finding, ...]:
    """Issues found for several versions as one finding each, listing those versions, in first-seen order."""
    seen: dict[Issue, list[str]] = {}
    for version, issues in per_version.items():
        for issue in issues:
            versions = seen.setdefault(issue, [])
            if version not in versions:
                versions.append(version)
    order = {"error": 0, "warning": 1}
    out = [Finding(**dataclasses.asdict(i), versions=tuple(v)) for i, v in seen.items()]
    return tuple(sorted(out, key=lambda f: order[f.severity]))  # stable: graph order within a severity
