#!/usr/bin/env python3
"""The GPU check: everything that can run on this machine's GPU, in one command, inside a time budget.

    python3 scripts/gpu_check.py --out build/gpu-check        (or: make gpu-check)

It runs on the machine's own Python as it is: no virtual environment, no pip, no network (it never
imports pip or an HTTP client and opens no socket). Only the standard library is needed to start;
every section checks what it needs (numpy, CuPy, cuda-python, ONNX, TensorRT, nvcc, a GPU) and says in
its ``skip`` row what was missing. Sections, in order of what matters most:

1. environment: the Python, its packages, nvcc, compute-sanitizer, the GPU (and doctor's rows when
   deploykit's dependencies are there);
2. plugin kernels (nvcc, a GPU): kernels and TensorRT plugin glue compiled with nvcc alone (no CMake),
   the CUDA kernels and the glue's runtime path (createPlugin -> attachToContext -> onShapeChange ->
   enqueue on a stream) for BEVDet-, BEVDepth- and PointPillars-sized inputs at FP32/FP16 against the
   CPU reference, timed against the HBM floor (the glue needs TensorRT headers only, no libnvinfer:
   ``--tensorrt-include DIR``);
3. compute-sanitizer memcheck on the kernel check's small cases;
4. the TensorRT session (numpy, CuPy, cuda-python): deploykit's unchanged ``TensorRTSession`` with a
   stand-in engine whose enqueue is a CuPy kernel (``scripts/gpu_standin.py``): pinned staging, async
   copies, CUDA-graph capture, the output allocator, host-located outputs, several threads;
5. with TensorRT: the lint corpus through the real parser (agreement with ``deploykit lint``), a conv
   net built in FP32/FP16/INT8/FP8 through the backend against ONNX Runtime, two examples (detector,
   bev) through ``deploykit.convert``, timing-cache reuse and the error paths that need real TensorRT;
6. profiling: per-layer profiles with the roofline (TensorRT engines, or ONNX Runtime's CUDA provider),
   and the CPU profile of the same model (needs ONNX and ONNX Runtime).

Writes ``OUT/gpu_check.json`` and ``OUT/summary.md``; the default budget (480 s) keeps it within 8
minutes. Exit status: 0 every row passed or was skipped, 1 a row failed, 3 no NVIDIA GPU (nothing
GPU-side ran; the report says so).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import numpy as np
except ImportError:  # the machine's Python may lack it: the sections that need it say so
    np = None  # type: ignore[assignment]

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # run from a checkout without installing
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "bench"))

from deploykit.errors import DeployKitError  # noqa: E402  (the error tree imports only the standard library)

PROFILE = {"x": ((1, 3, 64, 64), (4, 3, 64, 64), (8, 3, 64, 64))}
PRECISIONS = ("fp32", "fp16", "int8", "fp8")
TOLERANCE = {"fp32": 5e-3, "fp16": 5e-3, "int8": 5e-2, "fp8": 5e-2}  # rel-L2 vs ORT on the same graph
EXAMPLES = {
    "detector": REPO / "examples" / "detector" / "deploykit.yaml",
    "bev": REPO / "examples" / "bev" / "deploykit.yaml",
}
# Rough seconds each section needs on a GPU machine; a section starts only if the budget has that left.
COST = {
    "plugin kernels": 120,
    "memcheck": 60,
    "session": 30,
    "lint agreement": 40,
    "conv precisions": 90,
    "example": 120,
    "profiling": 60,
    "timing cache": 40,
    "errors": 40,
}
GATE = {"gate__iterations": 50, "gate__trials": 3, "gate__warmup": 10}  # enough to time, short enough to fit
# What each section imports besides the standard library
NEEDS = {
    "deploykit": ("numpy", "yaml"),
    "session": ("numpy", "cupy", "cuda.bindings"),
    "tensorrt": ("numpy", "yaml", "onnx", "onnxruntime", "tensorrt"),
    "profiling": ("numpy", "yaml", "onnx", "onnxruntime"),
}
KERNEL_SOURCES = (
    "tools/gpu_check.cpp",
    "bev_pool/bev_pool.cu",
    "pillar_scatter/pillar_scatter.cu",
    "bev_pool/bev_pool_cpu.cpp",
    "pillar_scatter/pillar_scatter_cpu.cpp",
    "common/abi.cpp",
)
GLUE_SOURCES = ("common/trt_plugin.cpp", "bev_pool/bev_pool_trt.cpp", "pillar_scatter/pillar_scatter_trt.cpp")


class Budget:
    """Wall-clock budget of the whole check: ``make gpu-check`` must finish inside 8 minutes."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock, self._deadline, self.seconds = clock, clock() + seconds, seconds

    def left(self) -> float:
        return self._deadline - self._clock()

    def allows(self, section: str) -> bool:
        return self.left() >= COST.get(section, 30)


