"""Check a quantized graph against its FP32 graph on a few samples, per output, worst case."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.metrics.reasons import Reason, Verdict

if TYPE_CHECKING:
    import onnx

    from deploykit.graph.run import OrtSession


@dataclass
class Check:
    """Worst-case metrics per output over the samples, and what misses the tolerance: ``violations`` and
    ``warnings`` are :class:`~deploykit.metrics.reasons.Verdict` reasons, each about (``subject``) an
    output or a task check."""

    metrics: dict[str, dict[str, float]]
    violations: list[Reason]
    evaluator: str
    samples: int
    nonfinite: list[str] = field(default_factory=list)  # outputs with NaN/Inf the reference lacks
    warnings: list[Reason] = field(default_factory=list)
    rel_l2_limits: dict[str, float] = field(default_factory=dict)  # per output, from the tolerance
    tasks: list[dict[str, Any]] = field(default_factory=list)  # parity's task checks (quant.judge)
    data: str = ""  # where the samples come from

    @property
    def passed(self) -> bool:
        return not self.violations

    def worst(self) -> float:
        """The largest rel-L2 over outputs and samples (the repair loop's progress measure)."""
        return max((m["rel_l2"] for m in self.metrics.values()), default=0.0)

    def typical(self) -> float:
        """The largest over outputs of the mean rel-L2 over samples; inf with NaN/Inf.

        Comparing calibrations by their worst sample picks whichever happens to suit the one odd
        sample among a few (max calibration won that way, then lost 2x on validation data); the mean
        over held-out samples tracks validation data.
        """
        if self.nonfinite:
            return float("inf")
        return max((m["mean_rel_l2"] for m in self.metrics.values()), default=0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "metrics": self.metrics,
            "violations": [v.to_dict() for v in self.violations],
            "evaluator": self.evaluator,
            "samples": self.samples,
            "warnings": [w.to_dict() for w in self.warnings],
            "rel_l2_limits": self.rel_l2_limits,
            "tasks": self.tasks,
            "data": self.data,
        }


class Reference:
    """The FP32 graph's outputs on the check samples, computed once and reused for every candidate."""

    def __init__(
        self, model: onnx.ModelProto, samples: list[dict[str, np.ndarray]], stop: threading.Event | None = None
    ) -> None:
        """``stop``: set, no further sample is run (made ahead of its use, and the stage failed meanwhile)."""
        from deploykit.graph.parallel import in_order, threads_per_run
        from deploykit.graph.run import session_from_onnx

        session = session_from_onnx(model, "as_written", spin=False, threads=threads_per_run())
        wanted = samples if stop is None else itertools.takewhile(lambda _: not stop.is_set(), samples)
        self.outputs = list(in_order(session.infer, wanted))
        self.samples = samples[: len(self.outputs)]
        self.evaluator = session.evaluator
        self.signal = (
            {name: _signal([o[name] for o in self.outputs]) for name in self.outputs[0]} if self.outputs else {}
        )

    def reordered(self, order: list[int]) -> Reference:
        """The same samples and outputs in ``order`` (indices into these)."""
        out = object.__new__(Reference)
        out.samples, out.outputs = [self.samples[k] for k in order], [self.outputs[k] for k in order]
        out.evaluator, out.signal = self.evaluator, self.signal
        return out

    def head(self, n: int) -> Reference:
        """The first ``n`` samples and their outputs, without running the FP32 graph again."""
        out = object.__new__(Reference)
        out.samples, out.outputs, out.evaluator = self.samples[:n], self.outputs[:n], self.evaluator
        out.signal = {name: _signal([o[name] for o in out.outputs]) for name in out.outputs[0]} if out.samples else {}
        return out


def _signal(values: list[np.ndarray]) -> float | None:
    """How much an output changes with the input: rel-L2 of each sample against the samples' mean.

    A quantization error is only meaningful next to this: an output that barely depends on its
    input (a bias-dominated head) passes any rel-L2 tolerance above its signal even if constant.
    """
    if len(values) < 2 or len({v.shape for v in values}) != 1:
        return None
    stack = np.stack([v.astype(np.float64) for v in values])
    dev = np.linalg.norm((stack - stack.mean(axis=0)).reshape(len(values), -1), axis=1)
    norm = np.linalg.norm(stack.reshape(len(values), -1), axis=1)
    return float(np.mean(dev / np.maximum(norm, 1e-30)))


def check(
    reference: Reference, candidate: onnx.ModelProto, opener: Callable[..., OrtSession], tolerance: Callable[[str], Any]
) -> Check:
    """Run ``candidate`` (through ``opener``) on the reference's samples and compare every output.

    Args:
        reference: the FP32 outputs on the check samples.
        candidate: the quantized graph.
        opener: the evaluator (as written, or as ONNX Runtime computes).
        tolerance: output name -> the parity tolerance (``deploykit.config.Tolerance``), so this
            check and the parity stage judge by the same numbers.
    """
    from deploykit.graph.parallel import in_order
    from deploykit.metrics import compare, violations

    session = opener(candidate)
    worst: dict[str, dict[str, float]] = {}
    per_sample: dict[str, list[float]] = {}
    resized: set[str] = set()
    for expected, got in zip(reference.outputs, in_order(session.infer, reference.samples), strict=True):
        for name, ref in expected.items():
            if got[name].shape != ref.shape:  # a data-dependent count (boxes after NMS): parity's task check judges it
                resized.add(name)
                continue
            metrics = compare(ref, got[name])
            worst[name] = _worst(worst.get(name), metrics)
            per_sample.setdefault(name, []).append(metrics["rel_l2"])
    for name, values in per_sample.items():
        worst[name]["mean_rel_l2"] = float(np.mean(values))
    bad = [v.about(name) for name, m in sorted(worst.items()) for v in violations(m, tolerance(name))]
    nonfinite = [name for name, m in worst.items() if m["nonfinite"] > 0]
    limits = {
        name: float(limit)
        for name in worst
        if (limit := getattr(tolerance(name), "rel_l2", None)) is not None and np.isfinite(limit)
    }
    notes = [Verdict.SHAPE_DIFFERS().about(name) for name in sorted(resized)]
    return Check(
        worst, bad, session.evaluator, len(reference.samples), nonfinite, weak_signal(worst, reference) + notes, limits
    )


SIGNAL_WARNING = 0.5  # error / signal above this: the quantized output has lost much of what the input drives
WEAK_SIGNAL = 0.01  # an output whose samples differ from their mean by less than this (rel-L2) barely varies


def weak_signal(worst: dict[str, dict[str, float]], reference: Reference) -> list[Reason]:
    """Warnings for outputs whose error is large next to how much they vary (adds the two ratios to
    ``worst``): the output barely depends on its input (its tolerance then proves little), or the
    quantized output has lost much of how the input moves it."""
    out = []
    for name, m in worst.items():
        signal = reference.signal.get(name)
        if signal is None:
            continue
        m["signal_rel_l2"] = signal
        m["error_to_signal"] = m["rel_l2"] / signal if signal > 0 else float("inf")
        if m["error_to_signal"] <= SIGNAL_WARNING:
            continue
        kind = Verdict.WEAK_SIGNAL if signal < WEAK_SIGNAL else Verdict.SIGNAL_LOST
        out.append(kind(rel_l2=m["rel_l2"], ratio=m["error_to_signal"], signal=signal).about(name))
    return out


_LARGER_IS_WORSE = ("max_abs", "mean_abs", "rel_l2", "max_rel", "nonfinite", "ref_nonfinite")


def _worst(a: dict[str, float] | None, b: dict[str, float]) -> dict[str, float]:
    if a is None:
        return {k: v for k, v in b.items() if k in (*_LARGER_IS_WORSE, "cosine", "snr_db", "ref_absmax", "ref_range")}
    out = {k: max(a[k], b[k]) for k in _LARGER_IS_WORSE}
    out.update(
        cosine=min(a["cosine"], b["cosine"]),
        snr_db=min(a["snr_db"], b["snr_db"]),
        ref_absmax=max(a["ref_absmax"], b["ref_absmax"]),
        ref_range=max(a["ref_range"], b["ref_range"]),
    )
    return out
