"""Model zoo: every example through ``deploykit convert`` at each precision and target flavour, with
the numbers the README publishes, and each quantized row against the same FP32 graph quantized by
ONNX Runtime's ``quantize_static`` and by ModelOpt with their defaults (bench_quantize.py's method).

Per row: passed (parity and gate from ``convert``), the parity evaluator, the configured task
metric, the worst rel-L2 over outputs (candidate vs the FP32 ONNX, worst validation sample), p50/p99
latency and FPS from the gate (batch 1, this CPU), the INT8-vs-FP32 CPU speed-up the quantize stage
measured (onnxruntime flavour), convert time, an unchanged rerun's time, and the nodes kept out of
quantization. One store per example: its FP32 row includes the export; the quantized rows reuse the
example's export and surgery, as a user's second command would.

Baselines run on the quantize stage's own FP32 input with the example's calibration samples and are
judged on its validation samples by the example's own parity checks (elementwise and task):
ORT's output as ONNX Runtime computes it (extended), ModelOpt's as written (FP16 elsewhere).

A second table measures the default ``quantize.high_precision_ops`` (LayerNorm, Softmax kept out of
INT8/FP8) on the MatMul-heavy planner against quantizing them too.

    python bench/zoo.py [--only planner,depth] [--iterations 50]

Prints the Markdown table and writes bench/results/zoo.json and bench/results/zoo.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
RESULTS = ROOT / "bench" / "results"
EX = ROOT / "examples"

FULL = (("fp32", "auto"), ("int8", "onnxruntime"), ("int8", "tensorrt"), ("fp8", "tensorrt"))
CASES: dict[str, tuple[Path, tuple[tuple[str, str], ...]]] = {
    "detector": (EX / "detector" / "deploykit.yaml", FULL[:3]),
    "detector-nms": (EX / "detector" / "deploykit-nms.yaml", FULL[:3]),
    "detector-nms-cut": (EX / "detector" / "deploykit-nms-cut.yaml", FULL[:3]),
    "segmentation": (EX / "segmentation" / "deploykit.yaml", FULL),
    "depth": (EX / "depth" / "deploykit.yaml", FULL),
    "planner": (EX / "planner" / "deploykit.yaml", (*FULL, ("fp16", "tensorrt"))),
    "bev": (EX / "bev" / "deploykit.yaml", FULL[:3]),
}


# -- one row -----------------------------------------------------------------------------------------


def convert_row(
    name: str, config: Path, precision: str, target: str, store: Path, iterations: int
) -> tuple[dict[str, Any], Any]:
    """The row, and the run's result (None when it stopped before the stages finished)."""
    import deploykit

    kwargs = {
        "workdir": store,
        "quantize__precision": precision,
        "quantize__target": target,
        "gate__iterations": iterations,
        "gate__trials": 3,
    }
    row: dict[str, Any] = {"model": name, "precision": precision, "flavour": _flavour(config, precision, target)}
    start = time.perf_counter()
    result, error = _convert(deploykit.convert, config, kwargs)
    row["convert_s"] = round(time.perf_counter() - start, 1)
    row["error"] = error
    if result is None:
        return {**row, "passed": False}, None
    start = time.perf_counter()
    again, _ = _convert(deploykit.convert, config, kwargs)
    row["rerun_s"] = round(time.perf_counter() - start, 2)
    row["rerun_reused"] = again is not None and all(r.status == "reused" for r in again.stages)
    row.update(passed=result.passed and not error, **_numbers(result))
    return row, result


def _convert(fn: Any, config: Path, kwargs: dict[str, Any]) -> tuple[Any, str]:
    from deploykit.errors import DeployKitError

    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return fn(config, **kwargs), ""
        except DeployKitError as e:
            return getattr(e, "result", None), f"{type(e).__name__}: {e.message}"[:300]


def _flavour(config: Path, precision: str, target: str) -> str:
    from deploykit.config import load_config

    if precision == "fp32":
        return "-"
    cfg = load_config(config, {"quantize.precision": precision, "quantize.target": target})
    return cfg.quantize.flavour(cfg.build.backend)