@dataclass
class Machine:
    """What this machine has, found without importing anything heavy."""

    modules: dict[str, bool] = field(default_factory=dict)
    tools: dict[str, str] = field(default_factory=dict)  # name -> path ("" when missing)
    gpu: str = ""  # the first GPU's name
    compute_capability: str = ""  # "9.0"
    no_gpu: str = ""  # why there is no usable GPU ("" when there is one)
    tensorrt_reason: str = ""  # why the TensorRT sections cannot run ("" when they can)

    def missing(self, section: str) -> list[str]:
        return [m for m in NEEDS.get(section, ()) if not self.modules.get(m)]


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None  # locates without importing
    except (ImportError, ValueError):
        return False


def detect() -> Machine:
    machine = Machine(
        modules={m: has_module(m) for m in sorted({m for ms in NEEDS.values() for m in ms})},
        tools={t: shutil.which(t) or "" for t in ("nvidia-smi", "nvcc", "compute-sanitizer")},
    )
    machine.no_gpu = "no nvidia-smi on PATH (no NVIDIA driver)" if not machine.tools["nvidia-smi"] else ""
    if machine.tools["nvidia-smi"]:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        first = done.stdout.strip().splitlines()[:1]
        if done.returncode or not first:
            machine.no_gpu = f"nvidia-smi lists no GPU ({(done.stderr or done.stdout).strip()[:200]})"
        else:
            name, _, cc = first[0].rpartition(",")
            machine.gpu, machine.compute_capability = name.strip(), cc.strip()
    missing = machine.missing("tensorrt")
    if missing:
        machine.tensorrt_reason = f"needs {', '.join(missing)} in this Python ({sys.executable})"
    elif machine.no_gpu:
        machine.tensorrt_reason = machine.no_gpu
    else:
        from deploykit.backends.tensorrt import TensorRTBackend

        status = TensorRTBackend().availability()
        machine.tensorrt_reason = "" if status.available else status.reason
    return machine


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    budget, started = Budget(args.budget), time.monotonic()
    machine = detect()
    rows = environment_rows(machine)
    rows += section(budget, "plugin kernels", lambda: plugin_kernel_rows(work / "plugins", machine, args))
    rows += section(budget, "memcheck", lambda: memcheck_rows(work / "plugins", machine))
    rows += section(budget, "session", lambda: session_rows(machine))
    if not machine.tensorrt_reason:
        rows += section(budget, "lint agreement", lambda: lint_agreement_rows(work / "lint"))
        rows += tensorrt_rows(work, budget, args)
    else:
        rows.append(row("tensorrt", "skip", f"TensorRT sections not run: {machine.tensorrt_reason}"))
    rows += section(budget, "profiling", lambda: profiling_rows(work / "profiles", machine, args))
    report = {
        "status": status_of(rows, machine),
        "gpu": machine.gpu,
        "tensorrt": "" if machine.tensorrt_reason else _tensorrt_version(),
        "python": sys.executable,
        "venv": sys.prefix != sys.base_prefix,
        "seconds": round(time.monotonic() - started, 1),
        "budget_s": args.budget,
        "no_gpu": machine.no_gpu,
        "rows": rows,
    }
    write_report(out, report)
    print_table(rows)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return {"passed": 0, "failed": 1, "unavailable": 3}[report["status"]]


def _tensorrt_version() -> str:
    from deploykit.plugins.trt_headers import installed_tensorrt

    return installed_tensorrt()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--out", type=Path, default=REPO / "build" / "gpu-check", help="where gpu_check.json and summary.md go"
    )
    p.add_argument("--workdir", type=Path, help="keep models, stores and engines here (default: a temporary folder)")
    p.add_argument("--budget", type=float, default=480.0, help="seconds for the whole check (sections past it skip)")
    p.add_argument(
        "--tensorrt-include",
        type=Path,
        help="TensorRT headers for the plugin glue (only the headers: "
        "no TensorRT needed); default: $TENSORRT_INCLUDE_DIR, the wheels', the system's, build/kernel-lens",
    )
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iterations", type=int, default=200)
    return p.parse_args(argv)


