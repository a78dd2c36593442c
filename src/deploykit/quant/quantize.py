"""Quantize an FP32 ONNX graph: prepare, calibrate (streaming), place Q/DQ, FP16, check, mixed precision.

:func:`quantize_model` is the whole quantize stage without the artifact store; the stage and the
benchmark call it. Every step that depends on the target flavour asks the job's flavour
(:class:`deploykit.quant.flavours.QuantFlavour`): its opset and pre-processing, the nodes it keeps
in float, who places the Q/DQ nodes, what the float rest runs in, and the evaluator that checks the
result (``tensorrt``: the graph as written, which is what TensorRT computes up to kernel rounding;
``onnxruntime``: what ONNX Runtime's CPU kernels compute at the build's optimization level, since
that is what ships), through :func:`deploykit.graph.run.session_from_onnx`.

The steps live beside it: :mod:`~deploykit.quant.exclusions` (what stays in float, and why),
:mod:`~deploykit.quant.range_choice` (method ``auto``), :mod:`~deploykit.quant.candidates` (one
candidate graph), :mod:`~deploykit.quant.mixed` (the precision patch and the search).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from typing import TYPE_CHECKING, Any

from deploykit.choices import Flavour
from deploykit.config import CALIBRATED, QuantizeConfig
from deploykit.errors import ModelError
from deploykit.quant import exclusions
from deploykit.quant import prepare as g
from deploykit.quant.candidates import build
from deploykit.quant.check import Check, Reference, check
from deploykit.quant.flavours import Placed, QuantFlavour, flavour_for
from deploykit.quant.judge import Judge, Judging, graph_digest
from deploykit.quant.range_choice import Memo, choose_ranges, range_sets, settings, tolerance
from deploykit.quant.ranges import NO_HISTOGRAM, Calibration, RangeSettings, TensorRange, calibrate
from deploykit.quant.reader import SampleStream
from deploykit.quant.reasons import Kept, Reason

if TYPE_CHECKING:
    import onnx

    from deploykit.quant.calib_cache import Arrays, CalibrationCache
    from deploykit.quant.mixed import CacheLookup
    from deploykit.quant.sensitivity import SearchResult

MAX_NONFINITE_FIXES = 4


@dataclass
class Job:
    """What to quantize, how, and from which samples."""

    model: onnx.ModelProto
    cfg: QuantizeConfig
    flavour: Flavour
    samples: SampleStream | None  # None: FP16 without calibration data (weights checked only)
    where: str = "model.onnx"
    ort_level: str = "extended"  # the onnxruntime build level the check predicts
    # 7-bit weights; None: what the flavour resolves for this CPU, as the stage does (the onnxruntime
    # flavour: on without VNNI, where ORT's u8s8 kernels saturate on full-range weights)
    reduce_range: bool | None = None
    task: Callable[[str, int], Any] | None = None  # a Reporter's ``task`` for progress bars
    judging: Judging = field(default_factory=Judging)  # parity's config, data and reference
    search_cache: CacheLookup | None = None  # key -> measurements a previous artifact stored
    calibration_cache: CalibrationCache | None = None  # the samples' identity; statistics earlier artifacts kept
    # what the quantizer placed, by (graph, excluded nodes): it places Q/DQ once per exclusion set,
    # every range set after that only rewrites scales (see candidates.qdq)
    placements: dict[tuple[int, tuple[str, ...]], Placed] = field(default_factory=dict, init=False, repr=False)
    # the float rest's conversions, by (the Q/DQ graph less its activation scales, FP32-kept nodes): a
    # range set that only changes those scales rewrites them in the converted graph (see candidates.finished)
    finishes: dict[tuple[str, tuple[str, ...]], Any] = field(default_factory=dict, init=False, repr=False)
    correction_samples: list[dict[str, Any]] = field(default_factory=list, init=False, repr=False)  # bias correction
    corrected: Any = field(default=None, init=False, repr=False)  # the last BiasCorrection report

    def __post_init__(self) -> None:
        if self.reduce_range is None:
            self.reduce_range = self.target.reduce_range("auto")

    @property
    def target(self) -> QuantFlavour:
        """The flavour the graph is written for (what every flavour-dependent step asks)."""
        return flavour_for(self.flavour)


@dataclass
class Result:
    model: onnx.ModelProto
    reference: onnx.ModelProto  # the FP32 graph the ranges were computed on (tensor names align)
    ranges: dict[str, TensorRange]
    settings: RangeSettings
    excluded: dict[str, Reason]  # nodes kept out of quantization -> why
    fp32: dict[str, Reason]  # nodes kept in FP32 where the rest is FP16 -> why
    check: Check | None
    preparation: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    repair: SearchResult | None = None
    passthrough: bool = False
    unquantized: dict[str, Reason] = field(default_factory=dict)  # compute nodes its placement rules skipped
    range_samples: int = 0  # calibration samples the ranges come from
    check_samples: int = 0  # samples the check ran on (parity's validation samples, else held out of the ranges)
    base: onnx.ModelProto | None = None  # the graph every layer_precisions patch applies to
    layer_precisions: dict[str, str] = field(default_factory=dict)  # the patch in the model (configured or found)
    search_cache: dict[str, Any] | None = None  # what the search measured, for the artifact
    calibration: tuple[str, Arrays] | None = None  # (key, statistics) for the artifact (calib_cache)


def quantize_model(job: Job) -> Result:
    """Run the quantize stage's work; see the module docstring."""
    cfg, flavour = job.cfg, job.target
    if _already_quantized(job):
        return Result(
            job.model,
            job.model,
            {},
            RangeSettings(),
            {},
            {},
            None,
            {},
            [
                "the model already contains quantization nodes: passed through unchanged "
                "(quantize.already_quantized: pass)"
            ],
            passthrough=True,
        )
    flavour.check(cfg.precision)
    _check_int4(job)
    model, prep = flavour.prepare(job.model, cfg, job.where)
    notes = prep.notes
    excluded = exclusions.configured(model, cfg, job.where, notes)
    fp32 = _configured_fp32(model, cfg, job.where)
    model = flavour.preprocess(model, cfg.precision, notes)
    excluded = exclusions.still_present(model, excluded, notes)
    original = model
    if cfg.equalize and cfg.precision in CALIBRATED:
        from deploykit.quant.equalize import equalize

        model, equalized = equalize(model, cfg.equalize_hardswish)
        model = g.infer_shapes(model)  # the rewritten activations' tensors need types to be calibrated
        notes.append(equalized.note())
    calibration, kept = _calibrate(job, model, settings(cfg), notes)
    exclusions.keep_first(excluded, exclusions.after_calibration(model, calibration, cfg, flavour))
    exclusions.keep_first(fp32, _fp16_guard(job, model, calibration.sets["max"]))
    result = _quantize_and_check(job, model, calibration, excluded, fp32, notes, original)
    result.range_samples = calibration.seen - len(calibration.held_out)
    result.calibration = kept
    result.preparation = prep.to_dict()
    result.unquantized = _skipped_by_quantizer(model, result, job)
    return result


