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
* ``statistics.npz`` — calibration's per-tensor min/max and histograms, filed under a key of the
  graph, the samples and the pass's settings (:mod:`deploykit.quant.calib_cache`): a rerun that
  changes only the tolerances, the method or the search reads them instead of running the samples
  again (arrays only, read through the store's digest check).

For INT8 in the onnxruntime flavour the summary also holds ``cpu_speed``, FP32 vs INT8 timed on
this CPU (:mod:`deploykit.quant.speed`), with a warning when INT8 is not faster.

Skipped for ``precision: fp32``. The check is parity's: its tolerances and task checks, against
parity's reference graph, on the validation samples parity will use when the config has validation
data (so a pass here implies a parity pass, up to the engine's kernel rounding), else on calibration
samples held out of the ranges (``quantize.check_samples``; parity then runs on random inputs and
may disagree), through the evaluator of the target flavour (the summary's ``evaluate``: ``as_written``
or ``onnxruntime``). It is a gate: a quantized model that misses it fails here (the artifact and its
report are kept).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.config import CALIBRATED
from deploykit.config.surface import spelled
from deploykit.errors import BackendUnavailable, ConfigError, ParityFailed
from deploykit.graph.files import load_model, save_model
from deploykit.quant.flavours import flavour_for
from deploykit.record.model import Check, explained
from deploykit.stages.base import Stage, StageContext, Summary
from deploykit.stages.export import MODEL
from deploykit.stages.validation import validation_fingerprint, validation_samples
from deploykit.store.artifacts import Artifact
from deploykit.store.environment import onnxruntime_version, tool_versions
from deploykit.store.jsonio import clean

RANGES = "ranges.json"
BASE = "base.onnx"
SENSITIVITY = "sensitivity.json"
STATISTICS = "statistics.npz"
CACHE = "calibration.cache"
PRECISION = "precision.json"
TRT_CACHE_VERSION = "10.12.0"  # the oldest TensorRT deploykit supports; the cache is for <= 10


@dataclass(frozen=True)
class QuantCheck(Summary):
    """Parity's check of the quantized graph (its tolerances and task checks) on parity's validation
    samples, else on calibration samples held out of the ranges: worst metrics per output."""

    passed: bool = True
    violations: list[dict[str, Any] | str] = field(default_factory=list)  # Verdict reasons as stored (older: sentences)
    metrics: dict[str, dict[str, float | None]] = field(default_factory=dict)  # output -> rel_l2, cosine, ...
    samples: int = 0
    data: str = "held-out calibration samples"  # what the check judged on (parity's validation samples when set)
    tasks: list[dict[str, Any]] = field(default_factory=list)  # parity's task checks: label, metrics, status


@dataclass(frozen=True)
class RepairSummary(Summary):
    """The mixed-precision search (:class:`deploykit.quant.sensitivity.SearchResult`; the full record
    is ``precision.json``'s ``search``)."""

    passed: bool = False  # parity's verdict on the chosen mix, on every judging sample
    iterations: int = 0  # states evaluated after measuring (the base and confirmations included)
    excluded_nodes: list[str] = field(default_factory=list)  # layer groups raised above the stage's precision
    stopped: str = ""  # why it stopped, in words (the sentence of search.Stop's reason)
    worst_rel_l2: list[float | None] = field(default_factory=list)  # per step (None: no rel-L2 limit checked)
    layer_precisions: dict[str, str] = field(default_factory=dict)  # the chosen patch: group -> precision
    evaluations: dict[str, int] = field(default_factory=dict)  # fresh (run now), cached (from an earlier artifact)
    cache_key: str = ""  # what sensitivity.json's measurements are filed under
    judged_on: str = ""  # the samples the search judged on
    worst_ratio: list[float | None] = field(default_factory=list)  # per step: worst measured value / its limit
    stop_codes: list[str] = field(default_factory=list)  # as codes: the stop's, then its qualifications'


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
    layer_precisions: dict[str, str] = field(default_factory=dict)  # the precision patch in model.onnx
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    passthrough: bool = False  # an already quantized model, passed through unchanged
    cpu_speed: CpuSpeed | None = None  # onnxruntime flavour, INT8
    statistics_key: str = ""  # what statistics.npz is filed under (calib_cache.key)


class QuantizeStage(Stage):
    name = "quantize"
    # 2: onnxruntime-flavour exclusions read float tensors; 3: norm scales per channel on axis 0;
    # 4: judged by parity's data and checks, mixed-precision search; 5: auto also tries (floored)
    # entropy and ranks by parity's task metrics on its validation data; 6: every reason (a node kept
    # in higher precision, the search's stop) stored as {code, sentence}; 7: the check's verdict
    # explanations too ({code, sentence, subject, metric})
    version = 7
    inputs = {"model": "onnx", "reference": "onnx"}
    output_kind = "onnx"
    output_roles = ("model",)
    summary_type = QuantizeSummary
    measured = ("cpu_speed", "warnings")  # the CPU speed check, and the warning that quotes it

    def applies(self, ctx: StageContext) -> bool:
        return ctx.config.quantize.enabled

    def preflight(self, ctx: StageContext) -> None:
        """FP16, and every tensorrt-flavour graph, need NVIDIA ModelOpt (the ``quant`` extra): say so
        before any stage runs, in one line (exit 3)."""
        import importlib.util

        c = ctx.config
        flavour = flavour_for(c.quantize.flavour(c.build.backend))
        if flavour.needs_modelopt(c.quantize.precision) and importlib.util.find_spec("modelopt") is None:
            raise BackendUnavailable(
                f"quantize.precision {c.quantize.precision} for the {flavour.name} flavour needs NVIDIA "
                "ModelOpt, which this install lacks",
                hint="pip install 'deploykit[quant]' (INT8 for ONNX Runtime's CPU kernels, --precision int8 "
                "--set quantize.target=onnxruntime, needs only ONNX Runtime)",
            )

    def key_config(self, ctx: StageContext) -> Any:
        c = ctx.config
        q, flavour = c.quantize, flavour_for(c.quantize.flavour(c.build.backend))
        source = _calibration(ctx)
        return {
            "quantize": q,
            "flavour": flavour.name,
            **flavour.key(q, c.build.optimization_level),
            "calibration": source.fingerprint() if source else None,  # SAMPLE_FACTS: these three
            "inputs": c.inputs,
            "dims": c.dims,
            "parity": {
                "default": c.parity.default,
                "outputs": c.parity.outputs,
                "tasks": c.parity.tasks,
                "inconclusive": c.parity.inconclusive,
                "vacuous_below": c.parity.vacuous_below,
            },
            "validation": validation_fingerprint(c),
            "trt_cache": TRT_CACHE_VERSION,
        }

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        return {"onnxruntime": onnxruntime_version(), "modelopt": tool_versions().get("nvidia-modelopt", "absent")}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> QuantizeSummary:
        from deploykit.plugins.quantize import quantize_keeping_plugins
        from deploykit.quant.calib_cache import CalibrationCache
        from deploykit.quant.quantize import Job, quantize_model
        from deploykit.quant.reader import SampleStream

        c = ctx.config
        source = _calibration(ctx)
        stream = SampleStream(source, limit=c.calibration.samples, what="calibration") if source else None
        flavour = flavour_for(c.quantize.flavour(c.build.backend))
        job = Job(
            load_model(inputs["model"].file(MODEL)),
            c.quantize,
            flavour.name,
            stream,
            where=str(inputs["model"].file(MODEL)),
            ort_level=c.build.optimization_level,
            reduce_range=flavour.reduce_range(c.quantize.reduce_range),
            task=ctx.reporter.task,
            judging=_judging(ctx, inputs),
            search_cache=_cache_lookup(ctx),
            calibration_cache=(
                CalibrationCache(_samples_identity(ctx, self), _statistics_lookup(ctx)) if source else None
            ),
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # Plugin nodes are inlined for the quantizer and put back, FP32, afterwards.
            result = quantize_keeping_plugins(job, quantize_model)
        notes = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, UserWarning)))
        speed = cpu_speed(job, result, stream)
        said = speed.warning(job.cfg.precision, _mix(result), _why_not_faster(job)) if speed is not None else None
        if said:
            notes.append(said)
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

    @classmethod
    def checks(cls, artifact: Artifact) -> list[Check]:
        """One per output: its worst rel-L2 on the judging samples (parity's) against the limit, and every violation."""
        check = QuantizeSummary.of(artifact).check
        if check is None:
            return []
        patch = artifact.path / PRECISION
        limits = (json.loads(patch.read_text()).get("check") or {}).get("rel_l2_limits", {}) if patch.is_file() else {}
        violations = _violations(check)
        out, claimed = [], set()
        for name, m in sorted(check.metrics.items()):
            bad = [v for v in violations if v.subject == name]
            claimed.update(bad)
            out.append(
                Check(
                    "quantize",
                    name,
                    "fail" if bad else "pass",
                    not bad,
                    "rel_l2",
                    m.get("rel_l2"),
                    limits.get(name),
                    "<=",
                    **explained(bad, bare=True),
                )
            )
        from deploykit.metrics.tasks import deciding_limit

        for t in check.tasks:  # parity's task checks, each by the limit that decides it
            lim = deciding_limit(t)
            bad = [v for v in violations if v.subject == t["label"]]
            claimed.update(bad)
            out.append(
                Check(
                    "quantize",
                    t["label"],
                    "fail" if bad else t["status"],
                    not bad,
                    lim.get("metric", ""),
                    t["metrics"].get(lim.get("metric")),
                    lim.get("value"),
                    lim.get("op", ""),
                    **explained(bad, bare=True),
                )
            )
        rest = [v for v in violations if v not in claimed]
        if rest or (not check.passed and all(c.passed for c in out)):
            why = explained(rest)
            out.append(
                Check("quantize", "check", "fail", False, message=why["message"] or "failed", codes=why["codes"])
            )
        return out

    def verdict(self, artifact: Artifact) -> None:
        summary = QuantizeSummary.of(artifact)
        check = summary.check
        if check and not check.passed:
            raise ParityFailed(
                f"quantized model misses its tolerance against the FP32 graph on {check.data}: "
                + explained(check.violations[:4])["message"],
                hint=_hint(summary, artifact.file(PRECISION)),
            )


