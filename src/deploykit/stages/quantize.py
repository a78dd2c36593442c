"""quantize: FP32 ONNX -> Q/DQ ONNX (or FP16), with ranges, a TensorRT cache and the precision patch.

The work lives in :mod:`deploykit.quant.quantize`; this stage resolves the config, streams the
calibration data, and writes one artifact:

* ``model.onnx`` — the quantized graph (the ``model`` role the build reads);
* ``ranges.json`` — per-tensor observed min/max and the calibrated threshold, with the method;
* ``calibration.cache`` — TensorRT's legacy INT8 cache (INT8, tensorrt flavour);
* ``precision.json`` — every node kept out of quantization or in FP32 and why, the layer
  precisions (the "precision patch": group -> precision, ready for ``quantize.layer_precisions``),
  the mixed-precision search (its measurements, steps and accuracy-vs-latency table), the final
  check and its evaluator;
* ``base.onnx`` — the quantized graph before the precision patch (when there is one): applying
  ``layer_precisions`` to it gives ``model.onnx`` byte for byte;
* ``sensitivity.json`` — the search's per-layer measurements, filed under a key of everything they
  depend on except the tolerances: a rerun at another tolerance finds them here (the file is in
  the artifact's digest, so an edited cache is refused, never trusted).

For INT8 in the onnxruntime flavour the summary also holds ``cpu_speed``, FP32 vs INT8 timed on
this CPU (:mod:`deploykit.quant.speed`), with a warning when INT8 is not faster.

Skipped for ``precision: fp32``. The check is parity's: its tolerances and task checks, against
parity's reference graph, on the validation samples parity will use when the config has validation
data (so a pass here implies a parity pass, up to the engine's kernel rounding), else on calibration
samples held out of the ranges (``quantize.check_samples``; parity then runs on random inputs and
may disagree), through the evaluator of the target flavour (``summary["evaluate"]``: ``as_written``
or ``onnxruntime``). It is a gate: a quantized model that misses it fails here (the artifact and its
report are kept).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

from deploykit.artifacts import Artifact
from deploykit.environment import onnxruntime_version, tool_versions
from deploykit.errors import ConfigError, ParityFailed
from deploykit.onnxio import load_model, save_model
from deploykit.stages.base import Stage, StageContext
from deploykit.stages.export import MODEL

RANGES = "ranges.json"
BASE = "base.onnx"
SENSITIVITY = "sensitivity.json"
CACHE = "calibration.cache"
PRECISION = "precision.json"
TRT_CACHE_VERSION = "10.12.0"  # the oldest TensorRT deploykit supports; the cache is for <= 10


class QuantizeStage(Stage):
    name = "quantize"
    version = 3  # 3: judged by parity's data and checks; mixed-precision search
    inputs = {"model": "onnx", "reference": "onnx"}
    output_kind = "onnx"
    output_roles = ("model",)

    def applies(self, ctx: StageContext) -> bool:
        return ctx.config.quantize.enabled

    def key_config(self, ctx: StageContext) -> Any:
        c = ctx.config
        q, flavour = c.quantize, c.quantize.flavour(c.build.backend)
        source = _calibration(ctx)
        return {"quantize": q, "flavour": flavour, "reduce_range": _reduce_range(ctx) if flavour == "onnxruntime" else None,
                "calibration": source.fingerprint() if source else None, "inputs": c.inputs, "dims": c.dims,
                "ort_level": c.build.optimization_level if flavour == "onnxruntime" else None,
                "parity": {"default": c.parity.default, "outputs": c.parity.outputs, "tasks": c.parity.tasks,
                           "inconclusive": c.parity.inconclusive, "vacuous_below": c.parity.vacuous_below},
                "validation": _validation_fingerprint(ctx), "trt_cache": TRT_CACHE_VERSION}

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        return {"onnxruntime": onnxruntime_version(), "modelopt": tool_versions().get("nvidia-modelopt", "absent")}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> dict[str, Any]:
        from deploykit.plugins.quantize import quantize_keeping_plugins
        from deploykit.quant.quantize import Job, quantize_model
        from deploykit.quant.reader import SampleStream

        c = ctx.config
        source = _calibration(ctx)
        stream = SampleStream(source, limit=c.calibration.samples, what="calibration") if source else None
        flavour = c.quantize.flavour(c.build.backend)
        job = Job(load_model(inputs["model"].file(MODEL)), c.quantize, flavour, stream,
                  where=str(inputs["model"].file(MODEL)), ort_level=c.build.optimization_level,
                  reduce_range=_reduce_range(ctx) if flavour == "onnxruntime" else False,
                  task=ctx.reporter.task, judging=_judging(ctx, inputs), search_cache=_cache_lookup(ctx))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # Plugin nodes are inlined for the quantizer and put back, FP32, afterwards.
            result = quantize_keeping_plugins(job, quantize_model)
        notes = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
        speed = _cpu_speed(job, result, stream)
        if speed is not None and speed.warning(job.cfg.precision):
            notes.append(speed.warning(job.cfg.precision))
        for note in notes:  # recorded in the summary and still shown to the user
            warnings.warn(note, UserWarning, stacklevel=2)
        summary = write_artifact(out, result, job, notes)
        summary["cpu_speed"] = _finite(speed.to_dict()) if speed is not None else None
        return summary

    def verdict(self, artifact: Artifact) -> None:
        summary = artifact.manifest.summary
        check = summary.get("check")
        if check and not check["passed"]:
            raise ParityFailed(f"quantized model misses its tolerance against the FP32 graph on {check['data']}: "
                               + "; ".join(check["violations"][:4]), hint=_hint(summary, artifact.file(PRECISION)))


def _calibration(ctx: StageContext) -> Any:
    """The calibration DataSource, or None (FP16 may run without); int8/fp8/int4 require one."""
    from deploykit.data import DataSource, inputs_from_config

    c = ctx.config
    if c.calibration is None:
        if c.quantize.precision == "fp16":
            return None
        raise ConfigError(f"quantize.precision {c.quantize.precision} needs calibration data, and the config has "
                          "no 'calibration' section",
                          hint="add calibration: {folder: images/} (or files:/function:), or pass --calib-data")
    return DataSource(c.calibration, c.base_dir, inputs_from_config(c), what="calibration")


def _cpu_speed(job: Any, result: Any, stream: Any) -> Any:
    """INT8 for ONNX Runtime's CPU kernels exists to be faster: time it against FP32 (about a second)."""
    from deploykit.quant import speed

    if job.flavour != "onnxruntime" or job.cfg.precision != "int8" or result.passthrough or stream is None:
        return None
    return speed.compare(job.model, result.model, stream.first(), job.ort_level)