def status_of(rows: list[dict[str, Any]], machine: Machine) -> str:
    if any(r["status"] == "fail" for r in rows):
        return "failed"
    return "unavailable" if machine.no_gpu else "passed"


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
        return [
            row(
                name,
                "skip",
                f"time budget: {budget.left():.0f} s left of {budget.seconds:.0f} s, the section "
                f"needs about {COST.get(name, 30)} s (raise --budget to run it)",
            )
        ]
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - a broken section is a failed row
        return [row(name, "fail", f"{type(e).__name__}: {e}", traceback=traceback.format_exc())]


def environment_rows(machine: Machine) -> list[dict[str, Any]]:
    where = "a virtual environment" if sys.prefix != sys.base_prefix else "the system Python (no venv)"
    have = ", ".join(f"{m} {'yes' if ok else 'no'}" for m, ok in machine.modules.items())
    rows = [
        row("env: python", "info", f"{sys.executable} {sys.version.split()[0]}, {where}; modules: {have}"),
        row("env: tools", "info", "; ".join(f"{t} {p or 'missing'}" for t, p in machine.tools.items())),
        row(
            "env: GPU",
            "info",
            f"{machine.gpu} (compute capability {machine.compute_capability})" if machine.gpu else machine.no_gpu,
        ),
    ]
    if machine.missing("deploykit"):
        return rows
    from deploykit.cli import doctor

    keep = ("TensorRT", "cuda-python", "CUDA", "GPU", "plugin", "onnxruntime", "ModelOpt", "backend")
    return rows + [
        row(f"env: {r.component}", "info", r.detail) for r in doctor.collect().rows if r.component.startswith(keep)
    ]


# -- plugin kernels -------------------------------------------------------------------------------------