def _violations(check: QuantCheck) -> list[Any]:
    """The check's violations as reasons, each about an output or a task check (``subject``); a summary
    written before verdicts had codes holds sentences, which start with what they are about."""
    from deploykit.metrics.reasons import as_reason

    subjects = [*sorted(check.metrics), *(t["label"] for t in check.tasks)]
    out = []
    for v in map(as_reason, check.violations):
        said_of = v.subject or next((s for s in subjects if v.sentence.startswith(f"{s}: ")), "")
        out.append(dataclasses.replace(v, subject=said_of))
    return out


def _calibration(ctx: StageContext) -> Any:
    """The calibration DataSource, or None (FP16 may run without); int8/fp8/int4 require one."""
    from deploykit.data.sources import DataSource, inputs_from_config

    c = ctx.config
    if c.calibration is None:
        if c.quantize.precision == "fp16":
            return None
        raise ConfigError(
            f"quantize.precision {c.quantize.precision} needs calibration data, and the config has "
            "no 'calibration' section",
            hint="add calibration: {folder: images/} (or files:/function:), or pass "
            + spelled("calibration= (samples, or a folder)", "--calib-data"),
        )
    return DataSource(
        c.calibration, c.base_dir, inputs_from_config(c), what="calibration", max_input_mib=c.limits.max_input_mib
    )


