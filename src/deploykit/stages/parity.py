"""parity: the built engine against the FP32 reference (and torch, for torch sources).

Inputs come from the configured validation data, or else random normal inputs at every distinct
input shape (and the report says so). Every output is compared elementwise, the configured task
checks run on top, and a failure triggers a per-layer diagnosis of the ONNX-level candidate. The
report is written before the verdict raises, so a failed check always leaves its evidence.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.artifacts import Artifact
from deploykit.backends.onnxruntime import reference_session
from deploykit.config import Config, parity_preset
from deploykit.environment import device_fingerprint, onnxruntime_version, tool_versions
from deploykit.errors import DataError, ParityFailed
from deploykit.metrics.comparison import Comparison
from deploykit.onnxio import distinct_shapes, random_feeds
from deploykit.report import jsonio
from deploykit.stages.base import Stage, StageContext
from deploykit.stages.build import load_engine
from deploykit.stages.export import MODEL

REPORT = "parity.json"


class ParityStage(Stage):
    name = "parity"
    version = 3
    inputs = {"reference": "onnx", "model": "onnx", "engine": "engine"}
    output_kind = "parity-report"
    output_roles = ("parity",)

    def key_config(self, ctx: StageContext) -> Any:
        c = ctx.config
        torch_ref = c.parity.torch_reference and c.source.factory is not None
        from deploykit.torchsource import source_fingerprint

        return {"parity": c.parity, "inputs": c.inputs, "dims": c.dims, "preset": parity_preset(c.quantize),
                "torch_source": source_fingerprint(c) if torch_ref else None,
                "validation": _validation_source(c).fingerprint() if c.validation else None}

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        return {"onnxruntime": onnxruntime_version(), "torch": tool_versions().get("torch"), "device": device_fingerprint()}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> dict[str, Any]:
        cfg = ctx.config
        candidate = _candidate(inputs)
        references = {"onnx": reference_session(inputs["reference"].file(MODEL))}
        torch_model = _torch_model(cfg)
        comparison = Comparison(cfg.parity, parity_preset(cfg.quantize), cfg.quantize.precision)
        comparison.check_outputs([o.name for o in references["onnx"].outputs])
        samples, data = _samples(cfg)
        worst: tuple[float, dict[str, np.ndarray] | None] = (-1.0, None)
        with ctx.reporter.task("parity samples", data["planned"]) as advance:
            for feeds in samples:
                expected = _references(references, torch_model, cfg, feeds)
                rel_l2 = comparison.add(expected, candidate.infer(feeds))
                if rel_l2 > worst[0]:
                    worst = (rel_l2, feeds)  # kept for the per-layer diagnosis
                advance()
        data["samples"] = comparison.samples
        report = {**comparison.report(), "data": data, "candidate_evaluator": candidate.evaluator,
                  "references": {"onnx": references["onnx"].evaluator,
                                 **({"torch": "torch (CPU, eval mode)"} if torch_model is not None else {})}}
        against_onnx = any(" vs onnx: " in f for f in report["failures"])  # torch-only gaps: nothing to trace
        if against_onnx and cfg.parity.diagnose and worst[1] is not None:
            report["diagnosis"] = diagnose_failure(cfg, inputs, worst[1])
        jsonio.write(out / REPORT, report)
        return {"passed": report["passed"], "status": report["status"], "failures": report["failures"],
                "inconclusive": report["inconclusive"]}

    def verdict(self, artifact: Artifact) -> None:
        s = artifact.manifest.summary
        if s["passed"]:
            return
        hint = f"the full report is {artifact.file(REPORT)}"
        if s.get("status") == "inconclusive":
            raise ParityFailed("parity inconclusive: " + "; ".join(s["inconclusive"]),
                               hint="configure validation data that exercises these outputs, or set "
                                    f"parity.inconclusive: warn; {hint}")
        raise ParityFailed("parity failed: " + "; ".join(s["failures"]), hint=hint)


def _candidate(inputs: dict[str, Artifact]) -> Any:
    """What to check: the built engine, except for a TensorRT-flavour quantized graph built for another
    backend. ONNX Runtime's CPU kernels do not compute such a graph as written (FP16 + INT8 measured at
    rel-L2 0.12 where the graph gives 0.013), so evaluate the graph as written: that is what TensorRT
    will compute, up to kernel rounding. The report's candidate_evaluator says which one ran."""
    model, engine = inputs["model"], inputs["engine"]
    flavour = model.manifest.summary.get("flavour") if model.manifest.stage == "quantize" else None
    if flavour == "tensorrt" and engine.manifest.summary.get("backend") != "tensorrt":
        from deploykit.quant.evaluate import open_for_target

        return open_for_target(model.file(MODEL), "tensorrt")
    return load_engine(engine)


def _torch_model(cfg: Config) -> Any:
    if not (cfg.parity.torch_reference and cfg.source.factory is not None):
        return None
    from deploykit.torchsource import build_model

    return build_model(cfg)


