"""quantize: FP32 ONNX -> Q/DQ ONNX (or FP16), with ranges, a TensorRT cache and the precision patch.

The work lives in :mod:`deploykit.quant.quantize`; this stage resolves the config, streams the
calibration data, and writes one artifact:

* ``model.onnx`` — the quantized graph (the ``model`` role the build reads);
* ``ranges.json`` — per-tensor observed min/max and the calibrated threshold, with the method;
* ``calibration.cache`` — TensorRT's legacy INT8 cache (INT8, tensorrt flavour);
* ``precision.json`` — every node kept out of quantization or in FP32 and why, the repair
  steps (the "precision patch"), the final check against the FP32 graph and its evaluator.

For INT8 in the onnxruntime flavour the summary also holds ``cpu_speed``, FP32 vs INT8 timed on
this CPU (:mod:`deploykit.quant.speed`), with a warning when INT8 is not faster.

Skipped for ``precision: fp32``. The check runs on calibration samples held out of the ranges
(``quantize.check_samples``) with the parity tolerances for the precision, through the evaluator of
the target flavour (the summary's ``evaluate``: ``as_written`` or ``onnxruntime``). It is a gate: a
quantized model that misses its tolerance fails here (the artifact and its report are kept).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.artifacts import Artifact
from deploykit.config import CALIBRATED
from deploykit.environment import onnxruntime_version, tool_versions
from deploykit.errors import ConfigError, ParityFailed
from deploykit.graph.files import load_model, save_model
from deploykit.graph.run import evaluator_for
from deploykit.report.jsonio import clean
from deploykit.stages.base import Stage, StageContext, Summary
from deploykit.stages.export import MODEL

RANGES = "ranges.json"
CACHE = "calibration.cache"
PRECISION = "precision.json"
TRT_CACHE_VERSION = "10.12.0"  # the oldest TensorRT deploykit supports; the cache is for <= 10


@dataclass(frozen=True)
class QuantCheck(Summary):
    """The check against the FP32 graph on held-out samples: worst metrics per output."""

    passed: bool = True
    violations: list[str] = field(default_factory=list)
    metrics: dict[str, dict[str, float | None]] = field(default_factory=dict)  # output -> rel_l2, cosine, ...
    samples: int = 0


@dataclass(frozen=True)
class RepairSummary(Summary):
    passed: bool = False
    iterations: int = 0
    excluded_nodes: list[str] = field(default_factory=list)  # what the loop took out of quantization
    stopped: str = ""  # why it stopped
    worst_rel_l2: list[float | None] = field(default_factory=list)  # per step


@dataclass(frozen=True)
class CpuSpeed(Summary):
    """FP32 against INT8 on this CPU (:class:`deploykit.quant.speed.SpeedCheck`)."""

    fp32_ms: float = 0.0
    quantized_ms: float = 0.0
    rounds: int = 0
    iterations: int = 0
    batch: int = 1
    evaluator: str = ""
    speedup: float = 0.0
    speedup_low: float = 0.0  # the slowest and fastest per-round ratio FP32 / quantized
    speedup_high: float = 0.0
    fp32_spread: float = 0.0  # (max - min) / median of the per-round medians
    quantized_spread: float = 0.0


@dataclass(frozen=True)
class QuantizeSummary(Summary):
    precision: str = ""
    flavour: str = ""  # the target flavour the graph is written for
    method: str = ""  # the calibration method that set the ranges ("auto (mse)" when auto chose)
    samples: int = 0  # calibration samples read
    range_samples: int = 0  # of those, the samples the ranges come from
    check_samples: int = 0  # the samples the check ran on (held out of the ranges unless the stream was short)
    quantized_nodes: int = 0
    excluded: list[str] = field(default_factory=list)  # kept out of quantization
    kept_fp32: list[str] = field(default_factory=list)  # kept in FP32 where the rest is FP16
    unquantized: list[str] = field(default_factory=list)  # skipped by the quantizer's placement rules
    check: QuantCheck | None = None
    evaluate: str = ""  # the evaluator the check (and parity) use for this flavour: as_written | onnxruntime
    evaluator: str = ""  # what computed the check, in words
    repair: RepairSummary | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    passthrough: bool = False  # an already quantized model, passed through unchanged
    cpu_speed: CpuSpeed | None = None  # onnxruntime flavour, INT8


class QuantizeStage(Stage):
    name = "quantize"
    version = 3  # 2: onnxruntime-flavour exclusions read float tensors; 3: norm scales per channel on axis 0
    inputs = {"model": "onnx"}
    output_kind = "onnx"
    output_roles = ("model",)
    summary_type = QuantizeSummary
    measured = ("cpu_speed", "warnings")  # the CPU speed check, and the warning that quotes it

    def applies(self, ctx: StageContext) -> bool:
        return ctx.config.quantize.enabled

    def key_config(self, ctx: StageContext) -> Any:
        c = ctx.config
        q, flavour = c.quantize, c.quantize.flavour(c.build.backend)
        source = _calibration(ctx)
        return {"quantize": q, "flavour": flavour, "reduce_range": _reduce_range(ctx) if flavour == "onnxruntime" else None,
                "calibration": source.fingerprint() if source else None, "inputs": c.inputs, "dims": c.dims,
                "ort_level": c.build.optimization_level if flavour == "onnxruntime" else None,
                "parity": {"default": c.parity.default, "outputs": c.parity.outputs}, "trt_cache": TRT_CACHE_VERSION}

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        return {"onnxruntime": onnxruntime_version(), "modelopt": tool_versions().get("nvidia-modelopt", "absent")}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> QuantizeSummary:
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
                  task=ctx.reporter.task, tolerance=_tolerance(ctx))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # Plugin nodes are inlined for the quantizer and put back, FP32, afterwards.
            result = quantize_keeping_plugins(job, quantize_model)
        notes = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, UserWarning)))
        speed = _cpu_speed(job, result, stream)
        if speed is not None and speed.warning(job.cfg.precision):
            notes.append(speed.warning(job.cfg.precision))
        for note in notes:  # recorded in the summary and still shown to the user
            warnings.warn(note, UserWarning, stacklevel=2)
        summary = write_artifact(out, result, job, notes)
        speed_record = CpuSpeed.from_dict(clean(speed.to_dict())) if speed is not None else None
        return dataclasses.replace(summary, cpu_speed=speed_record)

    @classmethod
    def report(cls, artifact: Artifact) -> dict[str, Any] | None:
        """The summary with the precision patch (``precision.json``) as ``patch``."""
        patch = artifact.path / PRECISION
        return {**cls.summary(artifact).to_dict(), "patch": json.loads(patch.read_text()) if patch.is_file() else {}}

    def verdict(self, artifact: Artifact) -> None:
        check = QuantizeSummary.of(artifact).check
        if check and not check.passed:
            raise ParityFailed("quantized model misses its tolerance against the FP32 graph on held-out "
                               "calibration samples: " + "; ".join(check.violations[:4]),
                               hint=f"see {artifact.file(PRECISION)}; enable quantize.repair (--auto-repair) or "
                                    "exclude the nodes the diagnosis names")


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
    return DataSource(c.calibration, c.base_dir, inputs_from_config(c), what="calibration",
                      max_input_mib=c.limits.max_input_mib)


def _cpu_speed(job: Any, result: Any, stream: Any) -> Any:
    """INT8 for ONNX Runtime's CPU kernels exists to be faster: time it against FP32 (about a second)."""
    from deploykit.quant import speed

    if job.flavour != "onnxruntime" or job.cfg.precision != "int8" or result.passthrough or stream is None:
        return None
    return speed.compare(job.model, result.model, stream.first(), job.ort_level)


