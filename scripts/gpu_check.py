#!/usr/bin/env python3
"""The GPU check: everything that can run on this machine's GPU, in one command, inside a time budget.

    python scripts/gpu_check.py --out build/gpu-check        (or: make gpu-check)

Sections, in order of what matters most (each a list of rows in the table and the report; a section
that cannot run here is one ``skip`` row saying why, and a section that would overrun the time budget
is skipped the same way):

1. environment: doctor's rows (driver, GPU, CUDA versions, TensorRT, cuda-python, plugins);
2. plugin kernels (needs nvcc, cmake, a GPU): CUDA vs the CPU reference, time and bandwidth against
   the HBM floor (``plugins/tools/gpu_check.sh``);
3. with TensorRT: a conv net built in FP32/FP16/INT8/FP8 through the backend, each engine against ONNX
   Runtime on the CPU (rel-L2) and timed; INT8/FP8 Q/DQ come from the project's own quantize stage
   (``deploykit.quantize``, tensorrt flavour), ONNX Runtime's quantizer with symmetric ranges and
   unquantized biases (TensorRT's parser rejects an INT32 bias DequantizeLinear) only where the stage
   cannot run;
4. with TensorRT: two examples (detector, bev) through ``deploykit.convert(..., build.backend=tensorrt)``
   in FP32/FP16/INT8/FP8: export, quantize, build, parity against ONNX Runtime, gate timing;
5. profiling: per-layer profiles with the roofline (TensorRT engines by precision, or ONNX Runtime's
   CUDA provider without TensorRT), and the CPU profile of the same model;
6. with TensorRT: timing-cache reuse and the error paths that need real TensorRT.

Writes ``OUT/gpu_check.json`` and ``OUT/summary.md``. Exit status: 0 every row passed or was skipped,
1 a row failed, 3 no NVIDIA GPU (nothing GPU-side ran; the report says so).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
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

from deploykit.errors import DeployKitError  # noqa: E402
from deploykit.graph.run import session_from_onnx  # noqa: E402

PROFILE = {"x": ((1, 3, 64, 64), (4, 3, 64, 64), (8, 3, 64, 64))}
PRECISIONS = ("fp32", "fp16", "int8", "fp8")
TOLERANCE = {"fp32": 5e-3, "fp16": 5e-3, "int8": 5e-2, "fp8": 5e-2}  # rel-L2 vs ORT on the same graph
EXAMPLES = {"detector": REPO / "examples" / "detector" / "deploykit.yaml", "bev": REPO / "examples" / "bev" / "deploykit.yaml"}
# Rough seconds each section needs on a GPU machine; a section starts only if the budget has that left.
COST = {"plugin kernels": 150, "conv precisions": 90, "example": 120, "profiling": 60, "timing cache": 40, "errors": 40}
GATE = {"gate__iterations": 50, "gate__trials": 3, "gate__warmup": 10}  # enough to time, short enough to fit


class Budget:
    """Wall-clock budget of the whole check: ``make gpu-check`` must finish inside 10 minutes."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock, self._deadline, self.seconds = clock, clock() + seconds, seconds

    def left(self) -> float:
        return self._deadline - self._clock()

    def allows(self, section: str) -> bool:
        return self.left() >= COST.get(section, 30)


def main(argv: list[str] | None = None) -> int:
    from deploykit.backends.tensorrt import TensorRTBackend
    from deploykit.backends.trt_cuda import probe_driver

    args = parse_args(argv)
    out = Path(args.out)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    budget, started = Budget(args.budget), time.monotonic()
    probe, trt_status = probe_driver(), TensorRTBackend().availability()
    rows = environment_rows()
    rows += section(budget, "plugin kernels", lambda: plugin_kernel_rows(work / "plugins", probe))
    if trt_status.available:
        rows += tensorrt_rows(work, budget, args)
    else:
        rows.append(row("tensorrt", "skip", f"TensorRT sections not run: {trt_status.reason}"))
    rows += section(budget, "profiling", lambda: profiling_rows(work / "profiles", trt_status.available, probe, args))
    report = {"status": status_of(rows, probe), "gpu": probe.gpus[0].name if probe.gpus else "",
              "tensorrt": trt_status.version, "seconds": round(time.monotonic() - started, 1), "budget_s": args.budget,
              "no_gpu": probe.problem, "rows": rows}
    write_report(out, report)
    print_table(rows)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return {"passed": 0, "failed": 1, "unavailable": 3}[report["status"]]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO / "build" / "gpu-check", help="where gpu_check.json and summary.md go")
    p.add_argument("--workdir", type=Path, help="keep models, stores and engines here (default: a temporary folder)")
    p.add_argument("--budget", type=float, default=540.0, help="seconds for the whole check (sections past it skip)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iterations", type=int, default=200)
    return p.parse_args(argv)