def cpu_speed(job: Any, result: Any, stream: Any) -> Any:
    """INT8 for ONNX Runtime's CPU kernels exists to be faster: time it against FP32 (about a second),
    where the flavour's latencies are measured on this CPU. The real-model bench times it with the call."""
    from deploykit.quant import speed

    if not job.target.measures_latency or job.cfg.precision != "int8" or result.passthrough or stream is None:
        return None
    search = result.repair
    if search is not None and "chosen" in search.speeds and result.model is search.model:
        return search.speeds["chosen"]  # the search timed its answer: one measurement for notes and summary
    if job.task is None:  # no progress to show (a library call)
        return speed.compare(job.model, result.model, stream.first(), job.ort_level)
    with job.task(speed.TIMING_TASK, 1) as advance:  # about a second: say what it is
        found = speed.compare(job.model, result.model, stream.first(), job.ort_level)
        advance()
    return found


def _why_not_faster(job: Any) -> str:
    from deploykit.quant.speed import why_not_faster

    return why_not_faster(job.model)


def _mix(result: Any) -> tuple[int, int] | None:
    """(groups in FP32, groups) when the model is a search's passing mix, else None."""
    found = result.repair
    if found is None or not found.check.passed or not found.patch:
        return None
    return sum(1 for p in found.patch.values() if p == "fp32"), len(found.groups)


def _hint(summary: QuantizeSummary, report: Path) -> str:
    """What to do next; never "enable the search" when it ran and spent its budget."""
    if summary.repair is None:
        return (
            f"see {report}; enable quantize.repair ({spelled('quantize__repair__enabled=True', '--auto-repair')}) "
            "to search for the layers to keep in higher "
            "precision, or exclude the nodes the diagnosis names"
        )
    from deploykit.quant.flavours import flavour_for

    # high_precision sets what the float rest runs in only where the flavour lets it
    rest = bool(summary.flavour) and flavour_for(summary.flavour).configurable_rest
    wider = ", use quantize.high_precision: fp32" if rest else ""
    return (
        f"the mixed-precision search stopped: {summary.repair.stopped}; see its table in {report}. Raise "
        f"quantize.repair.max_iterations / candidates (and max_nodes if you capped it){wider}, or loosen the "
        "tolerance if the best state shown is acceptable"
    )


