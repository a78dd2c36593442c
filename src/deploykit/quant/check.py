"""Check a quantized graph against its FP32 graph on a few samples, per output, worst case."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np


if TYPE_CHECKING:
    import onnx

    from deploykit.quant.evaluate import GraphSession


@dataclass
class Check:
    """Worst-case metrics per output over the samples, and what misses the tolerance."""

    metrics: dict[str, dict[str, float]]
    violations: list[str]
    evaluator: str
    samples: int
    nonfinite: list[str] = field(default_factory=list)  # outputs with NaN/Inf the reference lacks

    @property
    def passed(self) -> bool:
        return not self.violations

    def worst(self) -> float:
        """The largest rel-L2 over outputs (the repair loop's progress measure)."""
        return max((m["rel_l2"] for m in self.metrics.values()), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "metrics": self.metrics, "violations": self.violations,
                "evaluator": self.evaluator, "samples": self.samples}


class Reference:
    """The FP32 graph's outputs on the check samples, computed once and reused for every candidate."""

    def __init__(self, model: onnx.ModelProto, samples: list[dict[str, np.ndarray]]) -> None:
        from deploykit.quant.evaluate import open_as_written

        session = open_as_written(model)
        self.samples = samples
        self.outputs = [session.infer(s) for s in samples]
        self.evaluator = session.evaluator


def check(reference: Reference, candidate: onnx.ModelProto, opener: Callable[..., GraphSession],
          tolerance: Callable[[str], Any]) -> Check:
    """Run ``candidate`` (through ``opener``) on the reference's samples and compare every output.

    Args:
        reference: the FP32 outputs on the check samples.
        candidate: the quantized graph.
        opener: the evaluator (as written, or as ONNX Runtime computes).
        tolerance: output name -> the parity tolerance (``deploykit.config.Tolerance``), so this
            check and the parity stage judge by the same numbers.
    """
    from deploykit.metrics import compare, violations

    session = opener(candidate)
    worst: dict[str, dict[str, float]] = {}
    for sample, expected in zip(reference.samples, reference.outputs, strict=True):
        got = session.infer(sample)
        for name, ref in expected.items():
            worst[name] = _worst(worst.get(name), compare(ref, got[name]))
    bad = [f"{name}: {v}" for name, m in sorted(worst.items()) for v in violations(m, tolerance(name))]
    nonfinite = [name for name, m in worst.items() if m["nonfinite"] > 0]
    return Check(worst, bad, session.evaluator, len(reference.samples), nonfinite)


_LARGER_IS_WORSE = ("max_abs", "mean_abs", "rel_l2", "max_rel", "nonfinite", "ref_nonfinite")


def _worst(a: dict[str, float] | None, b: dict[str, float]) -> dict[str, float]:
    if a is None:
        return {k: v for k, v in b.items() if k in (*_LARGER_IS_WORSE, "cosine", "snr_db", "ref_absmax", "ref_range")}
    out = {k: max(a[k], b[k]) for k in _LARGER_IS_WORSE}
    out.update(cosine=min(a["cosine"], b["cosine"]), snr_db=min(a["snr_db"], b["snr_db"]),
               ref_absmax=max(a["ref_absmax"], b["ref_absmax"]), ref_range=max(a["ref_range"], b["ref_range"]))
    return out
