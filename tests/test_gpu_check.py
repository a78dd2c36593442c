"""scripts/gpu_check.py (``make gpu-check``): what can be checked without a GPU — its skip paths, the time
budget, the report, the kernel-results parsing, and how it makes INT8 models. It has not run on a GPU
from these tests: on a CPU machine every GPU section must say why it did not run."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from deploykit.errors import EnvironmentProblem

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_makefile_gpu_check_needs_no_venv_no_pip_and_writes_one_report() -> None:
    """Defect C: the target depends on nothing that installs (no venv, no pip, no fetched headers)."""
    target = re.search(r"^gpu-check:(.*)\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert target.group(1).strip() == ""  # no prerequisites: not $(STAMP), not the header fetch
    assert target.group(2).strip().splitlines() == [
        "$(GPU_PYTHON) scripts/gpu_check.py --out build/gpu-check "
        "$(if $(TRT_INCLUDE),--tensorrt-include $(TRT_INCLUDE))"
    ]
    assert re.search(r"^GPU_PYTHON \?= python3$", (ROOT / "Makefile").read_text(), re.M)


GUARD = """
import builtins, socket, sys
real = builtins.__import__
def guarded(name, *args, **kwargs):
    if name.split(".")[0] in ("pip", "requests", "urllib3", "httpx") or name in ("urllib.request", "http.client"):
        raise SystemExit(f"the gpu check imported {name}")
    return real(name, *args, **kwargs)
builtins.__import__ = guarded
def refuse(*args, **kwargs):
    raise SystemExit("the gpu check opened a network connection")
socket.socket.connect = refuse
socket.create_connection = refuse
sys.argv = ["gpu_check.py", *sys.argv[1:]]
import runpy
runpy.run_path(sys.argv[0] if False else SCRIPT, run_name="__main__")
"""


def system_python() -> str:
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if Path(candidate).is_file():
            return candidate
    pytest.skip("no system Python outside the venv here")


def test_it_starts_on_a_bare_system_python_without_network_or_pip(tmp_path: Path) -> None:
    """The offline GPU machine's case: the system Python, nothing installed, no network. Every section
    that cannot run says why; nothing imports pip or an HTTP client, nothing connects."""
    import subprocess

    script = GUARD.replace("SCRIPT", repr(str(ROOT / "scripts" / "gpu_check.py")))
    done = subprocess.run(
        [
            system_python(),
            "-c",
            script,
            "--out",
            str(tmp_path / "out"),
            "--budget",
            "400",
            "--workdir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert "imported" not in done.stderr and "network connection" not in done.stderr, done.stderr
    report = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert done.returncode == 3 and report["status"] == "unavailable" and report["venv"] is False
    rows = {r["case"]: r for r in report["rows"]}
    for case in ("plugin kernels", "memcheck", "session (stand-in engine)", "tensorrt"):
        assert rows[case]["status"] == "skip" and rows[case]["detail"], case
    assert "system Python (no venv)" in rows["env: python"]["detail"]
    assert "no network was used" in (tmp_path / "out" / "summary.md").read_text()


def test_without_a_gpu_every_gpu_section_says_why_and_the_cpu_profile_runs(gpu_check, tmp_path: Path) -> None:
    code = gpu_check.main(["--out", str(tmp_path / "out"), "--budget", "300"])
    report = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    rows = {r["case"]: r for r in report["rows"]}
    assert code == 3 and report["status"] == "unavailable" and report["no_gpu"]
    assert rows["plugin kernels"]["status"] == "skip" and "not run" in rows["plugin kernels"]["detail"]
    assert rows["tensorrt"]["status"] == "skip" and "TensorRT" in rows["tensorrt"]["detail"]
    assert rows["profile (GPU)"]["status"] == "skip"
    cpu = rows["profile onnxruntime cpu"]
    assert cpu["status"] == "pass" and cpu["profile"]["layers_count"] >= 3 and "floor" in cpu["detail"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert summary.startswith("# deploykit gpu-check: unavailable") and "No GPU-side check ran" in summary
    assert "| plugin kernels | skip |" in summary


def test_the_kernel_check_compiles_with_nvcc_alone_and_takes_the_glue_with_headers(gpu_check, tmp_path):
    """Defect D: with TensorRT headers, the glue's enqueue path is compiled into the kernel check."""
    plain = gpu_check.nvcc_command(tmp_path / "b", "90", "")
    glue = gpu_check.nvcc_command(tmp_path / "b", "90", "/opt/trt/include")
    assert plain[0] == "nvcc" and "-arch=sm_90" in plain and "-DDEPLOYKIT_WITH_GLUE" not in plain
    assert "-DDEPLOYKIT_WITH_GLUE" in glue and "/opt/trt/include" in glue
    assert {Path(a).name for a in glue} >= {"trt_plugin.cpp", "bev_pool_trt.cpp", "pillar_scatter_trt.cpp"}
    assert all((ROOT / "plugins" / src).is_file() for src in (*gpu_check.KERNEL_SOURCES, *gpu_check.GLUE_SOURCES))