def _judging(ctx: StageContext, inputs: dict[str, Artifact]) -> Any:
    """Parity's config, validation samples and reference graph: the check and the search judge by them.

    The reference is parity's: the export, unless surgery changed the outputs (a ``cut`` of the
    post-processing), where parity compares against the FP32 graph after surgery, this stage's input."""
    from deploykit.quant.judge import Judging

    found = validation_samples(ctx.config)
    reference, model = inputs["reference"], inputs["model"]
    graph = None
    if reference.digest != model.digest:
        ref_graph = load_model(reference.file(MODEL))
        outputs = [o.name for o in load_model(model.file(MODEL), load_external=False).graph.output]
        graph = ref_graph if [o.name for o in ref_graph.graph.output] == outputs else None
    if found is None:
        return Judging(ctx.config.parity, None, "", graph)
    return Judging(ctx.config.parity, found.samples, f"{len(found.samples)} samples of {found.note}", graph)


def _cache_lookup(ctx: StageContext) -> Any:
    """key -> the search measurements an earlier quantize artifact in the store filed under it."""

    def lookup(key: str) -> dict[str, Any] | None:
        found = _earlier(ctx, SENSITIVITY, lambda s: s.repair is not None and s.repair.cache_key == key)
        if found is None:
            return None
        payload = json.loads(found.read_text(encoding="utf-8"))
        return payload if isinstance(payload, dict) else None

    return lookup


def _statistics_lookup(ctx: StageContext) -> Any:
    """key -> the calibration statistics an earlier quantize artifact in the store filed under it
    (arrays only: nothing in the file is unpickled)."""
    import zipfile

    import numpy as np

    def lookup(key: str) -> dict[str, Any] | None:
        found = _earlier(ctx, STATISTICS, lambda s: s.statistics_key == key)
        if found is None:
            return None
        try:
            with np.load(found, allow_pickle=False) as arrays:
                return {name: arrays[name] for name in arrays.files}
        except (OSError, ValueError, zipfile.BadZipFile):  # not an array file: calibrate again
            return None

    return lookup


def _earlier(ctx: StageContext, name: str, wanted: Any) -> Path | None:
    """File ``name`` of the newest quantize artifact in the store whose summary ``wanted`` accepts.

    Candidates are found by their sealed manifests' typed summaries; the one used is read through
    ``Store.get``, which re-hashes every file against its manifest (an edited cache is refused)."""
    found, _ = ctx.store.scan()  # objects that do not verify are never candidates
    for candidate in reversed(found):  # newest first
        if candidate.manifest.stage != QuantizeStage.name or name not in candidate.manifest.files:
            continue
        if wanted(QuantizeSummary.of(candidate)):
            return ctx.store.get(candidate.digest).file(name)  # verifies every file's digest
    return None


SAMPLE_FACTS = ("calibration", "inputs", "dims")  # the recipe's facts that identify the calibration samples


def _samples_identity(ctx: StageContext, stage: QuantizeStage) -> dict[str, Any]:
    """What identifies the calibration samples, for calibration statistics' key: the recipe key's own
    facts, as the runner made them (the calibration files are digested once a run)."""
    from deploykit.store.hashing import canonical

    recipe = ctx.recipe if ctx.recipe is not None else canonical(stage.key_config(ctx))
    return {name: recipe[name] for name in SAMPLE_FACTS}


