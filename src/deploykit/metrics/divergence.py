"""Per-layer divergence between two ONNX graphs of one model: where does the candidate break?

Both graphs run on the same inputs with their intermediate tensors exposed; tensors are aligned by
name (quantizers, FP16 conversion and deploykit's as-written emulation keep the FP32 graph's tensor
names), compared in float64 and accumulated over samples, streaming. The report names the first
tensors (in the reference's topological order) whose error exceeds a threshold, and the tensors
whose producing node *adds* the most error (its output's rel-L2 minus the worst rel-L2 among its
compared inputs), which is where a precision repair should look first.

Generic on purpose: the parity stage calls it on failure, the precision-repair loop calls it to
pick nodes to exclude. Example::

    report = diagnose("fp32.onnx", "int8.onnx", samples, threshold=0.05)
    for line in report.lines():
        print(line)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

    from deploykit.graph.run import OrtSession

Opener = Callable[..., "OrtSession"]  # (model, expose=(...)) -> session, e.g. a partial of session_from_onnx


@dataclass(frozen=True)
class TensorError:
    """One aligned tensor: its error against the reference, and the error its node added."""

    tensor: str
    node: str  # the producing node in the reference graph
    op_type: str
    candidate_node: str  # the node computing it in the candidate (through Q/DQ/Cast); what to exclude
    order: int  # position of that node in the reference graph
    rel_l2: float
    cosine: float
    max_abs: float
    growth: float  # rel_l2 minus the largest rel_l2 among the node's compared inputs
    nonfinite: int  # NaN/Inf values the candidate has and the reference does not


@dataclass(frozen=True)
class LayerReport:
    """The result of :func:`diagnose`; ``to_dict`` is what reports store."""

    threshold: float
    samples: int
    tensors: tuple[TensorError, ...]  # every compared tensor, in the reference's order
    first_exceeding: tuple[TensorError, ...]
    top_growth: tuple[TensorError, ...]
    reference_evaluator: str
    candidate_evaluator: str
    unmatched: int = 0  # reference tensors the candidate graph does not have (or of another shape)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def first(self) -> TensorError | None:
        return self.first_exceeding[0] if self.first_exceeding else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "threshold": self.threshold,
            "samples": self.samples,
            "compared": len(self.tensors),
            "unmatched": self.unmatched,
            "reference_evaluator": self.reference_evaluator,
            "candidate_evaluator": self.candidate_evaluator,
            "notes": list(self.notes),
            "first_exceeding": [_row(t) for t in self.first_exceeding],
            "top_growth": [_row(t) for t in self.top_growth],
        }

    def lines(self) -> list[str]:
        """Human-readable summary, a line per tensor worth looking at."""
        out = [
            f"per-layer diagnosis over {self.samples} sample(s), {len(self.tensors)} tensors compared "
            f"(threshold rel-L2 {self.threshold:g})"
        ]
        if self.first is None:
            out.append("no tensor exceeds the threshold")
        for t in self.first_exceeding:
            out.append(
                f"first over threshold: {t.tensor} (node {t.node}, {t.op_type}): rel-L2 {t.rel_l2:.4g}, "
                f"cosine {t.cosine:.5f}"
            )
        for t in self.top_growth:
            out.append(f"adds error: {t.node} ({t.op_type}) -> {t.tensor}: +{t.growth:.4g} rel-L2 (now {t.rel_l2:.4g})")
        return out


def _row(t: TensorError) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(t).items()}


def diagnose(
    reference: onnx.ModelProto | str | Path,
    candidate: onnx.ModelProto | str | Path,
    feeds: Iterable[dict[str, np.ndarray]],
    threshold: float = 0.05,
    *,
    top: int = 10,
    first: int = 3,
    reference_opener: Opener | None = None,
    candidate_opener: Opener | None = None,
    tensors: list[str] | None = None,
) -> LayerReport:
    """Compare the intermediate tensors of ``candidate`` with those of ``reference``.

    Args:
        reference: the FP32 graph (model or path).
        candidate: the graph under test (quantized, FP16, rewritten), sharing tensor names.
        feeds: input samples (dicts of input name -> array); read once, streaming.
        threshold: rel-L2 above which a tensor counts as broken.
        top: how many tensors to list by error growth.
        first: how many of the first broken tensors to list.
        reference_opener: runs the reference (default: :func:`~deploykit.graph.run.session_from_onnx`
            as written).
        candidate_opener: runs the candidate (default: as written; pass a ``session_from_onnx`` with
            the ``onnxruntime`` evaluator for what ONNX Runtime's kernels compute — exposing tensors
            can disable some fusions).
        tensors: restrict the comparison to these tensor names.
    """
    from deploykit.graph.run import session_from_onnx

    ref_model, cand_model = _model(reference), _model(candidate)
    names = _aligned(ref_model, cand_model, tensors)
    ref = (reference_opener or session_from_onnx)(ref_model, expose=tuple(names))
    cand = (candidate_opener or session_from_onnx)(cand_model, expose=tuple(names))
    acc: dict[str, _Acc] = {}
    samples = 0
    for sample in feeds:
        r, c = ref.run_all(sample), cand.run_all(sample)
        for name in names:
            if name in r and name in c and r[name].shape == c[name].shape:
                acc.setdefault(name, _Acc()).add(r[name], c[name])
        samples += 1
    rows = _rows(ref_model, acc, _compute_producers(cand_model))
    broken = [t for t in rows if not t.rel_l2 <= threshold]  # written so NaN counts as broken
    return LayerReport(
        threshold,
        samples,
        tuple(rows),
        tuple(broken[:first]),
        tuple(sorted(rows, key=lambda t: -_nan_last(t.growth))[:top]),
        ref.evaluator,
        cand.evaluator,
        unmatched=len(names) - len(acc),
    )


def _model(model: onnx.ModelProto | str | Path) -> onnx.ModelProto:
    from deploykit.graph.files import load_model

    return load_model(Path(model)) if isinstance(model, (str, Path)) else model


def _aligned(ref: onnx.ModelProto, cand: onnx.ModelProto, only: list[str] | None) -> list[str]:
    from deploykit.graph.proto import float_tensors

    inputs = {i.name for i in ref.graph.input}
    produced = {o for n in cand.graph.node for o in n.output}
    names = [t for t in float_tensors(ref) if t not in inputs and t in produced]
    return [t for t in names if t in set(only)] if only is not None else names


class _Acc:
    """Streaming sums for rel-L2, cosine and max |diff| over samples."""

    def __init__(self) -> None:
        self.diff2 = self.ref2 = self.cand2 = self.dot = self.max_abs = 0.0
        self.nonfinite = 0

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        r, c = ref.astype(np.float64).ravel(), cand.astype(np.float64).ravel()
        bad = ~np.isfinite(c) & np.isfinite(r)
        self.nonfinite += int(bad.sum())
        if bad.any():
            return  # the NaN/Inf count says it; sums over them would only say NaN
        d = r - c
        self.diff2 += float(d @ d)
        self.ref2 += float(r @ r)
        self.cand2 += float(c @ c)
        self.dot += float(r @ c)
        self.max_abs = max(self.max_abs, float(np.max(np.abs(d))) if d.size else 0.0)

    def metrics(self) -> tuple[float, float]:
        if self.nonfinite:
            return math.inf, 0.0
        rel = math.sqrt(self.diff2 / self.ref2) if self.ref2 > 0 else (0.0 if self.diff2 == 0 else math.inf)
        denom = math.sqrt(self.ref2 * self.cand2)
        cos = self.dot / denom if denom > 0 else (1.0 if self.ref2 == self.cand2 else 0.0)
        return rel, cos


def _compute_producers(model: onnx.ModelProto) -> dict[str, str]:
    """Tensor -> the node that computes it, looking through Q/DQ pairs and Casts a quantizer or an
    FP16 conversion put in front of the name (ORT renames a Conv's output to the Relu it fused)."""
    from deploykit.graph.proto import producers

    made_by = producers(model)
    out = {}
    for name, node in made_by.items():
        while node.op_type in ("QuantizeLinear", "DequantizeLinear", "Cast") and node.input[0] in made_by:
            node = made_by[node.input[0]]
        out[name] = node.name
    return out


def _upstream(ref: onnx.ModelProto, err: dict[str, float]) -> Callable[[str], float]:
    """The worst compared error among a tensor's nearest compared ancestors (0 at inputs/weights)."""
    from deploykit.graph.proto import producers

    made_by = producers(ref)
    memo: dict[str, float] = {}

    def worst(tensor: str) -> float:
        if tensor in err:
            return err[tensor]
        if tensor not in memo:
            memo[tensor] = 0.0  # cycles cannot occur in a valid graph; this also bounds recursion
            node = made_by.get(tensor)
            memo[tensor] = max((worst(i) for i in node.input if i), default=0.0) if node is not None else 0.0
        return memo[tensor]

    return worst


def _rows(ref: onnx.ModelProto, acc: dict[str, _Acc], computed_by: dict[str, str]) -> list[TensorError]:
    err = {name: a.metrics()[0] for name, a in acc.items()}
    worst = _upstream(ref, err)
    rows = []
    for order, node in enumerate(ref.graph.node):
        upstream = max((worst(i) for i in node.input if i), default=0.0)
        for out in node.output:
            if out not in acc:
                continue
            rel, cos = acc[out].metrics()
            if math.isfinite(rel):
                growth = rel - upstream
            else:  # the first non-finite tensor on a path is where the error comes from
                growth = math.inf if math.isfinite(upstream) else 0.0
            rows.append(
                TensorError(
                    out,
                    node.name,
                    node.op_type,
                    computed_by.get(out, node.name),
                    order,
                    rel,
                    cos,
                    acc[out].max_abs,
                    growth,
                    acc[out].nonfinite,
                )
            )
    return rows


def _nan_last(v: float) -> float:
    """Growth as a sort key: NaN counts as the smallest (listed last)."""
    return v if not math.isnan(v) else -math.inf


def compare_graphs(
    reference: onnx.ModelProto | str | Path,
    candidate: onnx.ModelProto | str | Path,
    feeds: dict[str, np.ndarray] | Iterable[dict[str, np.ndarray]],
    *,
    threshold: float = 0.05,
    top: int = 10,
    candidate_opener: Opener | None = None,
) -> LayerReport:
    """:func:`diagnose` on one sample (a feeds dict, e.g. parity's worst) or on several."""
    samples = [feeds] if isinstance(feeds, dict) else feeds
    return diagnose(reference, candidate, samples, threshold, top=top, candidate_opener=candidate_opener)