def _skipped_by_quantizer(model: onnx.ModelProto, result: Result, job: Job) -> dict[str, Reason]:
    """Compute nodes neither quantized nor excluded by deploykit: the quantizer's placement rules
    left them in high precision (ModelOpt skips convolutions TensorRT would not run faster)."""
    if result.model is model or not any(n.op_type in g.QDQ_OPS for n in result.model.graph.node):
        return {}  # passed through, or FP16 only
    quantized = g.quantized_node_names(result.model)
    shapes = {i.name: tuple(i.dims) for i in model.graph.initializer}
    ops = ("MatMul", "Gemm") if job.cfg.precision == "int4" else exclusions.COMPUTE_OPS
    out = {}
    for node in model.graph.node:
        if node.op_type in ops and node.name not in quantized and node.name not in result.excluded:
            w = shapes.get(node.input[1]) if len(node.input) > 1 else None
            shape = f" (weight {list(w)})" if w else ""
            out[node.name] = Kept.PLACEMENT_RULES(op=node.op_type, shape=shape, tool=job.target.tool)
    return out


def _already_quantized(job: Job) -> bool:
    found = g.quantized_nodes(job.model)
    if not found:
        return False
    if job.cfg.already_quantized == "pass":
        return True
    listed = ", ".join(f"{n} {op}" for op, n in sorted(found.items()))
    raise ModelError(
        f"{job.where}: the model is already quantized ({listed}); refusing to quantize it again",
        hint="give the FP32 model, or set quantize.already_quantized: pass to keep it as it is",
    )