def write_artifact(out: Path, result: Any, job: Any, warnings_: list[str]) -> QuantizeSummary:
    """Write model, ranges, cache and precision report into ``out``; return the manifest summary."""
    from deploykit.quant import trt_cache
    from deploykit.quant.prepare import quantized_node_names
    from deploykit.quant.ranges import write_ranges

    save_model(result.model, out / MODEL)
    if result.layer_precisions and result.base is not None:
        save_model(result.base, out / BASE)
    if result.search_cache is not None:
        (out / SENSITIVITY).write_text(json.dumps(clean(result.search_cache), sort_keys=True, allow_nan=False))
    if result.calibration is not None:
        _write_statistics(out / STATISTICS, result.calibration[1])
    samples = job.samples.seen if job.samples is not None else 0
    if result.ranges:
        write_ranges(
            out / RANGES, result.ranges, result.settings, {"samples": samples, "range_samples": result.range_samples}
        )
    if job.cfg.precision == "int8" and job.target.calibration_cache and result.ranges:
        trt_cache.write(out / CACHE, {k: r.amax for k, r in result.ranges.items()}, TRT_CACHE_VERSION)
    report = clean(_precision_report(result, job))
    (out / PRECISION).write_text(json.dumps(report, indent=2, sort_keys=True, allow_nan=False))
    check = result.check.to_dict() if result.check else None
    method = result.settings.method
    if job.cfg.method == "auto" and job.cfg.precision in CALIBRATED and result.ranges:
        method = f"auto ({method})"
    return QuantizeSummary(
        precision=job.cfg.precision,
        flavour=job.flavour,
        method=method,
        samples=samples,
        range_samples=result.range_samples,
        check_samples=result.check_samples,
        quantized_nodes=len(quantized_node_names(result.model)),
        excluded=sorted(result.excluded),
        kept_fp32=sorted(result.fp32),
        unquantized=sorted(result.unquantized),
        check=_short(check),
        evaluate=job.target.evaluator,
        evaluator=result.check.evaluator if result.check else "",
        repair=_repair_summary(result),
        layer_precisions=dict(sorted(result.layer_precisions.items())),
        notes=list(result.notes),
        warnings=warnings_ + ([w.sentence for w in result.check.warnings] if result.check else []),
        passthrough=result.passthrough,
        statistics_key=result.calibration[0] if result.calibration is not None else "",
    )


def _write_statistics(path: Path, arrays: dict[str, Any]) -> None:
    """An .npz (what ``np.load`` reads) deflated at level 1: ``np.savez_compressed``'s default level
    took 0.40 s for ViT-S's 18 MB of histograms (1.4 MB), level 1 0.08 s (1.6 MB)."""
    import zipfile

    import numpy as np

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, value in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(value), allow_pickle=False)


def _precision_report(result: Any, job: Any) -> dict[str, Any]:
    return {
        "precision": job.cfg.precision,
        "flavour": job.flavour,
        "high_precision": job.cfg.high_precision,
        "excluded_from_quantization": _reasons(result.excluded),
        "kept_fp32": _reasons(result.fp32),
        "left_unquantized_by_quantizer": _reasons(result.unquantized),
        "layer_precisions": dict(sorted(result.layer_precisions.items())),
        "base": BASE if result.layer_precisions and result.base is not None else None,
        "search": result.repair.to_dict() if result.repair else None,
        "check": result.check.to_dict() if result.check else None,
        "preparation": result.preparation,
        "notes": result.notes,
        "passthrough": result.passthrough,
    }


def _reasons(kept: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Node -> its reason as stored: ``{"code": ..., "sentence": ...}``."""
    return {name: why.to_dict() for name, why in sorted(kept.items())}


def _short(check: dict[str, Any] | None) -> QuantCheck | None:
    if check is None:
        return None
    keys = ("rel_l2", "cosine", "max_abs", "nonfinite", "signal_rel_l2", "error_to_signal")
    metrics = {k: {m: v[m] for m in keys if m in v} for k, v in check["metrics"].items()}
    # JSON has no infinity: non-finite values become None (the report says what they mean).
    tasks = [{k: t[k] for k in ("label", "metrics", "status", "limits") if k in t} for t in check.get("tasks", [])]
    return QuantCheck(
        check["passed"],
        clean(check["violations"]),
        clean(metrics),
        check["samples"],
        check.get("data") or "held-out calibration samples",
        clean(tasks),
    )


def _repair_summary(result: Any) -> RepairSummary | None:
    search = result.repair
    if search is None:
        return None
    steps = search.outcome.steps
    return RepairSummary(
        passed=search.check.passed,
        iterations=len(steps),
        excluded_nodes=search.added,
        stopped=search.stopped.sentence,
        stop_codes=list(search.stopped.codes),
        worst_rel_l2=clean([_worst_rel_l2(s.score.values) for s in steps]),
        layer_precisions=dict(sorted(search.patch.items())),
        evaluations=dict(search.evaluations),
        cache_key=(result.search_cache or {}).get("key", ""),
        judged_on=search.data,
        worst_ratio=clean([round(s.score.worst, 6) for s in steps]),
    )


def _worst_rel_l2(values: dict[str, float]) -> float | None:
    found = [v for k, v in values.items() if k.endswith(".rel_l2")]
    return round(max(found), 6) if found else None