def _reduce_range(ctx: StageContext) -> bool:
    from deploykit.quant.ort_flavour import resolve_reduce_range

    return resolve_reduce_range(ctx.config.quantize.reduce_range)


def _tolerance(ctx: StageContext) -> Any:
    """The parity stage's tolerance per output, so this check and parity judge alike."""
    from deploykit.config import Tolerance, parity_preset
    from deploykit.metrics.tasks import unordered_outputs

    c = ctx.config
    preset = parity_preset(c.quantize)
    unordered = unordered_outputs(c.parity.tasks)  # post-NMS outputs: only parity's detection check compares them
    return lambda output: Tolerance() if output in unordered else c.parity.tolerance(output, preset)


def write_artifact(out: Path, result: Any, job: Any, warnings_: list[str]) -> QuantizeSummary:
    """Write model, ranges, cache and precision report into ``out``; return the manifest summary."""
    from deploykit.quant import trt_cache
    from deploykit.quant.graph import quantized_node_names
    from deploykit.quant.ranges import write_ranges

    save_model(result.model, out / MODEL)
    samples = job.samples.seen if job.samples is not None else 0
    if result.ranges:
        write_ranges(out / RANGES, result.ranges, result.settings, {"samples": samples,
                                                                    "range_samples": result.range_samples})
    if job.cfg.precision == "int8" and job.flavour == "tensorrt" and result.ranges:
        trt_cache.write(out / CACHE, {k: r.amax for k, r in result.ranges.items()}, TRT_CACHE_VERSION)
    report = clean(_precision_report(result, job))
    (out / PRECISION).write_text(json.dumps(report, indent=2, sort_keys=True, allow_nan=False))
    check = result.check.to_dict() if result.check else None
    method = result.settings.method
    if job.cfg.method == "auto" and job.cfg.precision in CALIBRATED and result.ranges:
        method = f"auto ({method})"
    return QuantizeSummary(
        precision=job.cfg.precision, flavour=job.flavour, method=method, samples=samples,
        range_samples=result.range_samples, check_samples=result.check_samples,
        quantized_nodes=len(quantized_node_names(result.model)), excluded=sorted(result.excluded),
        kept_fp32=sorted(result.fp32), unquantized=sorted(result.unquantized), check=_short(check),
        evaluate=evaluator_for(job.flavour), evaluator=result.check.evaluator if result.check else "",
        repair=_repair_summary(result.repair), notes=list(result.notes),
        warnings=warnings_ + (result.check.warnings if result.check else []), passthrough=result.passthrough)


def _precision_report(result: Any, job: Any) -> dict[str, Any]:
    return {"precision": job.cfg.precision, "flavour": job.flavour, "high_precision": job.cfg.high_precision,
            "excluded_from_quantization": result.excluded, "kept_fp32": result.fp32,
            "left_unquantized_by_quantizer": result.unquantized,
            "repair": result.repair.to_dict() if result.repair else None,
            "check": result.check.to_dict() if result.check else None, "preparation": result.preparation,
            "notes": result.notes, "passthrough": result.passthrough}


def _short(check: dict[str, Any] | None) -> QuantCheck | None:
    if check is None:
        return None
    keys = ("rel_l2", "cosine", "max_abs", "nonfinite", "signal_rel_l2", "error_to_signal")
    metrics = {k: {m: v[m] for m in keys if m in v} for k, v in check["metrics"].items()}
    # JSON has no infinity: non-finite values become None (the report says what they mean).
    return QuantCheck(check["passed"], clean(check["violations"]), clean(metrics), check["samples"])


def _repair_summary(repair: Any) -> RepairSummary | None:
    if repair is None:
        return None
    return RepairSummary(repair.check.passed, len(repair.steps), list(repair.added), repair.stopped,
                         clean([round(s.check.worst(), 6) for s in repair.steps]))