def _references(sessions: dict[str, Any], torch_model: Any, cfg: Config, feeds: dict[str, np.ndarray]) -> dict[str, dict]:
    out = {name: s.infer(feeds) for name, s in sessions.items()}
    if torch_model is not None:
        from deploykit.torchsource import run_torch

        names = list(out["onnx"])
        out["torch"] = dict(zip(names, run_torch(torch_model, feeds, [s.name for s in cfg.inputs]), strict=True))
    return out


# -- data --------------------------------------------------------------------------------------------

def _validation_source(cfg: Config) -> Any:
    from deploykit.data import DataSource, inputs_from_config

    return DataSource(cfg.validation, cfg.base_dir, inputs_from_config(cfg), what="validation")


def validation_samples(cfg: Config) -> tuple[list[dict[str, np.ndarray]], str] | None:
    """Parity's validation samples in parity's order, and how the report names them; None without
    validation data. The quantize stage's check and mixed-precision search judge on exactly these."""
    if cfg.validation is None:
        return None
    samples, data = _samples(cfg)
    return list(samples), data["note"]


def _samples(cfg: Config) -> tuple[Iterator[dict[str, np.ndarray]], dict[str, Any]]:
    """The samples to compare on, and how the report describes them."""
    if cfg.validation is not None:
        v = cfg.validation
        where = v.folder or v.files or v.function
        kind = "folder" if v.folder else "files" if v.files else "function"
        data = {"kind": "validation", "source": f"{kind}: {where}", "planned": v.samples,
                "note": f"validation data ({kind} {where})"}
        if v == cfg.calibration:
            data["warning"] = ("the validation data is the calibration data: parity on samples the quantizer "
                               "saw is optimistic")
        return _checked_dims(cfg, iter(_validation_source(cfg))), data
    shapes = distinct_shapes(cfg)

    def random_samples() -> Iterator[dict[str, np.ndarray]]:
        rng = np.random.default_rng(cfg.parity.seed)
        for which in shapes:
            for _ in range(cfg.parity.samples):
                yield random_feeds(cfg, which, rng)

    return random_samples(), {"kind": "random", "note": "random normal inputs: no validation data configured",
                              "seed": cfg.parity.seed, "samples_per_shape": cfg.parity.samples, "shapes": shapes,
                              "planned": len(shapes) * cfg.parity.samples}


def _checked_dims(cfg: Config, samples: Iterator[dict[str, np.ndarray]]) -> Iterator[dict[str, np.ndarray]]:
    """Dynamic dims of validation samples must lie in the configured min..max (the engine's profile)."""
    for i, feeds in enumerate(samples):
        for spec in cfg.inputs:
            for axis, dim in enumerate(spec.shape):
                if isinstance(dim, str):
                    size, d = feeds[spec.name].shape[axis], cfg.dims[dim]
                    if not d.min <= size <= d.max:
                        raise DataError(f"validation sample {i}: input {spec.name!r} axis {axis} is {size}, outside "
                                        f"dim {dim!r} range [{d.min}, {d.max}]",
                                        hint="widen 'dims' in the config or batch the validation data differently")
        yield feeds


# -- diagnosis ---------------------------------------------------------------------------------------

def diagnose_failure(cfg: Config, inputs: dict[str, Artifact], feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per-layer divergence between the reference graph and the ONNX-level candidate, on the worst sample."""
    candidate, level = _diagnosis_candidate(inputs)
    if candidate is None:
        return {"status": "skipped", "reason": level}
    try:
        diagnose = importlib.import_module("deploykit.diagnose")
    except ImportError:
        return {"status": "unavailable", "reason": "this deploykit has no per-layer diagnosis (deploykit.diagnose)"}
    try:
        result = diagnose.compare_graphs(inputs["reference"].file(MODEL), candidate, feeds,
                                         top=cfg.parity.diagnose_top)
    except Exception as e:  # the diagnosis explains a failure; it must never hide the verdict and report
        return {"status": "failed", "candidate": level, "reason": f"{type(e).__name__}: {e}"}
    return {"status": "ran", "candidate": level, **_as_dict(result)}


def _diagnosis_candidate(inputs: dict[str, Artifact]) -> tuple[Path | None, str]:
    """Which ONNX graph to compare with the reference, and what it is (or why there is none)."""
    if inputs["model"].digest != inputs["reference"].digest:
        return inputs["model"].file(MODEL), "the model after surgery/quantization (ONNX)"
    engine = inputs["engine"]
    if engine.manifest.summary.get("backend") == "onnxruntime":
        return engine.file(MODEL), "the ONNX Runtime engine's optimized graph"
    return None, ("the candidate is a TensorRT engine with the reference's ONNX: a diagnostic build that marks "
                  "layers as outputs would change fusion, so it is not run automatically")


def _as_dict(result: Any) -> dict[str, Any]:
    if isinstance(result, dict):
        return result
    if hasattr(result, "to_dict"):
        return result.to_dict()
    from dataclasses import asdict, is_dataclass

    return asdict(result) if is_dataclass(result) else {"result": str(result)}
