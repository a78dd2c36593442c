"""parity: the built engine against the FP32 reference (and torch, for torch sources).

Inputs come from the configured validation data, or else random normal inputs at every distinct
input shape (and the report says so). Every output is compared elementwise, the configured task
checks run on top, and a failure triggers a per-layer diagnosis of the ONNX-level candidate. The
report is written before the verdict raises, so a failed check always leaves its evidence.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.config import Config, parity_preset
from deploykit.errors import ParityFailed
from deploykit.graph.run import session_from_onnx
from deploykit.metrics.comparison import Comparison
from deploykit.metrics.reasons import as_reason
from deploykit.quant.flavours import flavour_for
from deploykit.record.model import Check, explained, worst_of
from deploykit.stages.base import Stage, StageContext, Summary
from deploykit.stages.build import BuildSummary, load_engine
from deploykit.stages.export import MODEL
from deploykit.stages.quantize import QuantizeStage, QuantizeSummary
from deploykit.stages.validation import parity_samples, validation_fingerprint
from deploykit.store import jsonio
from deploykit.store.artifacts import Artifact
from deploykit.store.environment import device_fingerprint, onnxruntime_version, tool_versions

REPORT = "parity.json"


@dataclass(frozen=True)
class ParitySummary(Summary):
    passed: bool = False
    status: str = ""  # pass | fail | inconclusive
    failures: list[str] = field(default_factory=list)  # the sentences; parity.json holds them with their codes
    inconclusive: list[str] = field(default_factory=list)  # comparisons that prove nothing

    def failure(self) -> str:
        return "" if self.passed else "; ".join(self.failures or self.inconclusive or ["failed"])


class ParityStage(Stage):
    name = "parity"
    version = 4  # 4: every failure and inconclusive explanation in parity.json is {code, sentence, ...}
    inputs = {"reference": "onnx", "model": "onnx", "engine": "engine"}
    output_kind = "parity-report"
    output_roles = ("parity",)
    summary_type = ParitySummary
    report_files = (REPORT,)

    def key_config(self, ctx: StageContext) -> Any:
        c = ctx.config
        torch_ref = c.parity.torch_reference and c.source.is_torch
        from deploykit.source.factory import source_fingerprint

        return {
            "parity": c.parity,
            "inputs": c.inputs,
            "dims": c.dims,
            "preset": parity_preset(c.quantize),
            "torch_source": source_fingerprint(c) if torch_ref else None,
            "validation": validation_fingerprint(c),
        }

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        return {
            "onnxruntime": onnxruntime_version(),
            "torch": tool_versions().get("torch"),
            "device": device_fingerprint(),
        }

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> ParitySummary:
        cfg = ctx.config
        inputs, reference_note = _fp32_reference(ctx, inputs)
        candidate = _candidate(inputs)
        # The reference: the FP32 graph's nodes one by one, no graph optimizations.
        references = {"onnx": session_from_onnx(inputs["reference"].file(MODEL), "onnxruntime", level="disabled")}
        torch_model = None if reference_note else _torch_model(ctx)
        comparison = Comparison(cfg.parity, parity_preset(cfg.quantize), cfg.quantize.precision)
        comparison.check_outputs([o.name for o in references["onnx"].outputs])
        samples, data = parity_samples(cfg)
        worst: tuple[float, dict[str, np.ndarray] | None] = (-1.0, None)
        with ctx.reporter.task("parity samples", data["planned"]) as advance:
            for feeds in samples:
                expected = _references(references, torch_model, cfg, feeds)
                rel_l2 = comparison.add(expected, candidate.infer(feeds))
                if rel_l2 > worst[0]:
                    worst = (rel_l2, feeds)  # kept for the per-layer diagnosis
                advance()
        data["samples"] = comparison.samples
        report = {
            **comparison.report(),
            "data": data,
            "candidate_evaluator": candidate.evaluator,
            "references": {
                "onnx": references["onnx"].evaluator,
                **({"torch": "torch (CPU, eval mode)"} if torch_model is not None else {}),
            },
            **({"reference_note": reference_note} if reference_note else {}),
        }
        if _fails_against_onnx(report) and cfg.parity.diagnose and worst[1] is not None:
            report["diagnosis"] = diagnose_failure(cfg, inputs, worst[1])
        jsonio.write(out / REPORT, report)
        return ParitySummary(
            report["passed"],
            report["status"],
            [as_reason(f).sentence for f in report["failures"]],
            [as_reason(f).sentence for f in report["inconclusive"]],
        )

    @classmethod
    def checks(cls, artifact: Artifact) -> list[Check]:
        """One per output x reference (its worst metric against the limit) and one per task check."""
        return parity_checks(cls.report(artifact) or {})

    def verdict(self, artifact: Artifact) -> None:
        s = ParitySummary.of(artifact)
        if s.passed:
            return
        hint = f"the full report is {artifact.file(REPORT)}"
        if s.status == "inconclusive":
            raise ParityFailed(
                "parity inconclusive: " + "; ".join(s.inconclusive),
                hint="configure validation data that exercises these outputs, or set "
                f"parity.inconclusive: warn; {hint}",
            )
        raise ParityFailed("parity failed: " + "; ".join(s.failures), hint=hint)


def _fails_against_onnx(report: dict[str, Any]) -> bool:
    """Whether a comparison with the FP32 ONNX graph failed (torch-only gaps: nothing to trace)."""
    outputs = any(refs.get("onnx", {}).get("violations") for refs in report["outputs"].values())
    return outputs or any(t["reference"] == "onnx" and t["violations"] for t in report["tasks"])


def parity_checks(report: dict[str, Any]) -> list[Check]:
    """The parity report's verdicts as checks. An inconclusive comparison passes only where the
    config accepts it (``parity.inconclusive: warn``, seen as an inconclusive report that passed)."""
    from deploykit.metrics.tasks import deciding_limit

    accepted = report.get("status") == "inconclusive" and bool(report.get("passed"))
    out = []
    for name, refs in report.get("outputs", {}).items():
        for ref, r in refs.items():
            metric, measured, limit, op = worst_of(r.get("metrics", {}), r.get("tolerance", {}))
            reasons = list(r.get("violations", [])) + ([r["inconclusive"]] if r.get("inconclusive") else [])
            out.append(
                Check(
                    "parity",
                    f"{name} vs {ref}",
                    r["status"],
                    r["status"] == "pass" or (r["status"] == "inconclusive" and accepted),
                    metric,
                    measured,
                    limit,
                    op,
                    **explained(reasons),
                )
            )
    for t in report.get("tasks", []):
        lim = deciding_limit(t)
        reasons = list(t.get("violations", [])) + ([t["inconclusive"]] if t.get("inconclusive") else [])
        out.append(
            Check(
                "task",
                f"{t['label']} vs {t['reference']}",
                t["status"],
                t["status"] == "pass" or (t["status"] == "inconclusive" and accepted),
                lim.get("metric", ""),
                t.get("metrics", {}).get(lim.get("metric")),
                lim.get("value"),
                lim.get("op", ""),
                **explained(reasons),
            )
        )
    if report and not report.get("passed") and all(c.passed for c in out):
        why = explained(report.get("failures") or report.get("inconclusive") or [])
        out.append(
            Check(
                "parity",
                "parity",
                report.get("status", "fail"),
                False,
                message=why["message"] or "failed",
                codes=why["codes"],
            )
        )
    return out


def _fp32_reference(ctx: StageContext, inputs: dict[str, Artifact]) -> tuple[dict[str, Artifact], str]:
    """The inputs with the FP32 graph to compare against, and a note when it is not the export.

    Surgery that changes the outputs (``cut`` of the post-processing for TensorRT) leaves nothing in
    the export to compare the candidate's outputs with; the reference is then the FP32 graph after
    surgery, which the surgery stage checked pass by pass, and torch (whose outputs are the old
    ones) is left out."""
    reference, model = inputs["reference"], inputs["model"]
    if _output_names(reference) == _output_names(model):
        return inputs, ""
    fp32 = model
    while fp32.manifest.stage == "quantize":
        fp32 = ctx.store.get(fp32.manifest.parents["model"])
    note = (
        f"surgery changed the outputs ({', '.join(_output_names(reference))} -> "
        f"{', '.join(_output_names(fp32))}): compared against the FP32 graph after surgery, not the export "
        "or torch"
    )
    return {**inputs, "reference": fp32}, note


def runners(ctx: StageContext, inputs: dict[str, Artifact]) -> dict[str, Any]:
    """What parity runs on each sample, by name: ``candidate`` (the engine, or the graph as written),
    ``onnx`` (the FP32 reference graph) and ``torch`` for a torch source; each maps feeds -> outputs
    (``deploykit parity --save-outputs`` writes what they computed)."""
    inputs, note = _fp32_reference(ctx, inputs)
    out = {
        "candidate": _candidate(inputs).infer,
        "onnx": session_from_onnx(inputs["reference"].file(MODEL), "onnxruntime", level="disabled").infer,
    }
    torch_model = None if note else _torch_model(ctx)
    if torch_model is not None:
        from deploykit.source.factory import run_torch

        names = [s.name for s in ctx.config.inputs]
        outputs = _output_names(inputs["reference"])
        out["torch"] = lambda feeds: dict(zip(outputs, run_torch(torch_model, feeds, names), strict=True))
    return out


def _output_names(artifact: Artifact) -> list[str]:
    from deploykit.graph.files import load_model

    return [o.name for o in load_model(artifact.file(MODEL), load_external=False).graph.output]


def _candidate(inputs: dict[str, Artifact]) -> Any:
    """What to check: the built engine, except for a quantized graph whose flavour's runtime that
    backend is not (a TensorRT-flavour graph built for ONNX Runtime: its CPU kernels do not compute
    such a graph as written, FP16 + INT8 measured at rel-L2 0.12 where the graph gives 0.013). That
    graph is evaluated the flavour's way (as written: what TensorRT will compute, up to kernel
    rounding). The report's candidate_evaluator says which one ran."""
    model, engine = inputs["model"], inputs["engine"]
    flavour = QuantizeSummary.of(model).flavour if model.manifest.stage == QuantizeStage.name else ""
    if flavour and flavour_for(flavour).foreign(BuildSummary.of(engine).backend):
        return session_from_onnx(model.file(MODEL), flavour_for(flavour).evaluator)
    return load_engine(engine)


