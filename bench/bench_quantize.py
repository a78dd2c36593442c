"""Quantization benchmark: accuracy against the tools used directly, the repair loop, CPU speed,
calibration cost. One run, one machine; ratios are what to compare.

1. Accuracy, 256 calibration images, 32 held-out validation images, on three models: the example
   detector as shipped (trained, examples/detector/weights.pt), the same network with random
   weights and BatchNorm statistics taken from image data (the hard case: it amplifies early-layer
   noise), and a wider CNN (64/128/256 channels). Rows: deploykit INT8 (tensorrt and onnxruntime flavours) and FP8, each
   calibration method and the default (auto), against
   ModelOpt's ``quantize`` and ONNX Runtime's ``quantize_static`` called with their defaults.
   TensorRT-bound graphs are evaluated as written (FP16 emulated), ORT-bound graphs as ONNX
   Runtime computes them at optimization level extended. Columns: worst-output rel-L2 and cosine
   against FP32 (worst sample), and error/signal (rel-L2 over how much the output varies with input).
2. Repair: a CNN with an outlier-sensitive layer, plain INT8 then ``repair.enabled``.
3. Speed: onnxruntime-flavour INT8 vs FP32 at batch 1 and 8 (and ORT's own quantize_static
   output), interleaved rounds, median and spread.
4. Calibration cost: wall time and peak RSS of deploykit's streamed calibration (and of
   ``quantize_static`` holding the samples) at 64, 256 and 1024 samples, each in a fresh process.

Prints a table and writes bench/results/quantize.json.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
RESULTS = ROOT / "bench" / "results" / "quantize.json"
CALIB, VALID = 256, 32
METHODS = ("auto", "max", "entropy", "percentile", "mse")
SPEED_ROUNDS, SPEED_ITERS = 5, 40


# -- models ------------------------------------------------------------------------------------------


def export_detector(path: Path, trained: bool) -> Path:
    """The example detector exported with TorchScript: its trained weights, or random weights with
    BatchNorm statistics taken from images (random statistics would leave outputs that barely
    depend on the input)."""
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "detector"))
    from model import build  # examples/detector/model.py

    model = build()
    if trained:
        model.load_state_dict(torch.load(ROOT / "examples" / "detector" / "weights.pt", weights_only=True))
    else:
        x = torch.from_numpy(np.stack([s["images"][0] for s in image_arrays(16, 7, 128, "images")]))
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.momentum = None
                m.reset_running_stats()
        model.train()
        with torch.no_grad():
            model(x)
        model.eval()
    torch.onnx.export(
        model,
        torch.zeros(1, 3, 128, 128),
        str(path),
        input_names=["images"],
        output_names=["boxes", "scores"],
        dynamic_axes={"images": {0: "batch"}},
        opset_version=18,
        dynamo=False,
    )
    return path


def wide_cnn(path: Path, size: int = 96) -> Path:
    """Dense convolutions 3 -> 64 -> 128 (s2) -> 256 (s2) -> 256, Relu, a 1x1 head; He-initialised."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x, cin = [], [], "images", 3
    for i, (cout, stride) in enumerate([(64, 1), (128, 2), (256, 2), (256, 1)]):
        w = rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))
        inits += [
            numpy_helper.from_array(w.astype(np.float32), f"w{i}"),
            numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), f"b{i}"),
        ]
        nodes += [
            helper.make_node(
                "Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1] * 4, strides=[stride] * 2
            ),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
        ]
        x, cin = f"r{i}", cout
    inits += [
        numpy_helper.from_array((rng.standard_normal((16, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32), "wh"),
        numpy_helper.from_array(np.zeros(16, np.float32), "bh"),
    ]
    nodes.append(helper.make_node("Conv", [x, "wh", "bh"], ["features"], name="head"))
    graph = helper.make_graph(
        nodes,
        "wide",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def outlier_cnn(path: Path) -> Path:
    """The repair demo: channel 0 of conv0 is 300x larger (and conv1 reads it 300x weaker)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((32, 3, 3, 3)) * np.sqrt(2 / 27)
    b0 = rng.standard_normal(32) * 0.1
    w0[0] *= 300
    b0[0] = 300.0
    w1 = rng.standard_normal((32, 32, 3, 3)) * np.sqrt(2 / 288)
    w1[:, 0] /= 300
    wh = rng.standard_normal((8, 32, 1, 1)) / np.sqrt(32)
    inits = [
        numpy_helper.from_array(a.astype(np.float32), n)
        for a, n in ((w0, "w0"), (b0, "b0"), (w1, "w1"), (np.zeros(32), "b1"), (wh, "wh"), (np.zeros(8), "bh"))
    ]
    nodes = [
        helper.make_node("Conv", ["images", "w0", "b0"], ["c0"], name="conv0", pads=[1] * 4),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "wh", "bh"], ["features"], name="head"),
    ]
    graph = helper.make_graph(
        nodes,
        "outlier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 64, 64])],
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


# -- data --------------------------------------------------------------------------------------------


def image_arrays(count: int, seed: int, size: int, name: str) -> list[dict[str, np.ndarray]]:
    """Synthetic scenes (calibration/detector/make_images.py) as preprocessed NCHW float32 in [0, 1]."""
    from calibration.detector.make_images import make_image

    rng = np.random.default_rng(seed)
    return [
        {name: (np.asarray(make_image(rng, size), np.float32) / 255.0).transpose(2, 0, 1)[None].copy()}
        for _ in range(count)
    ]


def image_folder(folder: Path, count: int, seed: int, size: int) -> Path:
    import PIL.Image
    from calibration.detector.make_images import write_images

    write_images(folder, count, seed)
    if size != 128:
        for p in folder.iterdir():
            PIL.Image.open(p).resize((size, size)).save(p)
    return folder


# -- accuracy ----------------------------------------------------------------------------------------


def job(model_path: Path, precision: str, flavour: str, samples: list[dict], **cfg: Any) -> Any:
    import onnx

    from deploykit.config import QuantizeConfig
    from deploykit.quant.quantize import Job, quantize_model
    from deploykit.quant.reader import SampleStream

    return quantize_model(
        Job(
            onnx.load(str(model_path)),
            QuantizeConfig(precision=precision, **cfg),
            flavour,
            SampleStream(samples, limit=len(samples)),  # as the stage builds it (limit: calibration.samples)
            reduce_range=_reduce_range(),
        )
    )


def _reduce_range() -> bool:
    from deploykit.quant.ort_flavour import resolve_reduce_range

    return resolve_reduce_range("auto")


def modelopt_default(model_path: Path, mode: str, samples: list[dict], out: Path) -> Path:
    """ModelOpt's ``quantize`` with its defaults (entropy, FP16 rest), the 256 samples as one array."""
    from modelopt.onnx.quantization import quantize

    from deploykit.quant.modelopt_guard import ort_patch_guard, quiet

    name = next(iter(samples[0]))
    data = {name: np.concatenate([s[name] for s in samples])}
    # ModelOpt leaves external-data files (<uuid>.data) in the working directory: keep them in out's folder.
    with ort_patch_guard(), quiet(), contextlib.chdir(out.parent):
        quantize(
            str(model_path),
            quantize_mode=mode,
            calibration_data=data,
            calibration_eps=["cpu"],
            output_path=str(out),
            log_level="CRITICAL",
        )
    return out


def ort_default(model_path: Path, samples: list[dict], out: Path) -> Path:
    """ONNX Runtime's ``quantize_static`` with its defaults (QDQ, int8/int8, per-tensor, MinMax)."""
    from onnxruntime.quantization import CalibrationDataReader, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(samples)

        def get_next(self) -> dict | None:
            return next(self.it, None)

    quantize_static(str(model_path), str(out), Reader())
    return out


def evaluate(fp32: Path, candidate: Any, opener: Any, valid: list[dict]) -> dict[str, float]:
    from deploykit.graph.run import session_from_onnx
    from deploykit.metrics import compare
    from deploykit.quant.check import _signal

    ref, cand = session_from_onnx(fp32, "as_written"), opener(candidate)
    outs = [ref.infer(s) for s in valid]
    got = [cand.infer(s) for s in valid]
    worst_rel, mean_rel, worst_cos, ratio = 0.0, 0.0, 1.0, 0.0
    for name in outs[0]:
        signal = _signal([o[name] for o in outs]) or 1.0
        metrics = [compare(o[name], g[name]) for o, g in zip(outs, got, strict=True)]
        rels = [m["rel_l2"] for m in metrics]
        worst_cos = min([worst_cos] + [m["cosine"] for m in metrics])
        worst_rel, mean_rel = max(worst_rel, max(rels)), max(mean_rel, float(np.mean(rels)))
        ratio = max(ratio, max(rels) / signal)
    return {"rel_l2": worst_rel, "mean_rel_l2": mean_rel, "cosine": worst_cos, "error_to_signal": ratio}


def runs(path: Path, calib: list[dict], tmp: Path) -> list[tuple[str, str, Any, Any]]:
    """(label, precision, make the candidate, evaluator) for one model."""
    from deploykit.config import QuantizeConfig
    from deploykit.graph.run import session_from_onnx

    as_written = partial(session_from_onnx, evaluator="as_written")
    ort_opener = partial(session_from_onnx, evaluator="onnxruntime", level="extended")
    default = QuantizeConfig().method
    out = []
    for precision, flavour, opener in (
        ("int8", "tensorrt", as_written),
        ("int8", "onnxruntime", ort_opener),
        ("fp8", "tensorrt", as_written),
    ):
        for method in METHODS:
            make = partial(lambda p, f, m: job(path, p, f, calib, method=m).model, precision, flavour, method)
            out.append(
                (
                    f"deploykit {precision} {flavour} ({method}){' *' if method == default else ''}",
                    precision,
                    make,
                    opener,
                )
            )
    return out + [
        ("ModelOpt int8 defaults", "int8", lambda: modelopt_default(path, "int8", calib, tmp / "mo8.onnx"), as_written),
        ("ORT quantize_static defaults", "int8", lambda: ort_default(path, calib, tmp / "ort8.onnx"), ort_opener),
        ("ModelOpt fp8 defaults", "fp8", lambda: modelopt_default(path, "fp8", calib, tmp / "mo_fp8.onnx"), as_written),
    ]


def accuracy(models: dict[str, tuple[Path, int]], tmp: Path) -> list[dict[str, Any]]:
    rows = []
    for model_name, (path, size) in models.items():
        calib, valid = image_arrays(CALIB, 0, size, "images"), image_arrays(VALID, 1000, size, "images")
        print(f"accuracy: {model_name} …", file=sys.stderr, flush=True)
        for label, precision, make, opener in runs(path, calib, tmp):
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):  # ORT's calibrators print per batch
                candidate = make()
            seconds = time.perf_counter() - start
            rows.append(
                {
                    "model": model_name,
                    "method": label,
                    "precision": precision,
                    "seconds": round(seconds, 2),
                    **evaluate(path, candidate, opener, valid),
                }
            )
    return rows


# -- repair ------------------------------------------------------------------------------------------


def repair_demo(tmp: Path) -> dict[str, Any]:
    from deploykit.config import RepairConfig

    path = outlier_cnn(tmp / "outlier.onnx")
    calib = image_arrays(64, 0, 64, "images")
    plain = job(path, "int8", "tensorrt", calib)
    start = time.perf_counter()
    fixed = job(path, "int8", "tensorrt", calib, repair=RepairConfig(enabled=True))
    return {
        "plain_rel_l2": plain.check.worst(),
        "plain_passed": plain.check.passed,
        "repaired_rel_l2": fixed.check.worst(),
        "repaired_passed": fixed.check.passed,
        "iterations": len(fixed.repair.outcome.steps),
        "excluded": fixed.repair.added,
        "per_step_rel_l2": [s.score.values.get("features.rel_l2") for s in fixed.repair.outcome.steps],
        "seconds": round(time.perf_counter() - start, 2),
    }


# -- speed -------------------------------------------------------------------------------------------


def speed(models: dict[str, tuple[Path, int]], tmp: Path) -> list[dict[str, Any]]:
    import onnx
    import onnxruntime as ort

    from deploykit.graph.run import session_options

    rows = []
    for model_name, (path, size) in models.items():
        calib = image_arrays(64, 0, size, "images")
        stem = "".join(c if c.isalnum() else "_" for c in model_name)
        q = tmp / f"{stem}-int8.onnx"
        onnx.save(job(path, "int8", "onnxruntime", calib).model, str(q))
        plain = ort_default(path, calib, tmp / f"{stem}-ortdefault.onnx")
        sessions = {
            k: ort.InferenceSession(str(p), session_options("extended"), providers=["CPUExecutionProvider"])
            for k, p in (("fp32", path), ("deploykit_int8", q), ("ort_default_int8", plain))
        }
        for batch in (1, 8):
            x = {"images": np.random.default_rng(0).random((batch, 3, size, size), dtype=np.float32)}
            times: dict[str, list[float]] = {k: [] for k in sessions}
            for _ in range(SPEED_ROUNDS):  # interleaved: VM speed drifts between rounds
                for k, s in sessions.items():
                    s.run(None, x)
                    start = time.perf_counter()
                    for _ in range(SPEED_ITERS):
                        s.run(None, x)
                    times[k].append((time.perf_counter() - start) / SPEED_ITERS * 1000)
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append(
                {
                    "model": model_name,
                    "batch": batch,
                    "ms": med,
                    "spread": {k: (min(v), max(v)) for k, v in times.items()},
                    "speedup_deploykit": med["fp32"] / med["deploykit_int8"],
                    "speedup_ort_default": med["fp32"] / med["ort_default_int8"],
                }
            )
    return rows


# -- calibration cost --------------------------------------------------------------------------------

CALIB_CHILD = r"""
import json, sys, time
sys.path[:0] = [sys.argv[1] + "/src", sys.argv[1]]
import numpy as np, onnx
from deploykit.data.sources import DataConfig, DataSource, InputInfo, Preprocess
from deploykit.quant.prepare import bounded_tensors, prepare
from deploykit.quant.ranges import RangeSettings, collect_ranges
from deploykit.quant.reader import SampleStream
model, _ = prepare(onnx.load(sys.argv[2]), 19, "m")
which, folder, n = sys.argv[3], sys.argv[4], int(sys.argv[5])
src = DataSource(DataConfig(folder=folder, samples=n, preprocess=Preprocess(resize=(128, 128))), None,
                 [InputInfo("images", ("batch", 3, 128, 128), "float32")], "calibration")
import os, threading
import deploykit.quant.ranges, onnxruntime.quantization  # imports before the baseline


def rss_mb():  # resident memory now (ru_maxrss keeps the import-time peak and hides later growth)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


peak, stop = [rss_mb()], threading.Event()


def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], rss_mb())
        time.sleep(0.002)


base = rss_mb()
threading.Thread(target=sample, daemon=True).start()
start = time.perf_counter()
if which == "deploykit":
    collect_ranges(model, SampleStream(src), RangeSettings(sys.argv[6]), bounded=bounded_tensors(model))
else:
    from onnxruntime.quantization import CalibrationDataReader, quantize_static
    samples = list(src)  # what ORT's examples do: the data set in memory
    class R(CalibrationDataReader):
        def __init__(self): self.it = iter(samples)
        def get_next(self): return next(self.it, None)
    onnx.save(model, "/tmp/_calib_in.onnx")
    quantize_static("/tmp/_calib_in.onnx", "/tmp/_calib_out.onnx", R())
seconds = time.perf_counter() - start
stop.set()
time.sleep(0.01)
print(json.dumps({"seconds": seconds, "peak_mb": peak[0], "growth_mb": peak[0] - base}))
"""


def calibration_cost(detector: Path, tmp: Path) -> list[dict[str, Any]]:
    folder = image_folder(tmp / "calib1024", 1024, 0, 128)
    rows = []
    for n in (64, 256, 1024):
        for which, method in (
            ("deploykit", "max"),
            ("deploykit", "percentile"),
            ("deploykit", "entropy"),
            ("ort_quantize_static", "minmax"),
        ):
            print(f"calibration cost: {which} {method} {n} …", file=sys.stderr, flush=True)
            proc = subprocess.run(
                [sys.executable, "-c", CALIB_CHILD, str(ROOT), str(detector), which, str(folder), str(n), method],
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-2000:])
            rows.append({"tool": which, "method": method, "samples": n, **json.loads(proc.stdout.splitlines()[-1])})
    return rows


# -- report ------------------------------------------------------------------------------------------


def table(results: dict[str, Any]) -> str:
    lines = [
        "## Accuracy vs FP32 (256 calibration images, 32 validation images; worst output; rel-L2 and "
        "cosine on the worst sample, mean rel-L2 over samples; * = deploykit's default method)",
        "",
        "| model | method | rel-L2 worst | rel-L2 mean | cosine | error/signal | time s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["accuracy"]:
        lines.append(
            f"| {r['model']} | {r['method']} | {r['rel_l2']:.4f} | {r['mean_rel_l2']:.4f} | "
            f"{r['cosine']:.5f} | {r['error_to_signal']:.3f} | {r['seconds']:.1f} |"
        )
    rep = results["repair"]
    lines += [
        "",
        "## Repair (outlier-sensitive CNN, tensorrt INT8)",
        "",
        f"plain INT8 rel-L2 {rep['plain_rel_l2']:.4f} (passed: {rep['plain_passed']}); after repair "
        f"{rep['repaired_rel_l2']:.4f} (passed: {rep['repaired_passed']}) in {rep['iterations']} iterations, "
        f"raised {', '.join(rep['excluded'])}; "
        f"per step {[round(v, 4) for v in rep['per_step_rel_l2'] if v is not None]}",
    ]
    lines += [
        "",
        "## CPU speed, onnxruntime flavour (ORT extended, median of interleaved rounds)",
        "",
        "| model | batch | FP32 ms | deploykit INT8 ms | ORT default INT8 ms "
        "| speedup deploykit | speedup ORT default |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["speed"]:
        ms = r["ms"]
        warn = "" if r["speedup_deploykit"] > 1.05 else " (WARNING: INT8 not faster)"
        lines.append(
            f"| {r['model']} | {r['batch']} | {ms['fp32']:.2f} | {ms['deploykit_int8']:.2f} | "
            f"{ms['ort_default_int8']:.2f} | {r['speedup_deploykit']:.2f}x{warn} | {r['speedup_ort_default']:.2f}x |"
        )
    lines += [
        "",
        "## Calibration cost (example detector, fresh process each)",
        "",
        "| tool | method | samples | seconds | peak RSS MB | growth over baseline MB |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["calibration"]:
        lines.append(
            f"| {r['tool']} | {r['method']} | {r['samples']} | {r['seconds']:.1f} | {r['peak_mb']:.0f} | "
            f"{r['growth_mb']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    from deploykit.store.environment import cpu_info, tool_versions

    logging.getLogger().setLevel(logging.ERROR)  # ORT's quantize_static asks for pre-processing on every call
    tmp = Path(tempfile.mkdtemp(prefix="deploykit-bench-q-"))
    models = {
        "detector (example, trained)": (export_detector(tmp / "det.onnx", trained=True), 128),
        "detector (random weights)": (export_detector(tmp / "det_random.onnx", trained=False), 128),
        "wide CNN 64/128/256": (wide_cnn(tmp / "wide.onnx"), 96),
    }
    results: dict[str, Any] = {"machine": cpu_info(), "tools": tool_versions(), "reduce_range": _reduce_range()}
    results["accuracy"] = accuracy(models, tmp)
    print("repair …", file=sys.stderr, flush=True)
    results["repair"] = repair_demo(tmp)
    print("speed …", file=sys.stderr, flush=True)
    results["speed"] = speed({k: models[k] for k in ("detector (example, trained)", "wide CNN 64/128/256")}, tmp)
    results["calibration"] = calibration_cost(models["detector (example, trained)"][0], tmp)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True, default=str))
    print(table(results))
    for r in results["speed"]:
        if r["speedup_deploykit"] <= 1.05:
            print(
                f"WARNING: {r['model']} batch {r['batch']}: onnxruntime-flavour INT8 is not faster than FP32 "
                f"({r['speedup_deploykit']:.2f}x)"
            )


if __name__ == "__main__":
    main()