def _check_int4(job: Job) -> None:
    if job.cfg.precision == "int4" and not any(n.op_type in ("MatMul", "Gemm") for n in job.model.graph.node):
        ops = sorted({n.op_type for n in job.model.graph.node})
        raise ModelError(
            f"{job.where}: int4 quantizes MatMul/Gemm weights, and the model has none (its ops: {', '.join(ops[:12])})",
            hint="use --precision int8 or fp8 for this model",
        )


def _configured_fp32(model: onnx.ModelProto, cfg: QuantizeConfig, where: str) -> dict[str, Reason]:
    names = {n.name for n in model.graph.node}
    for name in cfg.keep_fp32_nodes:
        if name not in names:
            raise ModelError(
                f"{where}: quantize.keep_fp32_nodes names {name!r}, which the model does not have",
                hint="`deploykit inspect` lists node names",
            )
    return dict.fromkeys(cfg.keep_fp32_nodes, Kept.FP32_BY_CONFIG())


def _calibrate(
    job: Job, model: onnx.ModelProto, settings: RangeSettings, notes: list[str]
) -> tuple[Calibration, tuple[str, Arrays] | None]:
    """One pass over the samples: min/max (the ``max`` set) and the statistics every other method's
    ranges come from; the first samples held out for the check. Or the statistics an earlier
    artifact kept for the same graph, samples and settings (:mod:`deploykit.quant.calib_cache`).
    Returns them with (their key, their arrays) for this artifact, where they can be reused."""
    if job.samples is None:
        return Calibration({"max": {}}, [], 0), None
    from deploykit.quant import calib_cache

    total = job.samples.limit or 0
    histograms = ("max",) if settings.method in NO_HISTOGRAM else ("max", "histogram")
    validated = bool(job.judging.samples)  # parity's validation data judges: no calibration sample is held out
    hold_out = 0 if validated else _check_count(job.cfg)
    cache = job.calibration_cache
    key = calib_cache.key(cache, model, settings, len(histograms) > 1, hold_out, job.samples.limit) if cache else ""
    result = _reused(job, key, settings, notes) if cache else None
    if result is None:
        task = job.task(f"calibrating ({settings.method})", total) if job.task else contextlib.nullcontext(None)
        with task as advance:
            result = calibrate(
                model,
                job.samples,
                settings,
                histograms,
                hold_out=hold_out,
                bounded=_max_calibrated(model),
                progress=advance,
                expected=job.samples.limit,
            )
    if validated:
        notes.append(
            f"ranges from all {result.seen} calibration samples (the check judges on the validation "
            "samples: none is held out)"
        )
    elif result.held_out:
        notes.append(
            f"ranges from {result.seen - len(result.held_out)} calibration samples; the first "
            f"{len(result.held_out)} are held out for the check"
        )
    else:
        notes.append(f"only {result.seen} calibration samples: the check runs on samples the ranges saw (optimistic)")
    return result, ((key, calib_cache.pack(result)) if key else None)


def _reused(job: Job, key: str, settings: RangeSettings, notes: list[str]) -> Calibration | None:
    """The statistics an earlier artifact filed under ``key``, or None (none, or of another layout)."""
    from deploykit.quant import calib_cache

    assert job.calibration_cache is not None and job.samples is not None
    found = job.calibration_cache.lookup(key)
    if found is None:
        return None
    try:
        result = calib_cache.unpack(found, settings, lambda n: list(itertools.islice(job.samples, n)))
    except (KeyError, ValueError, IndexError, TypeError):  # arrays of another layout: calibrate again
        return None
    job.samples.seen = result.seen  # what the earlier pass read: this run reads only the held-out samples
    notes.append(
        f"calibration statistics reused from an earlier artifact (the same graph, {result.seen} samples "
        "and settings): the samples were not run again"
    )
    return result


