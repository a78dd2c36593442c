"""The precision-repair loop: quantize, check, exclude the node that adds most error, repeat.

The loop is generic over three callables so it can be tested with fakes: ``build`` quantizes with
a set of excluded nodes, ``evaluate`` checks a candidate against the FP32 graph, ``rank`` returns
the candidate's quantized nodes ordered by the error they add (from :func:`deploykit.diagnose.diagnose`).
It stops when the check passes, or when the iteration or node budget is spent. Every step is
recorded: the result is the reviewable "precision patch".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deploykit.config import RepairConfig
from deploykit.quant.check import Check

if TYPE_CHECKING:
    import onnx

    from deploykit.diagnose import TensorError


@dataclass
class RepairStep:
    step: int
    added: list[dict[str, Any]]  # nodes excluded before this step's quantization, and why
    excluded: int  # nodes excluded by the loop so far
    check: Check

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "added": self.added, "excluded_by_repair": self.excluded,
                "worst_rel_l2": self.check.worst(), "passed": self.check.passed, "metrics": self.check.metrics,
                "violations": self.check.violations}


@dataclass
class RepairResult:
    model: onnx.ModelProto
    check: Check
    excluded: dict[str, str]  # every excluded node (configured and added) -> why
    steps: list[RepairStep] = field(default_factory=list)
    stopped: str = ""

    @property
    def added(self) -> list[str]:
        return [a["node"] for s in self.steps for a in s.added]

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.check.passed, "stopped": self.stopped, "iterations": len(self.steps),
                "excluded_nodes": self.added, "steps": [s.to_dict() for s in self.steps]}


def repair_loop(build: Callable[[dict[str, str]], onnx.ModelProto], evaluate: Callable[[onnx.ModelProto], Check],
                rank: Callable[[onnx.ModelProto, dict[str, str]], list[TensorError]], cfg: RepairConfig,
                excluded: dict[str, str]) -> RepairResult:
    """Quantize with growing exclusions until ``evaluate`` passes or a budget runs out."""
    excluded = dict(excluded)
    model = build(excluded)
    result = evaluate(model)
    steps = [RepairStep(0, [], 0, result)]
    added = 0
    stopped = "passed" if result.passed else ""
    for step in range(1, cfg.max_iterations):
        if result.passed:
            break
        if added >= cfg.max_nodes:
            stopped = f"node budget spent ({cfg.max_nodes})"
            break
        picks = rank(model, excluded)[: min(cfg.nodes_per_step, cfg.max_nodes - added)]
        if not picks:
            stopped = "no quantized node adds error any more"
            break
        notes = []
        for t in picks:
            excluded[t.node] = f"repair step {step}: adds rel-L2 {t.growth:.3g} at {t.tensor!r}"
            notes.append({"node": t.node, "op_type": t.op_type, "tensor": t.tensor, "growth": t.growth,
                          "rel_l2": t.rel_l2})
        added += len(picks)
        model = build(excluded)
        result = evaluate(model)
        steps.append(RepairStep(step, notes, added, result))
        stopped = "passed" if result.passed else ""
    if not stopped:
        stopped = f"iteration budget spent ({cfg.max_iterations})"
    return RepairResult(model, result, excluded, steps, stopped)