def _reduce_range(ctx: StageContext) -> bool:
    from deploykit.quant.ort_flavour import resolve_reduce_range

    return resolve_reduce_range(ctx.config.quantize.reduce_range)


def _hint(summary: dict[str, Any], report: Path) -> str:
    """What to do next; never "enable the search" when it ran and spent its budget."""
    search = summary.get("repair")
    if search is None:
        return (f"see {report}; enable quantize.repair (--auto-repair) to search for the layers to keep in higher "
                "precision, or exclude the nodes the diagnosis names")
    return (f"the mixed-precision search stopped: {search['stopped']}; see its table in {report}. Raise "
            "quantize.repair.max_iterations / max_nodes / candidates, use quantize.high_precision: fp32, or loosen "
            "the tolerance if the best state shown is acceptable")


def _validation_fingerprint(ctx: StageContext) -> Any:
    from deploykit.stages.parity import _validation_source

    return _validation_source(ctx.config).fingerprint() if ctx.config.validation else None


def _judging(ctx: StageContext, inputs: dict[str, Artifact]) -> Any:
    """Parity's config, validation samples and reference graph: the check and the search judge by them."""
    from deploykit.quant.judge import Judging
    from deploykit.stages.parity import validation_samples

    found = validation_samples(ctx.config)
    samples, note = found if found is not None else (None, "")
    reference = inputs["reference"]
    graph = load_model(reference.file(MODEL)) if reference.digest != inputs["model"].digest else None
    return Judging(ctx.config.parity, samples, f"{len(samples)} samples of {note}" if samples else "", graph)