def _check_count(cfg: QuantizeConfig) -> int:
    return cfg.check_samples


def _max_calibrated(model: onnx.ModelProto) -> set[str]:
    """Tensors that keep max calibration whatever the method: bounded outputs (Sigmoid, Softmax: a
    clipped probability map loses its confident values) and the model's own outputs, also before
    their Transpose/Reshape/Concat (the onnxruntime flavour quantizes them; clipping one is error in
    the result itself: entropy clipped a box head to rel-L2 20 on the example detector)."""
    return g.through_layout(model, {o.name for o in model.graph.output}, g.bounded_tensors(model))


def _fp16_guard(job: Job, model: onnx.ModelProto, ranges: dict[str, TensorRange]) -> dict[str, Reason]:
    from deploykit.quant import fp16

    if not _uses_fp16(job):
        return {}
    nodes = fp16.overflow_nodes(model, ranges, job.cfg.fp16_limit)
    if nodes and job.cfg.fp16_overflow == "refuse":
        fp16.refuse(nodes)
    return nodes


def _uses_fp16(job: Job) -> bool:
    return job.target.fp16_rest(job.cfg)


def _quantize_and_check(
    job: Job,
    model: onnx.ModelProto,
    calibration: Calibration,
    excluded: dict[str, Reason],
    fp32: dict[str, Reason],
    notes: list[str],
    original: onnx.ModelProto,
) -> Result:
    if calibration.held_out:
        samples = calibration.held_out
    elif job.samples is not None:
        samples = list(itertools.islice(job.samples, _check_count(job.cfg)))
    else:
        samples = _random_samples(model)
    opener = _opener(job)
    memo = Memo(opener)
    judge = _judge(job, original, samples[: job.cfg.check_samples], opener)
    judge.prefetch()  # its FP32 runs overlap the placing and the thresholds
    try:
        if job.target.checks_kernels(job.cfg.precision):
            wrong = _miscomputed(job, model, calibration.sets["max"], excluded, samples[0], notes)
            exclusions.keep_first(excluded, wrong)
        sets = range_sets(job, model, calibration, excluded, samples[0])
    except BaseException:
        judge.cancel()
        raise
    notes.append(f"the check judges on {judge.source}, by parity's tolerances and task checks")
    # the held-out samples' FP32 outputs (before equalization: what must not change), made only when
    # method auto needs them, from the judge's when it judges on those samples
    head = cache(
        lambda: (
            judge.ref
            if judge.reference is original and not job.judging.samples
            else Reference(original, samples[: job.cfg.auto_samples])
        ).head(job.cfg.auto_samples)
    )

    def few(candidate: onnx.ModelProto) -> Check:
        return check(head(), candidate, opener=memo, tolerance=tolerance(job))

    method, ranges = choose_ranges(
        job, model, sets, excluded, fp32, samples[0], few, judge if job.judging.samples else None, notes
    )
    if job.cfg.bias_correction and job.samples is not None and job.cfg.precision in CALIBRATED:
        from deploykit.quant.bias import SAMPLES

        held = len(calibration.held_out)  # calibration samples, never the check's
        job.correction_samples = list(itertools.islice(job.samples, held, held + SAMPLES))
    for _ in range(MAX_NONFINITE_FIXES):
        base = build(job, model, ranges, excluded, fp32=dict(fp32), sample=samples[0])
        result = _mixed_precision(job, model, base, judge, excluded, samples[0], notes)
        if not result.check or not result.check.nonfinite:
            result.fp32, result.notes, result.ranges = fp32, notes, ranges
            result.check_samples = len(judge.samples)
            if job.corrected is not None:
                notes.append(job.corrected.note())
            result.settings = dataclasses.replace(settings(job.cfg), method=method)
            return result
        _fix_nonfinite(job, model, result, fp32, samples[:1], opener)
    raise ModelError(
        "the quantized model still computes NaN/Inf after keeping the offending nodes in FP32",
        hint="set quantize.high_precision: fp32",
    )