def _numbers(result: Any) -> dict[str, Any]:
    parity, gate = result.parity or {}, result.gate or {}
    onnx = [refs["onnx"]["metrics"]["rel_l2"] for refs in parity.get("outputs", {}).values() if "onnx" in refs]
    out: dict[str, Any] = {
        "evaluator": parity.get("candidate_evaluator", ""),
        "worst_rel_l2": max(onnx) if onnx else None,
        "task": task_summary(parity.get("tasks", [])),
        "fps": gate.get("fps"),
        "p50_ms": (gate.get("latency") or {}).get("p50_ms"),
        "p99_ms": (gate.get("latency") or {}).get("p99_ms"),
    }
    model = result.artifacts.get("model")
    if model is not None and model.manifest.stage == "quantize":
        report = result.report("model", "precision.json")
        excluded = report["excluded_from_quantization"]
        raised = report.get("layer_precisions") or {}
        out["excluded"], out["layer_precisions"] = excluded, raised
        out["excluded_summary"] = _excluded_summary(excluded, raised)
        speed = model.manifest.summary.get("cpu_speed") or {}
        out["cpu_speedup"] = speed.get("speedup")
    return out


def task_summary(tasks: list[dict[str, Any]]) -> str:
    """The task metrics against the FP32 ONNX, one short string."""
    keys = {
        "segmentation": ("miou", "pixel_agreement"),
        "depth": ("abs_rel", "delta1"),
        "trajectory": ("ade", "fde", "top1"),
        "detection": ("matched", "mean_iou", "class_flips"),
    }
    parts = []
    for t in tasks:
        if t["reference"] == "onnx":
            m = t["metrics"]
            parts.append(" ".join(f"{k} {m[k]:.4g}" for k in keys.get(t["kind"], ()) if k in m))
    return "; ".join(parts) or "-"


def _excluded_summary(excluded: dict[str, dict[str, str]], raised: dict[str, str]) -> str:
    """Nodes kept out of quantization by reason (precision.json's reason codes), then the layer groups the
    search (or the config's ``layer_precisions``) raised, by precision."""
    labels = {
        "masking": "masking",
        "high_precision_op": "high_precision_ops",
        "output_tail": "output tail",
        "mixed_ranges": "mixed ranges",
        "kernel_miscomputes": "kernel miscomputes",
    }
    kinds = Counter(labels.get(why["code"], "config") for why in excluded.values())
    kinds.update(f"groups {p} (search)" for p in raised.values())
    return ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "0"


# -- baselines ---------------------------------------------------------------------------------------


def baselines(config: Path, fp32_onnx: Path, precision: str, tmp: Path) -> dict[str, dict[str, Any]]:
    """ORT quantize_static (int8 only) and ModelOpt (int8/fp8), defaults, judged by the config's parity."""
    from functools import partial

    from bench.bench_quantize import ort_default

    from deploykit.graph.run import session_from_onnx

    open_as_written = partial(session_from_onnx, evaluator="as_written")
    calib, valid = _samples(config, "calibration"), _samples(config, "validation")
    runs = {
        "modelopt": (
            lambda: modelopt_default(fp32_onnx, precision, calib, tmp / f"mo_{precision}.onnx"),
            open_as_written,
        )
    }
    if precision == "int8":
        runs["ort"] = (
            lambda: ort_default(fp32_onnx, calib, tmp / "ort_int8.onnx"),
            partial(session_from_onnx, evaluator="onnxruntime", level="extended"),
        )
    out = {}
    for label, (make, opener) in runs.items():
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                out[label] = judge(config, fp32_onnx, make(), opener, valid, precision)
        except Exception as e:  # a tool that cannot quantize this model is a result too
            out[label] = {
                "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:200]
            }
    return out


