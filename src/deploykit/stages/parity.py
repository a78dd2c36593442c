"""parity: the built engine against the FP32 reference (and torch, for torch sources)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.artifacts import Artifact
from deploykit.backends.onnxruntime import reference_session
from deploykit.environment import device_fingerprint, onnxruntime_version, tool_versions
from deploykit.errors import DataError, ParityFailed
from deploykit.metrics import compare, merge, violations
from deploykit.onnxio import distinct_shapes, random_feeds
from deploykit.stages.base import Stage, StageContext
from deploykit.stages.build import load_engine
from deploykit.stages.export import MODEL

REPORT = "parity.json"


class ParityStage(Stage):
    name = "parity"
    version = 1
    inputs = {"reference": "onnx", "engine": "engine"}
    output_kind = "parity-report"
    output_roles = ("parity",)

    def key_config(self, ctx: StageContext) -> Any:
        c = ctx.config
        torch_ref = c.parity.torch_reference and c.source.factory is not None
        from deploykit.torchsource import source_fingerprint

        return {"parity": c.parity, "inputs": c.inputs, "dims": c.dims,
                "torch_source": source_fingerprint(c) if torch_ref else None}

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        return {"onnxruntime": onnxruntime_version(), "torch": tool_versions().get("torch"), "device": device_fingerprint()}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> dict[str, Any]:
        cfg = ctx.config
        candidate = load_engine(inputs["engine"])
        references = {"onnx": reference_session(inputs["reference"].file(MODEL))}
        torch_model = None
        if cfg.parity.torch_reference and cfg.source.factory is not None:
            from deploykit.torchsource import build_model

            torch_model = build_model(cfg)
        worst: dict[tuple[str, str], dict[str, float]] = {}
        rng = np.random.default_rng(cfg.parity.seed)
        shapes = distinct_shapes(cfg)
        with ctx.reporter.task("parity samples", len(shapes) * cfg.parity.samples) as advance:
            for which in shapes:
                for _ in range(cfg.parity.samples):
                    feeds = random_feeds(cfg, which, rng)
                    got = candidate.infer(feeds)
                    for ref_name, expected in _references(references, torch_model, cfg, feeds).items():
                        for out_name, ref in expected.items():
                            worst[(ref_name, out_name)] = merge(worst.get((ref_name, out_name)),
                                                               _compare(ref, got, out_name))
                    advance()
        report = _report(cfg, worst, candidate.evaluator, references["onnx"].evaluator, shapes, torch_model is not None)
        (out / REPORT).write_text(json.dumps(report, indent=2, sort_keys=True))
        return {"passed": report["passed"], "failures": report["failures"]}

    def verdict(self, artifact: Artifact) -> None:
        if not artifact.manifest.summary["passed"]:
            raise ParityFailed("parity failed: " + "; ".join(artifact.manifest.summary["failures"]),
                               hint=f"the full report is {artifact.file(REPORT)}")


def _references(sessions: dict[str, Any], torch_model: Any, cfg: Any, feeds: dict[str, np.ndarray]) -> dict[str, dict]:
    out = {name: s.infer(feeds) for name, s in sessions.items()}
    if torch_model is not None:
        from deploykit.torchsource import run_torch

        names = list(out["onnx"])
        out["torch"] = dict(zip(names, run_torch(torch_model, feeds, [s.name for s in cfg.inputs]), strict=True))
    return out


def _compare(ref: np.ndarray, got: dict[str, np.ndarray], name: str) -> dict[str, float]:
    if name not in got:
        raise DataError(f"the engine has no output {name!r} (it has: {', '.join(got)})",
                        hint="surgery renamed or removed an output; keep the model's outputs")
    try:
        return compare(ref, got[name])
    except ValueError as e:
        raise DataError(f"output {name!r}: {e}") from e


def _report(cfg: Any, worst: dict, evaluator: str, ref_evaluator: str, shapes: list[str], torch_ref: bool) -> dict:
    outputs, failures = {}, []
    for (ref_name, out_name), metrics in sorted(worst.items()):
        tol = cfg.parity.tolerance(out_name)
        bad = violations(metrics, tol)
        failures += [f"{out_name} vs {ref_name}: {v}" for v in bad]
        outputs.setdefault(out_name, {})[ref_name] = {"metrics": metrics, "tolerance": asdict(tol),
                                                       "passed": not bad, "violations": bad}
    return {"passed": not failures, "failures": failures, "outputs": outputs,
            "candidate_evaluator": evaluator,
            "references": {"onnx": ref_evaluator, **({"torch": "torch (CPU, eval mode)"} if torch_ref else {})},
            "data": {"kind": "random", "note": "random normal inputs: no validation data configured",
                     "seed": cfg.parity.seed, "samples_per_shape": cfg.parity.samples, "shapes": shapes}}