def _miscomputed(
    job: Job,
    model: onnx.ModelProto,
    ranges: dict[str, TensorRange],
    excluded: dict[str, Reason],
    sample: dict[str, Any],
    notes: list[str],
) -> dict[str, Reason]:
    """Nodes ONNX Runtime's integer kernels compute wrong on this CPU (:mod:`deploykit.quant.kernel_check`)."""
    from deploykit.quant.candidates import qdq
    from deploykit.quant.kernel_check import miscomputed

    found = miscomputed(g.infer_shapes(qdq(job, model, ranges, sorted(excluded), sample)), job.ort_level)
    if found:
        notes.append(
            f"ONNX Runtime's integer kernels on this CPU compute {len(found)} quantized node(s) wrong "
            f"({', '.join(sorted(found)[:4])}{', …' if len(found) > 4 else ''}): kept in float"
        )
    return found


def _judge(job: Job, model: onnx.ModelProto, held_out: list[dict[str, Any]], opener: Callable[..., Any]) -> Judge:
    """Parity's judge: its validation samples when configured, else the held-out calibration samples."""
    from deploykit.config import ParityConfig, parity_preset

    j = job.judging
    if j.samples:
        samples, source = j.samples, j.source or f"{len(j.samples)} validation samples"
    else:
        samples = held_out
        source = f"{len(held_out)} held-out calibration samples (no validation data: parity runs on random inputs)"
    return Judge(
        j.reference or model,
        samples,
        opener,
        j.parity or ParityConfig(),
        parity_preset(job.cfg),
        job.cfg.precision,
        source,
        early=job.cfg.repair.samples,  # the search's samples: its start is the graph judged here in full
    )


def _random_samples(model: onnx.ModelProto) -> list[dict[str, Any]]:
    """Inputs for checking an FP16 conversion when no calibration data is configured."""
    import numpy as np

    from deploykit.graph.run import session_from_onnx

    rng = np.random.default_rng(0)
    specs = session_from_onnx(model, "as_written").inputs
    return [
        {s.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in s.shape]).astype(s.dtype) for s in specs}
        for _ in range(2)
    ]


def _mixed_precision(
    job: Job,
    model: onnx.ModelProto,
    base: onnx.ModelProto,
    judge: Judge,
    excluded: dict[str, Reason],
    sample: dict[str, Any],
    notes: list[str],
) -> Result:
    """The base graph with the configured layer precisions, judged; the search when it misses parity."""
    cfg = job.cfg
    if cfg.precision not in ("int8", "fp8", "int4"):
        return Result(base, model, {}, RangeSettings(), dict(excluded), {}, judge.check(base), {}, base=base)
    from deploykit.quant import mixed

    plan = mixed.plan(base, cfg, job.target, job.where)
    candidate = mixed.builder(plan, base, model, cfg.precision)(plan.start)
    start_key = graph_digest(candidate)  # the search confirms its states hardest sample first, by its misses
    verdict = judge.check(candidate, key=start_key)
    result = Result(
        candidate,
        model,
        {},
        RangeSettings(),
        dict(excluded),
        {},
        verdict,
        {},
        base=base,
        layer_precisions=dict(plan.start),
    )
    if verdict.passed or verdict.nonfinite or not (cfg.repair.enabled or _search_by_task(job, verdict)):
        return result
    if not cfg.repair.enabled:
        notes.append(
            f"plain {cfg.precision.upper()} missed parity's task check on the validation data: the "
            "mixed-precision search ran (quantize.repair.auto: false turns this off)"
        )
    # the bar's total is the most the search may run: a measurement per group plus its step budget
    total = len(plan.groups) + cfg.repair.max_iterations
    with job.task("mixed-precision search: candidates", total) if job.task else contextlib.nullcontext(None) as advance:
        search, payload = mixed.search(
            plan,
            base,
            model,
            judge,
            cfg,
            job.target,
            job.ort_level,
            sample,
            job.search_cache,
            advance,
            job.task,
            start_key=start_key,
        )
    counts = search.evaluations
    screened = f" ({counts['screened']} of them ranked on the screening graph)" if counts.get("screened") else ""
    notes.append(
        f"mixed-precision search: {search.stopped}; {len(search.patch)} layer group(s) above "
        f"{cfg.precision}; {counts['fresh']} evaluations run{screened}, {counts['cached']} "
        "reused from an earlier artifact's measurements" + _not_run(search.outcome.skipped, cfg.repair.min_saving)
    )
    if counts.get("screen_unavailable"):
        notes.append(
            f"the screening graph could not be opened ({counts['screen_unavailable']}): the ranking ran each "
            "patch on its own graph"
        )
    if search.check.passed and not search.faster_than_top():
        notes.append(_not_faster(search))
    elif search.check.passed and "chosen" in search.speeds:
        notes.append(search.speeds["chosen"].sentence("the passing mix runs at") + " on this CPU")
    return dataclasses.replace(
        result,
        model=search.model,
        check=search.check,
        repair=search,
        layer_precisions=dict(search.patch),
        search_cache=payload,
    )