def plugin_kernel_rows(folder: Path, machine: Machine, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The CUDA kernels and the plugin glue's enqueue path vs the CPU reference, built with nvcc alone."""
    if machine.no_gpu or not machine.tools["nvcc"]:
        return [row("plugin kernels", "skip", f"not run: {machine.no_gpu or 'nvcc not on PATH'}")]
    binary, glue = build_kernel_check(folder, machine, args)
    if isinstance(binary, dict):
        return [binary]
    results = folder / "plugins.json"
    done = subprocess.run([str(binary), str(results)], capture_output=True, text=True, timeout=300)
    if not results.is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        return [row("plugin kernels", "fail", f"deploykit_gpu_check exited {done.returncode} without results:\n{tail}")]
    return [glue, *kernel_rows(json.loads(results.read_text()))]


def tensorrt_headers(args: argparse.Namespace) -> tuple[str, str]:
    """(include dir, how it was chosen) for the glue; ("", why none) when no headers fit."""
    from deploykit.plugins import trt_headers

    fetched = REPO / "build" / "kernel-lens" / "kernel_lens" / "include" / "tensorrt"
    explicit = str(args.tensorrt_include) if args.tensorrt_include else ""
    try:
        headers = trt_headers.choose(explicit, trt_headers.installed_tensorrt(), trt_headers.candidates(fetched))
    except DeployKitError as e:
        return "", e.message
    return headers.include_dir, headers.why


def nvcc_command(output: Path, arch: str, include_dir: str) -> list[str]:
    """nvcc compiling the kernel check (and, with TensorRT headers, the plugin glue into it): no CMake."""
    plugins = REPO / "plugins"
    sources = [*KERNEL_SOURCES, *(GLUE_SOURCES if include_dir else ())]
    command = [
        "nvcc",
        "-O2",
        "-std=c++17",
        f"-arch=sm_{arch}",
        "-DDEPLOYKIT_WITH_CUDA",
        "-I",
        str(plugins),
        "-Xcompiler",
        "-Wno-deprecated-declarations",
    ]
    if include_dir:
        command += ["-DDEPLOYKIT_WITH_GLUE", "-isystem", include_dir]
    return [*command, *(str(plugins / src) for src in sources), "-o", str(output)]


def build_kernel_check(folder: Path, machine: Machine, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """(the compiled check, a row saying whether the glue is in it), or (a failed row, {})."""
    folder.mkdir(parents=True, exist_ok=True)
    include_dir, why = tensorrt_headers(args)
    binary = folder / "deploykit_gpu_check"
    command = nvcc_command(binary, machine.compute_capability.replace(".", ""), include_dir)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        return row("plugin kernels: build", "fail", f"nvcc exited {done.returncode}:\n{tail}", command=command), {}
    glue = (
        row("plugin glue: enqueue path", "info", f"compiled in, against {include_dir} ({why})")
        if include_dir
        else row(
            "plugin glue: enqueue path",
            "skip",
            f"not compiled in: {why}; copy TensorRT headers onto the "
            "machine and pass --tensorrt-include DIR (see README: GPU check)",
        )
    )
    return binary, glue


def memcheck_rows(folder: Path, machine: Machine) -> list[dict[str, Any]]:
    """compute-sanitizer memcheck over the kernel check's small cases (kernels and glue)."""
    binary = folder / "deploykit_gpu_check"
    if machine.no_gpu or not machine.tools["compute-sanitizer"] or not binary.is_file():
        why = machine.no_gpu or (
            "compute-sanitizer not on PATH"
            if not machine.tools["compute-sanitizer"]
            else "the kernel check was not built"
        )
        return [row("memcheck", "skip", f"not run: {why}")]
    done = subprocess.run(
        [
            "compute-sanitizer",
            "--tool",
            "memcheck",
            "--error-exitcode",
            "1",
            str(binary),
            str(folder / "memcheck.json"),
            "--small",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = next((ln for ln in (done.stdout + done.stderr).splitlines() if "ERROR SUMMARY" in ln), "no summary")
    return [row("memcheck (compute-sanitizer)", "pass" if done.returncode == 0 else "fail", summary.strip())]


def session_rows(machine: Machine) -> list[dict[str, Any]]:
    """The unchanged TensorRTSession on real cuda-python with a stand-in engine (scripts/gpu_standin.py)."""
    missing = machine.missing("session")
    if machine.no_gpu or missing:
        why = machine.no_gpu or f"needs {', '.join(missing)} in this Python ({sys.executable})" + (
            "; cuda.bindings is pip's cuda-python (README: GPU check on an offline GPU machine)"
            if "cuda.bindings" in missing
            else ""
        )
        return [row("session (stand-in engine)", "skip", f"not run: {why}")]
    import gpu_standin

    return gpu_standin.check()


def lint_agreement_rows(folder: Path) -> list[dict[str, Any]]:
    """The lint corpus through TensorRT's real parser: does the lint's verdict match the parser's?"""
    import importlib

    corpus = importlib.import_module("lint_corpus") if (REPO / "bench" / "lint_corpus.py").is_file() else None
    if corpus is None:
        return [row("lint agreement", "skip", "bench/lint_corpus.py is not in this checkout")]
    return corpus.agreement_rows(folder)


def kernel_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows from deploykit_gpu_check's JSON: correctness, and timed cases as GB/s against the HBM floor."""
    device = report.get("device", {})
    rows = [
        row(
            "plugin kernels: device",
            "info",
            f"{device.get('name', '?')} (compute capability "
            f"{device.get('compute_capability', '?')}): peak {device.get('peak_gbps', 0):.0f} GB/s from clock x bus, "
            f"device copy {device.get('copy_gbps', 0):.0f} GB/s",
        )
    ]
    for r in report.get("results", []):
        detail = (
            f"max |CUDA - CPU| {r['max_abs_error']:.3g} (tolerance {r['tolerance']:.3g}), skipped "
            f"{r['skipped']}/{r['expected_skipped']}"
        )
        if "time_ms" in r:
            detail += (
                f"; {r['time_ms']:.4f} ms, {r['gbps']:.0f} GB/s = {r['fraction_of_peak']:.0%} of peak "
                f"(HBM floor {r['floor_ms']:.4f} ms)"
            )
        rows.append(
            row(
                f"kernel {r['op']} {r['case']} {r['dtype']}",
                "pass" if r["ok"] else "fail",
                detail,
                **{k: r[k] for k in ("time_ms", "gbps", "floor_ms", "fraction_of_peak") if k in r},
            )
        )
    return rows


# -- TensorRT --------------------------------------------------------------------------------------------


def tensorrt_rows(work: Path, budget: Budget, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = section(
        budget, "conv precisions", lambda: precision_rows(work / "conv", conv_net(work / "conv.onnx"), PROFILE, args)
    )
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
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name
        )

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16, 64, 64])],
        [
            weight("w1", (32, 3, 3, 3)),
            weight("w2", (64, 32, 3, 3)),
            weight("w3", (16, 64, 1, 1)),
            *(
                numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), f"b{i}")
                for i, n in ((1, 32), (2, 64), (3, 16))
            ),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def variant(model: Path, precision: str, out: Path, calibration: dict[str, np.ndarray]) -> tuple[Path | None, str]:
    """The model in ``precision``, made the way users make it, or (None, why it cannot be made here)."""
    if precision == "fp32":
        return model, "as exported"
    try:
        return project_quantize(model, precision, out.parent / f"{precision}-store", calibration), (
            f"{precision.upper()} from deploykit's quantize stage (tensorrt flavour)"
        )
    except DeployKitError as e:
        if precision != "int8":
            return None, f"deploykit's quantize stage cannot make {precision} here: {e.message}"
        return ort_int8(model, out, calibration), (
            f"INT8 Q/DQ from ONNX Runtime's quantizer, symmetric, biases "
            f"unquantized (the quantize stage could not run: {e.message})"
        )