def _torch_model(ctx: StageContext) -> Any:
    """The torch reference: the model the export stage of this run built, else built here."""
    cfg = ctx.config
    if not (cfg.parity.torch_reference and cfg.source.is_torch):
        return None
    from deploykit.source.factory import build_model

    if ctx.torch_model is None:
        ctx.torch_model = build_model(cfg)
    return ctx.torch_model


def _references(
    sessions: dict[str, Any], torch_model: Any, cfg: Config, feeds: dict[str, np.ndarray]
) -> dict[str, dict]:
    out = {name: s.infer(feeds) for name, s in sessions.items()}
    if torch_model is not None:
        from deploykit.source.factory import run_torch

        names = list(out["onnx"])
        out["torch"] = dict(zip(names, run_torch(torch_model, feeds, [s.name for s in cfg.inputs]), strict=True))
    return out


# -- diagnosis ---------------------------------------------------------------------------------------


def diagnose_failure(cfg: Config, inputs: dict[str, Artifact], feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per-layer divergence between the reference graph and the ONNX-level candidate, on the worst sample."""
    candidate, level = _diagnosis_candidate(inputs)
    if candidate is None:
        return {"status": "skipped", "reason": level}
    try:
        diagnose = importlib.import_module("deploykit.metrics.divergence")
    except ImportError:
        return {
            "status": "unavailable",
            "reason": "this deploykit has no per-layer diagnosis (deploykit.metrics.divergence)",
        }
    try:
        result = diagnose.compare_graphs(inputs["reference"].file(MODEL), candidate, feeds, top=cfg.parity.diagnose_top)
    except Exception as e:  # the diagnosis explains a failure; it must never hide the verdict and report
        return {"status": "failed", "candidate": level, "reason": f"{type(e).__name__}: {e}"}
    return {"status": "ran", "candidate": level, **_as_dict(result)}


def _diagnosis_candidate(inputs: dict[str, Artifact]) -> tuple[Path | None, str]:
    """Which ONNX graph to compare with the reference, and what it is (or why there is none)."""
    if inputs["model"].digest != inputs["reference"].digest:
        return inputs["model"].file(MODEL), "the model after surgery/quantization (ONNX)"
    engine = inputs["engine"]
    if BuildSummary.of(engine).backend == "onnxruntime":
        return engine.file(MODEL), "the ONNX Runtime engine's optimized graph"
    return None, (
        "the candidate is a TensorRT engine with the reference's ONNX: a diagnostic build that marks "
        "layers as outputs would change fusion, so it is not run automatically"
    )


def _as_dict(result: Any) -> dict[str, Any]:
    if isinstance(result, dict):
        return result
    if hasattr(result, "to_dict"):
        return result.to_dict()
    from dataclasses import asdict, is_dataclass

    return asdict(result) if is_dataclass(result) else {"result": str(result)}