def _not_run(skipped: list[str], min_saving: float) -> str:
    """The note's clause on the search steps too small a saving left out (``repair.min_saving``)."""
    if not skipped:
        return ""
    return (
        f"; {len(skipped)} step(s) not run ({', '.join(skipped[:3])}{', …' if len(skipped) > 3 else ''}): each "
        f"could save less than {min_saving:.0%} of the estimated latency (repair.min_saving: 0 runs them)"
    )


def _search_by_task(job: Job, verdict: Check) -> bool:
    """Whether the search runs unasked: ``repair.auto``, parity's validation data judges, and a task
    check of it failed (an elementwise miss alone does not start it)."""
    return job.cfg.repair.auto and bool(job.judging.samples) and any(t.get("violations") for t in verdict.tasks)


def _not_faster(search: SearchResult) -> str:
    """The plain statement for a passing mix that is not faster than every layer at the top precision."""
    m = search.measured_ms
    if "chosen" in search.speeds:  # the measurement the stage's CPU speed check reports too
        return (
            f"the mix that passes is not faster than FP32 on this CPU: {search.speeds['chosen'].sentence('it runs')}; "
            "FP32 is as accurate and at least as fast here"
        )
    if "chosen" in m and "fp32" in m:
        return (
            f"the mix that passes is not faster than FP32 on this CPU (measured {m['chosen']:.3g} ms against "
            f"{m['fp32']:.3g} ms): FP32 is as accurate and at least as fast here"
        )
    c = search.costs
    return (
        f"the mix that passes is estimated no faster than every layer at the top precision "
        f"({c.of(search.patch):.3g} vs {c.top:.3g} {c.unit}, {c.method}): that precision does as well"
    )


def _fix_nonfinite(
    job: Job,
    model: onnx.ModelProto,
    result: Result,
    fp32: dict[str, Reason],
    samples: list[dict[str, Any]],
    opener: Callable[..., Any],
) -> None:
    """Find the first node whose output goes NaN/Inf; keep it in FP32 or refuse, naming it."""
    from deploykit.metrics.divergence import diagnose

    report = diagnose(model, result.model, samples, candidate_opener=opener)
    bad = next((t for t in report.tensors if t.nonfinite), None)
    outputs = ", ".join(result.check.nonfinite) if result.check else ""
    if bad is None or not _uses_fp16(job) or job.cfg.fp16_overflow == "refuse" or bad.node in fp32:
        where = f" first at node {bad.node!r} ({bad.op_type}, tensor {bad.tensor!r})" if bad else ""
        raise ModelError(
            f"the quantized model computes NaN/Inf in output(s) {outputs}{where}",
            hint="keep that node in FP32 (quantize.keep_fp32_nodes) or exclude it from quantization",
        )
    fp32[bad.node] = Kept.FP16_NONFINITE(tensor=bad.tensor)


def _opener(job: Job) -> Callable[..., Any]:
    """Sessions over candidates, computed as the target flavour's runtime will."""
    from deploykit.graph.parallel import threads_per_run
    from deploykit.graph.run import session_from_onnx

    return partial(
        session_from_onnx,
        evaluator=job.target.evaluator,
        level=job.ort_level,
        spin=False,
        threads=threads_per_run(),  # the judge runs samples side by side (deploykit.graph.parallel)
        failure="ONNX Runtime cannot run the quantized graph",
        hint="exclude the node it names (quantize.exclude_nodes) or keep it in FP32",
    )