def project_quantize(model: Path, precision: str, store: Path, calibration: dict[str, np.ndarray]) -> Path:
    """Q/DQ (or FP16) through ``deploykit.quantize`` with calibration samples written as .npy files."""
    import deploykit

    samples = store / "calibration"
    samples.mkdir(parents=True, exist_ok=True)
    ((name, batch),) = calibration.items()
    for i, sample in enumerate(batch):
        np.save(samples / f"{i:03d}.npy", sample[None])
    result = deploykit.quantize(
        model,
        calib_data=samples,
        workdir=store,
        dims={"batch": (1, 4, 8)},
        quantize__precision=precision,
        quantize__target="tensorrt",
    )
    return result.artifacts["model"].file("model.onnx")


def ort_int8(model: Path, out: Path, calibration: dict[str, np.ndarray]) -> Path:
    """Symmetric INT8 Q/DQ by ONNX Runtime, biases left in float: TensorRT's parser rejects an INT32 bias
    DequantizeLinear, and computes the bias itself from the quantized conv."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            n = len(next(iter(calibration.values())))
            self._it = iter([{k: v[i : i + 1] for k, v in calibration.items()} for i in range(n)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    quantize_static(
        str(model),
        str(out),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False},
    )
    return out


def random_feeds(profiles: dict[str, Any], which: int, dtypes: dict[str, str], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(shapes[which]).astype(dtypes.get(n, "float32")) for n, shapes in profiles.items()}


def precision_rows(
    folder: Path, model: Path, profiles: dict[str, Any], args: argparse.Namespace
) -> list[dict[str, Any]]:
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
        rows.append(
            guarded(
                case,
                lambda c=case, m=made, p=precision, h=how: engine_row(
                    c, m, profiles, folder / c.replace(" ", "-"), p, h, args
                ),
            )
        )
    return rows


def fp8_capable() -> bool:
    from deploykit.backends.trt_cuda import probe_driver

    gpus = probe_driver().gpus
    return bool(gpus) and tuple(int(v) for v in gpus[0].compute_capability.split(".")) >= (8, 9)


def engine_row(
    case: str, model: Path, profiles: dict[str, Any], out: Path, precision: str, how: str, args: argparse.Namespace
) -> dict[str, Any]:
    from deploykit.backends.tensorrt import TensorRTBackend
    from deploykit.config import BuildConfig
    from deploykit.graph.run import session_from_onnx

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
    detail = (
        f"{how}; rel-L2 vs ORT CPU {worst:.2e} (limit {TOLERANCE[precision]:.0e}); engine p50 "
        f"{engine_ms['p50']:.3f} ms ({runner.get('mode')}), end-to-end p50 {e2e_ms['p50']:.3f} ms; "
        f"inspector output dtypes {summary['inspector'].get('output_dtypes')}"
    )
    return row(
        case,
        "pass" if worst <= TOLERANCE[precision] else "fail",
        detail,
        rel_l2=errors,
        engine_ms=engine_ms,
        end_to_end_ms=e2e_ms,
        runner=runner,
        build_seconds=summary["build_seconds"],
        plan_bytes=summary["plan_bytes"],
        inspector=summary["inspector"],
        engine=str(out),
    )


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
    detail = (
        f"parity {parity.get('status', 'pass' if parity.get('passed') else 'fail')}; "
        f"{gate.get('fps', 0):.1f} FPS at batch {gate.get('batch', '?')}, p50 "
        f"{gate.get('latency', {}).get('p50_ms', 0):.3f} ms end to end, "
        f"{engine_only.get('p50_ms', 0):.3f} ms engine only"
    )
    return row(
        case,
        "pass" if result.passed else "fail",
        detail,
        engine=str(result.artifacts["engine"].path),
        model=str(result.artifacts["model"].file("model.onnx")),
        parity=parity,
        gate=gate,
    )


# -- profiling -------------------------------------------------------------------------------------------


def profiling_rows(folder: Path, machine: Machine, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per-layer profiles with the roofline: TensorRT engines by precision (or ORT's CUDA provider), and the CPU."""
    missing = machine.missing("profiling")
    if missing:
        return [row("profiling", "skip", f"not run: needs {', '.join(missing)} in this Python ({sys.executable})")]
    with_tensorrt = not machine.tensorrt_reason
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
    elif not machine.no_gpu and provider_status("cuda").available:
        OnnxRuntimeBackend().build(model, BuildConfig(provider="cuda"), _fresh(folder / "ort-cuda"))
        engines.append(("onnxruntime cuda", folder / "ort-cuda"))
    else:
        reason = machine.no_gpu or provider_status("cuda").reason
        engines_note = row("profile (GPU)", "skip", f"no GPU engine to profile: {reason}")
        return [engines_note, *_cpu_profile(folder, model, feeds, options, peaks)]
    rows = []
    for label, folder_of in engines:  # not `engine`: the TensorRT names checker reads that as an ICudaEngine
        if not (folder_of / "engine.json").is_file():
            rows.append(row(f"profile {label}", "skip", "no engine was built for it above"))
            continue
        rows.append(
            guarded(
                f"profile {label}",
                lambda e=folder_of, lab=label: profile_row(
                    f"profile {lab}", profile_engine(e, feeds, options, peaks_dir=peaks, model="conv", batch=4)
                ),
            )
        )
    return rows + _cpu_profile(folder, model, feeds, options, peaks)