def _cache_lookup(ctx: StageContext) -> Any:
    """key -> the search measurements an earlier quantize artifact in the store filed under it."""

    def lookup(key: str) -> dict[str, Any] | None:
        found = [a for a in ctx.store.list() if a.manifest.stage == "quantize"
                 and (a.manifest.summary.get("repair") or {}).get("cache_key") == key]
        for candidate in reversed(found):  # newest first
            artifact = ctx.store.get(candidate.digest)  # verifies every file against the manifest
            return json.loads(artifact.file(SENSITIVITY).read_text())
        return None

    return lookup


def write_artifact(out: Path, result: Any, job: Any, warnings_: list[str]) -> dict[str, Any]:
    """Write model, ranges, cache and precision report into ``out``; return the manifest summary."""
    from deploykit.quant import trt_cache
    from deploykit.quant.graph import quantized_node_names
    from deploykit.quant.ranges import write_ranges

    save_model(result.model, out / MODEL)
    if result.layer_precisions and result.base is not None:
        save_model(result.base, out / BASE)
    if result.search_cache is not None:
        (out / SENSITIVITY).write_text(json.dumps(_finite(result.search_cache), sort_keys=True, allow_nan=False))
    samples = job.samples.seen if job.samples is not None else 0
    if result.ranges:
        write_ranges(out / RANGES, result.ranges, result.settings, {"samples": samples})
    if job.cfg.precision == "int8" and job.flavour == "tensorrt" and result.ranges:
        trt_cache.write(out / CACHE, {k: r.amax for k, r in result.ranges.items()}, TRT_CACHE_VERSION)
    report = _finite(_precision_report(result, job))
    (out / PRECISION).write_text(json.dumps(report, indent=2, sort_keys=True, allow_nan=False))
    check = result.check.to_dict() if result.check else None
    method = result.settings.method
    if job.cfg.method == "auto" and job.cfg.precision in ("int8", "fp8") and result.ranges:
        method = f"auto ({method})"
    return _finite({"precision": job.cfg.precision, "flavour": job.flavour, "method": method,
            "samples": samples, "quantized_nodes": len(quantized_node_names(result.model)),
            "excluded": sorted(result.excluded), "kept_fp32": sorted(result.fp32),
            "unquantized": sorted(result.unquantized), "check": _short(check),
            "evaluate": "onnxruntime" if job.flavour == "onnxruntime" else "as_written",
            "evaluator": result.check.evaluator if result.check else "",
            "repair": _repair_summary(result), "layer_precisions": dict(sorted(result.layer_precisions.items())),
            "notes": result.notes,
            "warnings": warnings_ + (result.check.warnings if result.check else []),
            "passthrough": result.passthrough})


def _precision_report(result: Any, job: Any) -> dict[str, Any]:
    return {"precision": job.cfg.precision, "flavour": job.flavour, "high_precision": job.cfg.high_precision,
            "excluded_from_quantization": result.excluded, "kept_fp32": result.fp32,
            "left_unquantized_by_quantizer": result.unquantized,
            "layer_precisions": dict(sorted(result.layer_precisions.items())),
            "base": BASE if result.layer_precisions and result.base is not None else None,
            "search": result.repair.to_dict() if result.repair else None,
            "check": result.check.to_dict() if result.check else None, "preparation": result.preparation,
            "notes": result.notes, "passthrough": result.passthrough}


def _short(check: dict[str, Any] | None) -> dict[str, Any] | None:
    if check is None:
        return None
    keys = ("rel_l2", "cosine", "max_abs", "nonfinite", "signal_rel_l2", "error_to_signal")
    metrics = {k: {m: v[m] for m in keys if m in v} for k, v in check["metrics"].items()}
    return {"passed": check["passed"], "violations": check["violations"], "metrics": metrics,
            "samples": check["samples"], "data": check.get("data") or "held-out calibration samples",
            "tasks": [{k: t[k] for k in ("label", "metrics", "status")} for t in check.get("tasks", [])]}


def _repair_summary(result: Any) -> dict[str, Any] | None:
    search = result.repair
    if search is None:
        return None
    return {"passed": search.check.passed, "stopped": search.stopped, "layer_precisions": dict(sorted(search.patch.items())),
            "steps": len(search.outcome.steps), "evaluations": search.evaluations,
            "cache_key": (result.search_cache or {}).get("key"), "judged_on": search.data,
            "worst_ratio": [round(s.score.worst, 6) for s in search.outcome.steps]}


def _finite(value: Any) -> Any:
    """JSON has no infinity: non-finite floats become None (the report says what they mean)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