def modelopt_default(path: Path, mode: str, samples: list[dict], out: Path) -> Path:
    """ModelOpt's ``quantize`` with its defaults; the samples of the most common shape, stacked per input
    (ModelOpt takes one array per input)."""
    from modelopt.onnx.quantization import quantize

    from deploykit.quant.modelopt_guard import ort_patch_guard, quiet

    shapes = Counter(tuple(v.shape for v in s.values()) for s in samples).most_common(1)[0][0]
    same = [s for s in samples if tuple(v.shape for v in s.values()) == shapes]
    data = {name: np.concatenate([s[name] for s in same]) for name in same[0]}
    with ort_patch_guard(), quiet(), contextlib.chdir(out.parent):
        quantize(
            str(path),
            quantize_mode=mode,
            calibration_data=data,
            calibration_eps=["cpu"],
            output_path=str(out),
            log_level="CRITICAL",
        )
    return out


def judge(
    config: Path, fp32_onnx: Path, candidate: Any, opener: Any, valid: list[dict], precision: str
) -> dict[str, Any]:
    from deploykit.config import load_config, parity_preset
    from deploykit.graph.files import load_model
    from deploykit.graph.run import session_from_onnx
    from deploykit.metrics.comparison import Comparison

    cfg = load_config(config, {"quantize.precision": precision})
    reference, cand = session_from_onnx(load_model(fp32_onnx), "as_written"), opener(load_model(Path(candidate)))
    comparison = Comparison(cfg.parity, parity_preset(cfg.quantize), precision)
    for sample in valid:
        comparison.add({"onnx": reference.infer(sample)}, cand.infer(sample))
    report = comparison.report()
    rel = [refs["onnx"]["metrics"]["rel_l2"] for refs in report["outputs"].values()]
    return {
        "passed": report["passed"],
        "worst_rel_l2": max(rel) if rel else None,
        "task": task_summary(report["tasks"]),
        "evaluator": cand.evaluator,
    }


def _samples(config: Path, which: str) -> list[dict[str, np.ndarray]]:
    from deploykit.config import load_config
    from deploykit.data.sources import DataSource, inputs_from_config

    cfg = load_config(config)
    return list(DataSource(getattr(cfg, which), cfg.base_dir, inputs_from_config(cfg), what=which))


def quantize_input(result: Any) -> Path | None:
    """The FP32 ONNX the run's quantize stage read (the surgery output), or None."""
    model = result.artifacts.get("model") if result is not None else None
    if model is None or model.manifest.stage != "quantize":
        return None
    from deploykit.store.artifacts import Store

    return Store(result.workdir).get(model.manifest.parents["model"]).file("model.onnx")


# -- the MatMul-heavy recipe ---------------------------------------------------------------------------


def high_precision_ops_rows(store: Path, iterations: int) -> list[dict[str, Any]]:
    """The planner at INT8 (onnxruntime flavour), with LayerNorm/Softmax kept out of INT8 (the default)
    and quantized too."""
    config = CASES["planner"][0]
    rows = []
    for ops in (["LayerNormalization", "Softmax"], []):
        import deploykit

        kwargs = {
            "workdir": store,
            "quantize__precision": "int8",
            "quantize__target": "onnxruntime",
            "quantize__high_precision_ops": ops,
            "gate__iterations": iterations,
            "gate__trials": 3,
        }
        result, error = _convert(deploykit.convert, config, kwargs)
        numbers = _numbers(result) if result is not None else {}
        rows.append(
            {
                "high_precision_ops": ops or "[] (quantize them)",
                "error": error,
                **{k: numbers.get(k) for k in ("worst_rel_l2", "task", "fps", "cpu_speedup", "excluded_summary")},
            }
        )
    return rows