def _fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _cpu_profile(
    folder: Path, model: Path, feeds: dict[str, np.ndarray], options: Any, peaks: Path
) -> list[dict[str, Any]]:
    from deploykit.backends.onnxruntime import OnnxRuntimeBackend
    from deploykit.config import BuildConfig
    from deploykit.profiling.run import profile_engine

    def run() -> dict[str, Any]:
        engine = _fresh(folder / "ort-cpu")
        OnnxRuntimeBackend().build(model, BuildConfig(), engine)
        return profile_row(
            "profile onnxruntime cpu", profile_engine(engine, feeds, options, peaks_dir=peaks, model="conv", batch=4)
        )

    return [guarded("profile onnxruntime cpu", run)]


def profile_row(case: str, report: dict[str, Any]) -> dict[str, Any]:
    """One profile as a row: the slowest layers, time by precision, and the roofline floor."""
    top = ", ".join(
        f"{r['name']} {r['ms']:.3f} ms ({r['precision']}, {r.get('bound', '?')})" for r in report["layers"][:3]
    )
    precisions = ", ".join(f"{g['precision'] or '?'} {g['share']:.0%}" for g in report["by_precision"])
    floor = (
        f"; floor {report['floor_ms']:.3f} ms = {report['of_floor']:.0%} of the layer sum"
        if "floor_ms" in report
        else f"; no roofline ({report.get('roofline_note', '')})"
    )
    detail = (
        f"{report['layers_count']} layers, sum {report['total_ms']:.3f} ms; time by precision: {precisions}; "
        f"slowest: {top}{floor}"
    )
    ok = report["layers_count"] > 0 and report["total_ms"] > 0
    return row(
        case,
        "pass" if ok else "fail",
        detail,
        profile={k: report[k] for k in report if k != "layers"},
        layers=report["layers"][:20],
    )


# -- timing cache and error paths (real TensorRT) ---------------------------------------------------------


