#!/usr/bin/env python3
"""The GPU check: on a machine with TensorRT and an NVIDIA GPU, build, verify and time real engines.

    python scripts/gpu_check.py --json build/gpu-check.json     (or: make gpu-check)

What it runs, each as one row of the table and of the JSON report:

- a small conv net (dynamic batch 1..8) built with the tensorrt backend in FP32, FP16 (casts in the
  ONNX), INT8 and FP8 (Q/DQ from NVIDIA ModelOpt, or ONNX Runtime's quantizer for INT8 when ModelOpt
  is absent); each engine is compared with ONNX Runtime on the CPU running the same graph at batch
  1, 4 and 8, and timed engine-only and end to end (CUDA graph replay when capture works);
- the example detector through ``deploykit.convert(..., build__backend="tensorrt")`` (export,
  build, parity, gate), then its exported ONNX in FP16/INT8/FP8 through the backend directly;
- the timing cache: a rebuild seeded with the first build's cache, with error_on_timing_cache_miss;
- the error paths that need real TensorRT: an unsupported op, a truncated plan, a plan recorded for
  another TensorRT version, a profile naming an unknown input, a missing plugin library.

Exit status: 0 all rows passed, 1 a row failed, 3 TensorRT or a GPU is missing (nothing was run).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # run from a checkout without installing

from deploykit.backends.tensorrt import TensorRTBackend, profiles_from_config  # noqa: E402
from deploykit.config import BuildConfig, TensorRTOptions  # noqa: E402
from deploykit.errors import DeployKitError  # noqa: E402
from deploykit.graph.run import session_from_onnx  # noqa: E402

PROFILE = {"x": ((1, 3, 64, 64), (4, 3, 64, 64), (8, 3, 64, 64))}
TOLERANCE = {"fp32": 5e-3, "fp16": 5e-3, "int8": 5e-2, "fp8": 5e-2}  # rel-L2 vs ORT on the same graph
DETECTOR = REPO / "examples" / "detector" / "deploykit.yaml"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    status = TensorRTBackend().availability()
    if not status.available:
        print(f"gpu-check: nothing was run: {status.reason}", file=sys.stderr)
        write_json(args.json, {"status": "unavailable", "reason": status.reason, "rows": []})
        return 3
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = environment_rows()
    rows += precision_rows(work / "conv", conv_net(work / "conv.onnx"), PROFILE, args)
    rows += detector_rows(work / "detector", args)
    rows += [timing_cache_row(work / "cache")]
    rows += error_rows(work / "errors")
    print_table(rows)
    failed = [r for r in rows if r["status"] == "fail"]
    write_json(args.json, {"status": "failed" if failed else "passed", "tensorrt": status.version, "rows": rows})
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, help="write the report here")
    p.add_argument("--workdir", type=Path, help="keep models and engines here (default: a temporary folder)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iterations", type=int, default=200)
    return p.parse_args(argv)


def write_json(path: Path | None, report: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2, default=str))
        print(f"gpu-check: report written to {path}")


def row(case: str, status: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"case": case, "status": status, "detail": detail, **extra}


def guarded(case: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one case; an unexpected exception is a failed row, never a crash of the whole check."""
    try:
        return fn()
    except DeployKitError as e:
        return row(case, "fail", f"{type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001 - report it and keep checking the rest
        return row(case, "fail", f"{type(e).__name__}: {e}", traceback=traceback.format_exc())


def environment_rows() -> list[dict[str, Any]]:
    from deploykit import doctor

    keep = ("TensorRT", "cuda-python", "CUDA driver", "GPU", "plugin", "onnxruntime", "ModelOpt")
    return [row(f"env: {r.component}", "info", r.detail) for r in doctor.collect().rows
            if r.component.startswith(keep)]


# -- models --------------------------------------------------------------------------------------------

def conv_net(path: Path) -> Path:
    """Three convolutions, wide enough for ModelOpt to quantize them; dynamic batch."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weight(name: str, shape: tuple[int, ...]) -> Any:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 64, 64])],
        [weight("w1", (32, 3, 3, 3)), weight("w2", (64, 32, 3, 3)), weight("w3", (16, 64, 1, 1))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def variant(model: Path, precision: str, out: Path, calibration: dict[str, np.ndarray]) -> tuple[Path | None, str]:
    """The model in ``precision`` (FP16 casts or Q/DQ), or (None, why it cannot be made here)."""
    if precision == "fp32":
        return model, "as exported"
    if precision == "fp16":
        try:
            import onnx
            from onnxconverter_common import float16
        except ImportError as e:
            return None, f"onnxconverter-common is not installed ({e})"
        onnx.save(float16.convert_float_to_float16(onnx.load(str(model)), keep_io_types=True), str(out))
        return out, "FP16 with FP32 I/O (onnxconverter-common)"
    try:
        from modelopt.onnx.quantization import quantize
    except ImportError as e:
        if precision == "fp8":
            return None, f"ModelOpt is not installed ({e}); pip install 'deploykit[quant]'"
        return ort_int8(model, out, calibration), "INT8 Q/DQ (onnxruntime quantizer; ModelOpt absent)"
    quantize(str(model), quantize_mode=precision, calibration_data=calibration, calibration_method="max",
             calibration_eps=["cpu"], output_path=str(out), log_level="ERROR")
    return out, f"{precision.upper()} Q/DQ (ModelOpt, max-abs calibration on random data)"


def ort_int8(model: Path, out: Path, calibration: dict[str, np.ndarray]) -> Path:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            n = len(next(iter(calibration.values())))
            self._it = iter([{k: v[i:i + 1] for k, v in calibration.items()} for i in range(n)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    quantize_static(str(model), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    return out


def random_feeds(profiles: dict[str, Any], which: int, dtypes: dict[str, str], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(shapes[which]).astype(dtypes.get(n, "float32")) for n, shapes in profiles.items()}


# -- engines --------------------------------------------------------------------------------------------

def precision_rows(folder: Path, model: Path, profiles: dict[str, Any], args: argparse.Namespace,
                   label: str = "conv") -> list[dict[str, Any]]:
    folder.mkdir(parents=True, exist_ok=True)
    calibration = {n: np.concatenate([random_feeds(profiles, 2, {}, s)[n] for s in range(4)]) for n in profiles}
    rows = []
    for precision in ("fp32", "fp16", "int8", "fp8"):
        case = f"{label} {precision}"
        if precision == "fp8" and not fp8_capable():
            rows.append(row(case, "skip", "FP8 needs compute capability 8.9+ (Ada, Hopper, Blackwell)"))
            continue
        made, how = variant(model, precision, folder / f"{precision}.onnx", calibration)
        if made is None:
            rows.append(row(case, "skip", how))
            continue
        rows.append(guarded(case, lambda c=case, m=made, p=precision, h=how: engine_row(
            c, m, profiles, folder / c.replace(" ", "-"), p, h, args)))
    return rows


def fp8_capable() -> bool:
    from deploykit.backends.trt_cuda import probe_driver

    gpus = probe_driver().gpus
    return bool(gpus) and tuple(int(v) for v in gpus[0].compute_capability.split(".")) >= (8, 9)


def engine_row(case: str, model: Path, profiles: dict[str, Any], out: Path, precision: str, how: str,
               args: argparse.Namespace) -> dict[str, Any]:
    backend = TensorRTBackend()
    summary = backend.build(model, BuildConfig(backend="tensorrt"), out, profiles=profiles)
    session = backend.load(out)
    reference = session_from_onnx(model, "onnxruntime", level="disabled")  # the same graph as written, on the CPU
    dtypes = {s.name: s.dtype for s in session.inputs}
    errors = {}
    for which, label in ((0, "min"), (1, "opt"), (2, "max")):
        feeds = random_feeds(profiles, which, dtypes, seed=which)
        got, want = session.infer(feeds), reference.infer(feeds)
        errors[label] = max(rel_l2(got[n], want[n]) for n in want)
    opt = random_feeds(profiles, 1, dtypes, seed=7)
    engine_ms = percentiles(session.engine_timed_runner(opt), args)
    runner = dict(session.runner_info)
    e2e_ms = percentiles(session.timed_runner(opt), args)
    session.close()
    worst = max(errors.values())
    ok = worst <= TOLERANCE[precision]
    detail = (f"{how}; rel-L2 vs ORT CPU {worst:.2e} (limit {TOLERANCE[precision]:.0e}); engine p50 "
              f"{engine_ms['p50']:.3f} ms ({runner.get('mode')}), end-to-end p50 {e2e_ms['p50']:.3f} ms")
    return row(case, "pass" if ok else "fail", detail, rel_l2=errors, engine_ms=engine_ms, end_to_end_ms=e2e_ms,
               runner=runner, build_seconds=summary["build_seconds"], plan_bytes=summary["plan_bytes"],
               inspector=summary["inspector"], tf32=summary["settings"]["tf32"])


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


def percentiles(run: Callable[[], None], args: argparse.Namespace) -> dict[str, float]:
    for _ in range(args.warmup):
        run()
    times = []
    for _ in range(args.iterations):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    p50, p90, p99 = np.percentile(times, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(np.mean(times))}


# -- the example detector --------------------------------------------------------------------------------

def detector_rows(folder: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    if not DETECTOR.is_file():
        return [row("detector", "skip", f"{DETECTOR} not found")]
    try:
        from deploykit import convert
    except ImportError as e:
        return [row("detector", "skip", f"deploykit.convert is not importable ({e})")]
    first = guarded("detector convert (tensorrt)", lambda: convert_row(convert, folder))
    rows = [first]
    if first.get("model"):
        from deploykit.config import load_config

        profiles = profiles_from_config(load_config(DETECTOR))
        rows += precision_rows(folder / "variants", Path(first["model"]), profiles, args, label="detector")
    return rows


def convert_row(convert: Callable[..., Any], folder: Path) -> dict[str, Any]:
    """The full pipeline on the detector with the tensorrt backend: export, build, parity vs ORT, gate."""
    from deploykit.stages.export import MODEL

    case = "detector convert (tensorrt)"
    try:
        result = convert(DETECTOR, workdir=folder / "store", report_dir=folder / "reports", build__backend="tensorrt")
    except DeployKitError as e:
        result = getattr(e, "result", None)
        model = str(result.artifacts["model"].file(MODEL)) if result is not None and "model" in result.artifacts else ""
        return row(case, "fail", f"{type(e).__name__}: {e}", model=model)
    gate, parity = result.gate or {}, result.parity or {}
    detail = f"parity and gate passed; {gate.get('fps', 0):.1f} FPS at batch {gate.get('batch', '?')}"
    return row(case, "pass" if result.passed else "fail", detail, model=str(result.artifacts["model"].file(MODEL)),
               parity=parity, gate=gate)


# -- timing cache ------------------------------------------------------------------------------------------

def timing_cache_row(folder: Path) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        folder.mkdir(parents=True, exist_ok=True)
        model, backend = conv_net(folder / "m.onnx"), TensorRTBackend()
        first = backend.build(model, BuildConfig(backend="tensorrt"), folder / "a", profiles=PROFILE,
                              timing_cache_out=folder / "first.cache")
        cache = (folder / "first.cache").read_bytes()
        strict = BuildConfig(backend="tensorrt", tensorrt=TensorRTOptions(error_on_timing_cache_miss=True))
        second = backend.build(model, strict, folder / "b", profiles=PROFILE, timing_cache=cache,
                               timing_cache_out=folder / "second.cache")
        ok = bool(cache) and second["timing_cache"].get("reused") is True
        return row("timing cache reuse", "pass" if ok else "fail",
                   f"{len(cache)} bytes; first build {first['build_seconds']:.1f} s, seeded rebuild with "
                   f"error_on_timing_cache_miss {second['build_seconds']:.1f} s; {second['timing_cache']}")

    return guarded("timing cache reuse", run)


# -- error paths on real TensorRT ---------------------------------------------------------------------------

def error_rows(folder: Path) -> list[dict[str, Any]]:
    from deploykit.backends.trt_compat import EngineIncompatible
    from deploykit.errors import ArtifactCorrupt, ConfigError, ModelError

    folder.mkdir(parents=True, exist_ok=True)
    backend, model = TensorRTBackend(), conv_net(folder / "m.onnx")
    def reference_engine() -> dict[str, Any]:
        backend.build(model, BuildConfig(backend="tensorrt"), folder / "engine", profiles=PROFILE)
        return row("error cases: reference engine", "pass", "built (the truncated/tampered copies start from it)")

    built = guarded("error cases: reference engine", reference_engine)
    cases: list[tuple[str, Callable[[], Any], type, str]] = [
        ("error: unsupported op", lambda: backend.build(with_custom_op(model, folder / "custom.onnx"),
                                                        BuildConfig(backend="tensorrt"), folder / "c", profiles=PROFILE),
         ModelError, "DeployKitNoSuchOp"),
        ("error: unknown profile input", lambda: backend.build(model, BuildConfig(backend="tensorrt"), folder / "d",
                                                               profiles={"images": PROFILE["x"]}), ConfigError, "images"),
        ("error: missing plugin library", lambda: backend.build(
            model, BuildConfig(backend="tensorrt", plugins=(str(folder / "libmissing.so"),)), folder / "e",
            profiles=PROFILE), ConfigError, "does not exist"),
    ]
    if built["status"] == "pass":
        cases += [
            ("error: truncated plan", lambda: backend.load(tampered(folder, "truncated", truncate=True)),
             ArtifactCorrupt, "truncated"),
            ("error: plan from another TensorRT", lambda: backend.load(tampered(folder, "other-trt", tensorrt="10.12.0.1")),
             EngineIncompatible, "built with TensorRT 10.12.0.1"),
            ("error: plan from another GPU", lambda: backend.load(tampered(folder, "other-gpu", compute_capability="1.0")),
             EngineIncompatible, "compute capability"),
        ]
    return [built] + [expect(*case) for case in cases]


def with_custom_op(model: Path, out: Path) -> Path:
    import onnx
    from onnx import helper

    m = onnx.load(str(model))
    m.graph.node[-1].output[0] = "y_pre"
    m.graph.node.append(helper.make_node("DeployKitNoSuchOp", ["y_pre"], ["y"], name="no_such_op", domain="deploykit.test"))
    m.opset_import.append(helper.make_opsetid("deploykit.test", 1))
    onnx.save(m, str(out))
    return out


def tampered(folder: Path, name: str, *, truncate: bool = False, **meta: str) -> Path:
    """A copy of the reference engine with a truncated plan or edited engine.json fields."""
    target = folder / name
    shutil.copytree(folder / "engine", target)
    if truncate:
        plan = target / "engine.plan"
        plan.write_bytes(plan.read_bytes()[: plan.stat().st_size // 2])
    if meta:
        record = json.loads((target / "engine.json").read_text())
        (target / "engine.json").write_text(json.dumps({**record, **meta}))
    return target


def expect(case: str, fn: Callable[[], Any], error: type, text: str) -> dict[str, Any]:
    try:
        fn()
    except error as e:
        ok = text in str(e)
        return row(case, "pass" if ok else "fail", f"{type(e).__name__}: {str(e).splitlines()[0]}")
    except Exception as e:  # noqa: BLE001
        return row(case, "fail", f"expected {error.__name__}, got {type(e).__name__}: {e}")
    return row(case, "fail", f"expected {error.__name__}, nothing was raised")


def print_table(rows: list[dict[str, Any]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for r in rows:
            print(f"{r['status']:5}  {r['case']:36}  {r['detail']}")
        return
    table = Table(title="deploykit gpu-check")
    for column in ("case", "status", "detail"):
        table.add_column(column, overflow="fold")
    colour = {"pass": "green", "fail": "red", "skip": "yellow", "info": "dim"}
    for r in rows:
        table.add_row(r["case"], f"[{colour.get(r['status'], 'white')}]{r['status']}[/]", r["detail"])
    Console(width=200).print(table)


if __name__ == "__main__":
    sys.exit(main())