# -- output ------------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    from deploykit.store.environment import cpu_info, tool_versions

    info = cpu_info()
    return {
        "cpu": info["model"],
        "cores": info["cores"],
        "features": info["features"],
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "tools": {k: v for k, v in tool_versions().items() if k in ("onnxruntime", "torch", "onnx", "nvidia-modelopt")},
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def markdown(
    rows: list[dict[str, Any]], recipe: list[dict[str, Any]], before: dict[str, Any], after: dict[str, Any]
) -> str:
    head = (
        "| model | precision | flavour | passed | evaluator | task metric (vs FP32) | worst rel-L2 | p50 ms | p99 ms "
        "| FPS | INT8/FP32 CPU | convert s | rerun s | excluded | ORT quantize_static | ModelOpt |"
    )
    lines = [head, "|" + "|".join([" --- "] * 16) + "|"]
    for r in rows:
        base = r.get("baselines", {})
        lines.append(
            "| "
            + " | ".join(
                [
                    r["model"],
                    r["precision"],
                    r["flavour"],
                    "yes" if r["passed"] else f"**no**: {_short(r['error'])}",
                    _short(r.get("evaluator", ""), 40),
                    r.get("task", "-"),
                    _fmt(r.get("worst_rel_l2")),
                    _fmt(r.get("p50_ms")),
                    _fmt(r.get("p99_ms")),
                    _fmt(r.get("fps"), 4),
                    _fmt(r.get("cpu_speedup")),
                    _fmt(r.get("convert_s"), 4),
                    _fmt(r.get("rerun_s")),
                    r.get("excluded_summary", "-"),
                    _baseline(base.get("ort")),
                    _baseline(base.get("modelopt")),
                ]
            )
            + " |"
        )
    lines += [
        "",
        "LayerNorm/Softmax on the MatMul-heavy planner (INT8, onnxruntime flavour):",
        "",
        "| quantize.high_precision_ops | worst rel-L2 | task metric | FPS | INT8/FP32 CPU | excluded |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['high_precision_ops']} | {_fmt(r['worst_rel_l2'])} | {r['task'] or '-'} | {_fmt(r['fps'], 4)} | "
        f"{_fmt(r['cpu_speedup'])} | {r['excluded_summary'] or '-'} |"
        for r in recipe
    ]
    lines += [
        "",
        f"Measured {before['date']} on {before['cpu']} ({before['cores']} cores, {', '.join(before['features'])}), "
        f"under load from other jobs (load average {before['load_average'][0]} at the start, "
        f"{after['load_average'][0]} at the end): latencies and FPS are noisy; compare within a row.",
    ]
    return "\n".join(lines) + "\n"


def _baseline(b: dict[str, Any] | None) -> str:
    if not b:
        return "-"
    if "error" in b:
        return f"fails: {_short(b['error'], 60)}"
    return f"{'pass' if b['passed'] else 'fail'}: rel-L2 {_fmt(b['worst_rel_l2'])}; {b['task']}"


def _short(text: str, n: int = 90) -> str:
    text = text.replace("|", "/").replace("\n", " ")
    return text if len(text) <= n else text[: n - 1] + "…"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated example names")
    parser.add_argument("--iterations", type=int, default=50)
    args = parser.parse_args()
    wanted = [n for n in CASES if not args.only or n in args.only.split(",")]
    before, rows, cached = machine(), [], {}
    with tempfile.TemporaryDirectory(prefix="deploykit-zoo-") as tmp:
        for name in wanted:
            config, precisions = CASES[name]
            store = Path(tmp) / name
            for precision, target in precisions:
                print(f"zoo: {name} {precision} {target} …", file=sys.stderr, flush=True)
                row, result = convert_row(name, config, precision, target, store, args.iterations)
                fp32 = quantize_input(result) if precision in ("int8", "fp8") else None
                if fp32 is not None:
                    key = (name, precision, str(fp32))  # both INT8 rows share the FP32 graph and its baselines
                    if key not in cached:
                        cached[key] = baselines(config, fp32, precision, Path(tmp))
                    row["baselines"] = cached[key]
                rows.append(row)
        recipe = high_precision_ops_rows(Path(tmp) / "planner", args.iterations) if "planner" in wanted else []
    after = machine()
    RESULTS.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, recipe, before, after)
    (RESULTS / "zoo.md").write_text(text)
    (RESULTS / "zoo.json").write_text(
        json.dumps(
            {"machine": before, "machine_after": after, "rows": rows, "high_precision_ops": recipe},
            indent=1,
            default=str,
        )
    )
    print(text)


if __name__ == "__main__":
    main()