def _nvcc_arch() -> str:
    """sm_90 where this nvcc targets it, else the newest architecture it lists."""
    listed = subprocess.run(["nvcc", "--list-gpu-arch"], capture_output=True, text=True).stdout.split()
    archs = [a.removeprefix("compute_") for a in listed if a.startswith("compute_")]
    return "90" if "90" in archs else archs[-1]


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("glue", [False, True], ids=["kernels", "kernels+glue"])
def test_the_nvcc_command_compiles_and_links_the_kernel_check_without_a_gpu(gpu_check, tmp_path, glue):
    """The exact command ``build_kernel_check`` runs (nvcc alone, no CMake) builds the check's executable;
    with TensorRT headers (--tensorrt-include, $TENSORRT_INCLUDE_DIR or the fetched public ones) the
    glue is compiled into it, and it still links without libnvinfer."""
    include = ""
    if glue:
        explicit = os.environ.get("TENSORRT_INCLUDE_DIR")
        include, why = gpu_check.tensorrt_headers(argparse.Namespace(tensorrt_include=explicit))
        if not include:
            pytest.skip(f"no TensorRT headers for the glue ({why}); plugins/tools/fetch_trt_headers.sh fetches them")
    binary = tmp_path / "deploykit_gpu_check"
    command = gpu_check.nvcc_command(binary, _nvcc_arch(), include)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, " ".join(command) + "\n" + (done.stdout + done.stderr)[-4000:]
    assert binary.read_bytes()[:4] == b"\x7fELF" and os.access(binary, os.X_OK)
    linked = subprocess.run(["nm", "-C", str(binary)], capture_output=True, text=True).stdout
    assert "deploykit_bev_pool_v2_cuda" in linked and ("BevPoolV2Plugin" in linked) == glue


def test_sections_past_the_budget_are_skipped_with_the_reason(gpu_check) -> None:
    now = [0.0]
    budget = gpu_check.Budget(100, clock=lambda: now[0])
    ran = []
    assert gpu_check.section(budget, "conv precisions", lambda: ran.append(1) or []) == [] and ran == [1]
    now[0] = 95.0
    (skipped,) = gpu_check.section(budget, "conv precisions", lambda: ran.append(2) or [])
    assert ran == [1] and skipped["status"] == "skip" and "time budget: 5 s left of 100 s" in skipped["detail"]
    (broken,) = gpu_check.section(gpu_check.Budget(1e6), "errors", lambda: 1 / 0)
    assert broken["status"] == "fail" and "ZeroDivisionError" in broken["detail"]


KERNELS = {
    "device": {"name": "NVIDIA H200", "compute_capability": "9.0", "peak_gbps": 4800.0, "copy_gbps": 3900.0},
    "ok": False,
    "results": [
        {
            "op": "BEVPoolV2",
            "case": "bevdet-6x59x16x44-128x128",
            "dtype": "float16",
            "max_abs_error": 0.001,
            "tolerance": 0.01,
            "skipped": 0,
            "expected_skipped": 0,
            "ok": True,
            "time_ms": 0.05,
            "bytes": 96e6,
            "gbps": 1920.0,
            "floor_ms": 0.02,
            "fraction_of_peak": 0.4,
        },
        {
            "op": "PillarScatter",
            "case": "messy",
            "dtype": "float32",
            "max_abs_error": 3.0,
            "tolerance": 1e-6,
            "skipped": 5,
            "expected_skipped": 6,
            "ok": False,
        },
    ],
}


def test_kernel_results_become_rows_with_bandwidth_against_the_hbm_floor(gpu_check) -> None:
    rows = gpu_check.kernel_rows(KERNELS)
    assert rows[0]["status"] == "info" and "peak 4800 GB/s" in rows[0]["detail"]
    timed, broken = rows[1], rows[2]
    assert timed["status"] == "pass" and "1920 GB/s = 40% of peak (HBM floor 0.0200 ms)" in timed["detail"]
    assert timed["fraction_of_peak"] == 0.4
    assert broken["status"] == "fail" and "skipped 5/6" in broken["detail"]
    assert gpu_check.status_of(rows, gpu_check.Machine(gpu="H200")) == "failed"