def timing_cache_row(folder: Path) -> dict[str, Any]:
    from deploykit.backends.tensorrt import TensorRTBackend
    from deploykit.config import BuildConfig, TensorRTOptions

    def run() -> dict[str, Any]:
        folder.mkdir(parents=True, exist_ok=True)
        model, backend = conv_net(folder / "m.onnx"), TensorRTBackend()
        first = backend.build(
            model,
            BuildConfig(backend="tensorrt"),
            folder / "a",
            profiles=PROFILE,
            timing_cache_out=folder / "first.cache",
        )
        cache = (folder / "first.cache").read_bytes()
        strict = BuildConfig(backend="tensorrt", tensorrt=TensorRTOptions(error_on_timing_cache_miss=True))
        second = backend.build(
            model, strict, folder / "b", profiles=PROFILE, timing_cache=cache, timing_cache_out=folder / "second.cache"
        )
        ok = bool(cache) and second["timing_cache"].get("reused") is True
        return row(
            "timing cache reuse",
            "pass" if ok else "fail",
            f"{len(cache)} bytes; first build {first['build_seconds']:.1f} s, seeded rebuild with "
            f"error_on_timing_cache_miss {second['build_seconds']:.1f} s; {second['timing_cache']}",
        )

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
        (
            "error: unsupported op",
            lambda: backend.build(
                with_custom_op(model, folder / "custom.onnx"),
                BuildConfig(backend="tensorrt"),
                folder / "c",
                profiles=PROFILE,
            ),
            ModelError,
            "DeployKitNoSuchOp",
        ),
        (
            "error: unknown profile input",
            lambda: backend.build(
                model, BuildConfig(backend="tensorrt"), folder / "d", profiles={"images": PROFILE["x"]}
            ),
            ConfigError,
            "images",
        ),
        (
            "error: missing plugin library",
            lambda: backend.build(
                model,
                BuildConfig(backend="tensorrt", plugins=(str(folder / "libmissing.so"),)),
                folder / "e",
                profiles=PROFILE,
            ),
            ConfigError,
            "does not exist",
        ),
    ]
    if built["status"] == "pass":
        cases += [
            (
                "error: truncated plan",
                lambda: backend.load(tampered(folder, "truncated", truncate=True)),
                ArtifactCorrupt,
                "truncated",
            ),
            (
                "error: plan from another TensorRT",
                lambda: backend.load(tampered(folder, "other-trt", tensorrt="10.12.0.1")),
                EngineIncompatible,
                "built with TensorRT 10.12.0.1",
            ),
            (
                "error: plan from another GPU",
                lambda: backend.load(tampered(folder, "other-gpu", compute_capability="1.0")),
                EngineIncompatible,
                "compute capability",
            ),
        ]
    return [built] + [expect(*case) for case in cases]


def with_custom_op(model: Path, out: Path) -> Path:
    import onnx
    from onnx import helper

    m = onnx.load(str(model))
    m.graph.node[-1].output[0] = "y_pre"
    m.graph.node.append(
        helper.make_node("DeployKitNoSuchOp", ["y_pre"], ["y"], name="no_such_op", domain="deploykit.test")
    )
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
    print(
        f"gpu-check: {report['status']} in {report['seconds']} s; wrote {out / 'gpu_check.json'} and "
        f"{out / 'summary.md'}"
    )


def markdown(report: dict[str, Any]) -> str:
    counts = {s: sum(r["status"] == s for r in report["rows"]) for s in ("pass", "fail", "skip")}
    head = [
        f"# deploykit gpu-check: {report['status']}",
        "",
        f"GPU: {report['gpu'] or 'none'}; TensorRT: {report['tensorrt'] or 'not available'}; "
        f"{report['seconds']} s of a {report['budget_s']:.0f} s budget; {counts['pass']} passed, {counts['fail']} "
        f"failed, {counts['skip']} skipped.",
        "",
        f"Python: {report['python']} ({'a venv' if report['venv'] else 'the system Python, no venv'}); "
        "nothing was installed and no network was used.",
        "",
    ]
    if report["no_gpu"]:
        head += [f"No GPU-side check ran: {report['no_gpu']}", ""]
    lines = ["| case | status | detail |", "|---|---|---|"]
    lines += [
        f"| {r['case']} | {r['status']} | {str(r['detail']).replace('|', '/').replace(chr(10), ' ')} |"
        for r in report["rows"]
    ]
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
        table.add_row(
            escape(r["case"]), f"[{colour.get(r['status'], 'white')}]{r['status']}[/]", escape(str(r["detail"]))
        )
    Console(width=200).print(table)


if __name__ == "__main__":
    sys.exit(main())