def status_of(rows: list[dict[str, Any]], probe: Any) -> str:
    if any(r["status"] == "fail" for r in rows):
        return "failed"
    return "unavailable" if probe.problem else "passed"


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


def section(budget: Budget, name: str, fn: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A section's rows, or one skip row when the budget has not enough time left for it."""
    if not budget.allows(name):
        return [row(name, "skip", f"time budget: {budget.left():.0f} s left of {budget.seconds:.0f} s, the section "
                                  f"needs about {COST.get(name, 30)} s (raise --budget to run it)")]
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a broken section is a failed row
        return [row(name, "fail", f"{type(e).__name__}: {e}", traceback=traceback.format_exc())]


def environment_rows() -> list[dict[str, Any]]:
    from deploykit.backends import doctor

    keep = ("TensorRT", "cuda-python", "CUDA", "GPU", "plugin", "onnxruntime", "ModelOpt", "backend")
    return [row(f"env: {r.component}", "info", r.detail) for r in doctor.collect().rows if r.component.startswith(keep)]


# -- plugin kernels -------------------------------------------------------------------------------------

def plugin_kernel_rows(folder: Path, probe: Any) -> list[dict[str, Any]]:
    """CUDA kernels vs the CPU reference, with bandwidth against the HBM floor (plugins/tools/gpu_check.sh)."""
    missing = [tool for tool in ("nvcc", "cmake") if shutil.which(tool) is None]
    if probe.problem or missing:
        why = probe.problem or f"{' and '.join(missing)} not on PATH"
        return [row("plugin kernels", "skip", f"not run: {why}")]
    folder.mkdir(parents=True, exist_ok=True)
    results = folder / "plugins.json"
    done = subprocess.run([str(REPO / "plugins" / "tools" / "gpu_check.sh"), str(results)], capture_output=True,
                          text=True, env={**os.environ, "BUILD_DIR": str(folder / "build")}, timeout=600)
    if not results.is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        return [row("plugin kernels", "fail", f"gpu_check.sh exited {done.returncode} without results:\n{tail}")]
    return kernel_rows(json.loads(results.read_text()))


def kernel_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows from deploykit_gpu_check's JSON: correctness, and timed cases as GB/s against the HBM floor."""
    device = report.get("device", {})
    rows = [row("plugin kernels: device", "info", f"{device.get('name', '?')} (compute capability "
                f"{device.get('compute_capability', '?')}): peak {device.get('peak_gbps', 0):.0f} GB/s from clock x bus, "
                f"device copy {device.get('copy_gbps', 0):.0f} GB/s")]
    for r in report.get("results", []):
        detail = (f"max |CUDA - CPU| {r['max_abs_error']:.3g} (tolerance {r['tolerance']:.3g}), skipped "
                  f"{r['skipped']}/{r['expected_skipped']}")
        if "time_ms" in r:
            detail += (f"; {r['time_ms']:.4f} ms, {r['gbps']:.0f} GB/s = {r['fraction_of_peak']:.0%} of peak "
                       f"(HBM floor {r['floor_ms']:.4f} ms)")
        rows.append(row(f"kernel {r['op']} {r['case']} {r['dtype']}", "pass" if r["ok"] else "fail", detail,
                        **{k: r[k] for k in ("time_ms", "gbps", "floor_ms", "fraction_of_peak") if k in r}))
    return rows


# -- TensorRT --------------------------------------------------------------------------------------------

def tensorrt_rows(work: Path, budget: Budget, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = section(budget, "conv precisions", lambda: precision_rows(work / "conv", conv_net(work / "conv.onnx"),
                                                                       PROFILE, args))
    for name, config in EXAMPLES.items():
        rows += section(budget, "example", lambda n=name, c=config: example_rows(n, c, work / n))
    rows += section(budget, "timing cache", lambda: [timing_cache_row(work / "cache")])
    rows += section(budget, "errors", lambda: error_rows(work / "errors"))
    return rows


def conv_net(path: Path) -> Path:
    """Three convolutions with biases, wide enough for ModelOpt to quantize them; dynamic batch."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weight(name: str, shape: tuple[int, ...]) -> Any:
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 64, 64])],
        [weight("w1", (32, 3, 3, 3)), weight("w2", (64, 32, 3, 3)), weight("w3", (16, 64, 1, 1)),
         *(numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), f"b{i}")
           for i, n in ((1, 32), (2, 64), (3, 16)))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def variant(model: Path, precision: str, out: Path, calibration: dict[str, np.ndarray]) -> tuple[Path | None, str]:
    """The model in ``precision``, made the way users make it, or (None, why it cannot be made here)."""
    if precision == "fp32":
        return model, "as exported"
    try:
        return project_quantize(model, precision, out.parent / f"{precision}-store", calibration), (
            f"{precision.upper()} from deploykit's quantize stage (tensorrt flavour)")
    except DeployKitError as e:
        if precision != "int8":
            return None, f"deploykit's quantize stage cannot make {precision} here: {e.message}"
        return ort_int8(model, out, calibration), (f"INT8 Q/DQ from ONNX Runtime's quantizer, symmetric, biases "
                                                   f"unquantized (the quantize stage could not run: {e.message})")


def project_quantize(model: Path, precision: str, store: Path, calibration: dict[str, np.ndarray]) -> Path:
    """Q/DQ (or FP16) through ``deploykit.quantize`` with calibration samples written as .npy files."""
    import deploykit

    samples = store / "calibration"
    samples.mkdir(parents=True, exist_ok=True)
    (name, batch), = calibration.items()
    for i, sample in enumerate(batch):
        np.save(samples / f"{i:03d}.npy", sample[None])
    result = deploykit.quantize(model, calib_data=samples, workdir=store, dims={"batch": (1, 4, 8)},
                                quantize__precision=precision, quantize__target="tensorrt")
    return result.artifacts["model"].file("model.onnx")


def ort_int8(model: Path, out: Path, calibration: dict[str, np.ndarray]) -> Path:
    """Symmetric INT8 Q/DQ by ONNX Runtime, biases left in float: TensorRT's parser rejects an INT32 bias
    DequantizeLinear, and computes the bias itself from the quantized conv."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            n = len(next(iter(calibration.values())))
            self._it = iter([{k: v[i:i + 1] for k, v in calibration.items()} for i in range(n)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    quantize_static(str(model), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False})
    return out


def random_feeds(profiles: dict[str, Any], which: int, dtypes: dict[str, str], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(shapes[which]).astype(dtypes.get(n, "float32")) for n, shapes in profiles.items()}


def precision_rows(folder: Path, model: Path, profiles: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    folder.mkdir(parents=True, exist_ok=True)
    calibration = {n: np.concatenate([random_feeds(profiles, 2, {}, s)[n] for s in range(4)]) for n in profiles}
    rows = []
    for precision in PRECISIONS:
        case = f"conv {precision}"
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
    from deploykit.backends.tensorrt import TensorRTBackend
    from deploykit.config import BuildConfig

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
    detail = (f"{how}; rel-L2 vs ORT CPU {worst:.2e} (limit {TOLERANCE[precision]:.0e}); engine p50 "
              f"{engine_ms['p50']:.3f} ms ({runner.get('mode')}), end-to-end p50 {e2e_ms['p50']:.3f} ms; "
              f"inspector output dtypes {summary['inspector'].get('output_dtypes')}")
    return row(case, "pass" if worst <= TOLERANCE[precision] else "fail", detail, rel_l2=errors, engine_ms=engine_ms,
               end_to_end_ms=e2e_ms, runner=runner, build_seconds=summary["build_seconds"],
               plan_bytes=summary["plan_bytes"], inspector=summary["inspector"], engine=str(out))


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


# -- the examples through the whole pipeline --------------------------------------------------------------

def example_rows(name: str, yaml_path: Path, folder: Path) -> list[dict[str, Any]]:
    """The example through ``deploykit.convert`` with the tensorrt backend, once per precision."""
    if not yaml_path.is_file():
        return [row(f"{name}", "skip", f"{yaml_path} not found")]
    extra = plugin_overrides(name, folder)
    if isinstance(extra, str):
        return [row(f"{name}", "skip", extra)]
    rows = []
    for precision in PRECISIONS:
        case = f"{name} {precision} (convert, tensorrt)"
        if precision == "fp8" and not fp8_capable():
            rows.append(row(case, "skip", "FP8 needs compute capability 8.9+"))
            continue
        rows.append(guarded(case, lambda c=case, p=precision: convert_row(c, yaml_path, folder / "store", p, extra)))
    return rows


def plugin_overrides(name: str, folder: Path) -> dict[str, Any] | str:
    """The bev example needs the TensorRT plugin library, built for this TensorRT: overrides, or why not."""
    if name != "bev":
        return {}
    from deploykit.plugins.build import BuildOptions, build_plugins

    try:
        result = build_plugins(folder / "plugins", BuildOptions())
    except DeployKitError as e:
        return f"the plugin library could not be built: {e.message}"
    if "tensorrt" not in result.outputs:
        return f"no TensorRT plugin library: {(result.headers or {}).get('why', 'nvcc or TensorRT headers missing')}"
    return {"build__plugins": [result.outputs["tensorrt"]]}


def convert_row(case: str, config: Path, store: Path, precision: str, extra: dict[str, Any]) -> dict[str, Any]:
    """export -> quantize (the project's stage) -> TensorRT build -> parity vs ONNX Runtime -> gate timing."""
    from deploykit import convert

    overrides = {"build__backend": "tensorrt", "quantize__precision": precision, **GATE, **extra}
    if precision != "fp32":
        overrides["quantize__target"] = "tensorrt"
    try:
        result = convert(config, workdir=store, **overrides)
    except DeployKitError as e:
        return row(case, "fail", f"{type(e).__name__}: {e}")
    gate, parity = result.gate or {}, result.parity or {}
    engine_only = (gate.get("engine_only") or {}).get("latency", {})
    detail = (f"parity {parity.get('status', 'pass' if parity.get('passed') else 'fail')}; "
              f"{gate.get('fps', 0):.1f} FPS at batch {gate.get('batch', '?')}, p50 "
              f"{gate.get('latency', {}).get('p50_ms', 0):.3f} ms end to end, "
              f"{engine_only.get('p50_ms', 0):.3f} ms engine only")
    return row(case, "pass" if result.passed else "fail", detail, engine=str(result.artifacts["engine"].path),
               model=str(result.artifacts["model"].file("model.onnx")), parity=parity, gate=gate)


# -- profiling -------------------------------------------------------------------------------------------

def profiling_rows(folder: Path, with_tensorrt: bool, probe: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per-layer profiles with the roofline: TensorRT engines by precision (or ORT's CUDA provider), and the CPU."""
    from deploykit.backends.onnxruntime import OnnxRuntimeBackend, provider_status
    from deploykit.config import BuildConfig
    from deploykit.profiling import ProfileOptions
    from deploykit.profiling.run import profile_engine

    folder.mkdir(parents=True, exist_ok=True)
    model = conv_net(folder / "conv.onnx")
    feeds = random_feeds(PROFILE, 1, {}, seed=3)
    options, peaks = ProfileOptions(iterations=50, warmup=10), folder / "peaks"
    engines: list[tuple[str, Path]] = []  # (label, engine folder)
    if with_tensorrt:
        engines += [(f"tensorrt {p}", folder.parent / "conv" / f"conv-{p}") for p in PRECISIONS]
    elif not probe.problem and provider_status("cuda").available:
        OnnxRuntimeBackend().build(model, BuildConfig(provider="cuda"), _fresh(folder / "ort-cuda"))
        engines.append(("onnxruntime cuda", folder / "ort-cuda"))
    else:
        reason = probe.problem or provider_status("cuda").reason
        engines_note = row("profile (GPU)", "skip", f"no GPU engine to profile: {reason}")
        return [engines_note, *_cpu_profile(folder, model, feeds, options, peaks)]
    rows = []
    for label, folder_of in engines:  # not `engine`: the TensorRT names checker reads that as an ICudaEngine
        if not (folder_of / "engine.json").is_file():
            rows.append(row(f"profile {label}", "skip", "no engine was built for it above"))
            continue
        rows.append(guarded(f"profile {label}", lambda e=folder_of, lab=label: profile_row(
            f"profile {lab}", profile_engine(e, feeds, options, peaks_dir=peaks, model="conv", batch=4))))
    return rows + _cpu_profile(folder, model, feeds, options, peaks)


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _cpu_profile(folder: Path, model: Path, feeds: dict[str, np.ndarray], options: Any, peaks: Path) -> list[dict[str, Any]]:
    from deploykit.backends.onnxruntime import OnnxRuntimeBackend
    from deploykit.config import BuildConfig
    from deploykit.profiling.run import profile_engine

    def run() -> dict[str, Any]:
        engine = _fresh(folder / "ort-cpu")
        OnnxRuntimeBackend().build(model, BuildConfig(), engine)
        return profile_row("profile onnxruntime cpu", profile_engine(engine, feeds, options, peaks_dir=peaks,
                                                                     model="conv", batch=4))

    return [guarded("profile onnxruntime cpu", run)]


def profile_row(case: str, report: dict[str, Any]) -> dict[str, Any]:
    """One profile as a row: the slowest layers, time by precision, and the roofline floor."""
    top = ", ".join(f"{r['name']} {r['ms']:.3f} ms ({r['precision']}, {r.get('bound', '?')})"
                    for r in report["layers"][:3])
    precisions = ", ".join(f"{g['precision'] or '?'} {g['share']:.0%}" for g in report["by_precision"])
    floor = (f"; floor {report['floor_ms']:.3f} ms = {report['of_floor']:.0%} of the layer sum"
             if "floor_ms" in report else f"; no roofline ({report.get('roofline_note', '')})")
    detail = (f"{report['layers_count']} layers, sum {report['total_ms']:.3f} ms; time by precision: {precisions}; "
              f"slowest: {top}{floor}")
    ok = report["layers_count"] > 0 and report["total_ms"] > 0
    return row(case, "pass" if ok else "fail", detail, profile={k: report[k] for k in report if k != "layers"},
               layers=report["layers"][:20])


# -- timing cache and error paths (real TensorRT) ---------------------------------------------------------

def timing_cache_row(folder: Path) -> dict[str, Any]:
    from deploykit.backends.tensorrt import TensorRTBackend
    from deploykit.config import BuildConfig, TensorRTOptions

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


def error_rows(folder: Path) -> list[dict[str, Any]]:
    from deploykit.backends.tensorrt import TensorRTBackend
    from deploykit.backends.trt_compat import EngineIncompatible
    from deploykit.config import BuildConfig
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


# -- the report -------------------------------------------------------------------------------------------

def write_report(out: Path, report: dict[str, Any]) -> None:
    """``gpu_check.json`` (everything) and ``summary.md`` (the table), written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in (("gpu_check.json", json.dumps(report, indent=2, default=str)), ("summary.md", markdown(report))):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / name)
    print(f"gpu-check: {report['status']} in {report['seconds']} s; wrote {out / 'gpu_check.json'} and "
          f"{out / 'summary.md'}")


def markdown(report: dict[str, Any]) -> str:
    counts = {s: sum(r["status"] == s for r in report["rows"]) for s in ("pass", "fail", "skip")}
    head = [f"# deploykit gpu-check: {report['status']}", "",
            f"GPU: {report['gpu'] or 'none'}; TensorRT: {report['tensorrt'] or 'not available'}; "
            f"{report['seconds']} s of a {report['budget_s']:.0f} s budget; {counts['pass']} passed, {counts['fail']} "
            f"failed, {counts['skip']} skipped.", ""]
    if report["no_gpu"]:
        head += [f"No GPU-side check ran: {report['no_gpu']}", ""]
    lines = ["| case | status | detail |", "|---|---|---|"]
    lines += [f"| {r['case']} | {r['status']} | {str(r['detail']).replace('|', '/').replace(chr(10), ' ')} |"
              for r in report["rows"]]
    return "\n".join(head + lines) + "\n"


def print_table(rows: list[dict[str, Any]]) -> None:
    try:
        from rich.console import Console
        from rich.markup import escape
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
        table.add_row(escape(r["case"]), f"[{colour.get(r['status'], 'white')}]{r['status']}[/]", escape(str(r["detail"])))
    Console(width=200).print(table)


if __name__ == "__main__":
    sys.exit(main())