def test_gpu_sections_skip_without_nvcc_a_gpu_or_their_modules(gpu_check, tmp_path: Path) -> None:
    args = gpu_check.parse_args([])
    no_gpu = gpu_check.Machine(tools={"nvcc": "/x/nvcc", "compute-sanitizer": ""}, no_gpu="no GPU (test)")
    (row,) = gpu_check.plugin_kernel_rows(tmp_path, no_gpu, args)
    assert row["status"] == "skip" and "no GPU (test)" in row["detail"]
    no_nvcc = gpu_check.Machine(tools={"nvcc": "", "compute-sanitizer": ""}, gpu="H200", compute_capability="9.0")
    (row,) = gpu_check.plugin_kernel_rows(tmp_path, no_nvcc, args)
    assert row["status"] == "skip" and "nvcc not on PATH" in row["detail"]
    (row,) = gpu_check.memcheck_rows(tmp_path, no_nvcc)
    assert row["status"] == "skip" and "compute-sanitizer not on PATH" in row["detail"]
    bare = gpu_check.Machine(modules={"numpy": True, "cupy": False, "cuda.bindings": False}, gpu="H200")
    (row,) = gpu_check.session_rows(bare)
    assert row["status"] == "skip" and "needs cupy, cuda.bindings" in row["detail"]


def test_the_stand_in_session_skips_in_one_line_where_cuda_python_does_not_import(gpu_check, monkeypatch):
    """The finder can see a module that then fails to import (cuda-bindings of another CUDA major than
    the driver's): the session section is then one skip row naming cuda-python, not a crash or a fail."""
    import types

    import gpu_standin  # scripts/ is on the path once gpu_check is loaded

    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", None)  # import raises ImportError
    (row,) = gpu_standin.check()
    assert (row["case"], row["status"]) == ("session (stand-in engine)", "skip")
    assert row["detail"].startswith("not run: cuda-python") and "\n" not in row["detail"]
    seen = gpu_check.Machine(modules=dict.fromkeys(gpu_check.NEEDS["session"], True), gpu="H200")
    (row,) = gpu_check.section(gpu_check.Budget(480), "session", lambda: gpu_check.session_rows(seen))
    assert row["status"] == "skip" and "cuda-python" in row["detail"]
    absent = gpu_check.Machine(modules={"numpy": True, "cupy": True, "cuda.bindings": False}, gpu="H200")
    (row,) = gpu_check.session_rows(absent)
    assert row["status"] == "skip" and "cuda.bindings is pip's cuda-python" in row["detail"]


def bias_dequantizers(path: Path) -> list[str]:
    """DequantizeLinear nodes reading an INT32 initializer: quantized biases, which TensorRT's parser rejects."""
    import onnx

    model = onnx.load(str(path))
    int32 = {i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.INT32}
    return [n.name for n in model.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in int32]


def test_the_int8_fallback_leaves_biases_in_float(gpu_check, tmp_path: Path) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    model = gpu_check.conv_net(tmp_path / "conv.onnx")
    calibration = {"x": np.random.default_rng(0).standard_normal((4, 3, 64, 64)).astype(np.float32)}
    out = gpu_check.ort_int8(model, tmp_path / "int8.onnx", calibration)
    assert bias_dequantizers(out) == []
    import onnx

    assert sum(n.op_type == "QuantizeLinear" for n in onnx.load(str(out)).graph.node) >= 3  # it did quantize

    # The check can fail: ONNX Runtime's default quantizes the three biases to INT32.
    class Reader:
        def __init__(self) -> None:
            self._it = iter([{"x": calibration["x"][i : i + 1]} for i in range(4)])

        def get_next(self):
            return next(self._it, None)

    quantize_static(
        str(model),
        str(tmp_path / "default.onnx"),
        Reader(),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
    )
    assert len(bias_dequantizers(tmp_path / "default.onnx")) == 3


def test_int8_comes_from_the_projects_quantize_stage(gpu_check, tmp_path: Path) -> None:
    import onnx

    model = gpu_check.conv_net(tmp_path / "conv.onnx")
    calibration = {"x": np.random.default_rng(1).standard_normal((4, 3, 64, 64)).astype(np.float32)}
    made, how = gpu_check.variant(model, "int8", tmp_path / "int8.onnx", calibration)
    assert "deploykit's quantize stage (tensorrt flavour)" in how
    nodes = onnx.load(str(made)).graph.node
    assert sum(n.op_type == "QuantizeLinear" for n in nodes) >= 3 and bias_dequantizers(made) == []


def test_when_the_quantize_stage_cannot_run_int8_falls_back_and_fp8_skips(
    gpu_check, monkeypatch, tmp_path: Path
) -> None:
    def refuse(*args, **kwargs):
        raise EnvironmentProblem("ModelOpt is not installed (test)")

    monkeypatch.setattr(gpu_check, "project_quantize", refuse)
    model = gpu_check.conv_net(tmp_path / "conv.onnx")
    calibration = {"x": np.random.default_rng(2).standard_normal((2, 3, 64, 64)).astype(np.float32)}
    made, how = gpu_check.variant(model, "int8", tmp_path / "int8.onnx", calibration)
    assert made == tmp_path / "int8.onnx" and "biases unquantized" in how and "ModelOpt is not installed" in how
    assert gpu_check.variant(model, "fp8", tmp_path / "fp8.onnx", calibration)[0] is None
