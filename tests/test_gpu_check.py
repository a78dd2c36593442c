"""scripts/gpu_check.py (``make gpu-check``): what can be checked without a GPU — its skip paths, the time
budget, the report, the kernel-results parsing, and how it makes INT8 models. It has not run on a GPU
from these tests: on a CPU machine every GPU section must say why it did not run."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest

from deploykit.backends.trt_cuda import DriverProbe, Gpu
from deploykit.errors import EnvironmentProblem

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_makefile_gpu_check_is_one_command_writing_one_report() -> None:
    recipe = re.search(r"^gpu-check:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert recipe.strip().splitlines() == ["$(PY) scripts/gpu_check.py --out build/gpu-check"]


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
        {"op": "BEVPoolV2", "case": "bevdet-6x59x16x44-128x128", "dtype": "float16", "max_abs_error": 0.001,
         "tolerance": 0.01, "skipped": 0, "expected_skipped": 0, "ok": True, "time_ms": 0.05, "bytes": 96e6,
         "gbps": 1920.0, "floor_ms": 0.02, "fraction_of_peak": 0.4},
        {"op": "PillarScatter", "case": "messy", "dtype": "float32", "max_abs_error": 3.0, "tolerance": 1e-6,
         "skipped": 5, "expected_skipped": 6, "ok": False},
    ],
}


def test_kernel_results_become_rows_with_bandwidth_against_the_hbm_floor(gpu_check) -> None:
    rows = gpu_check.kernel_rows(KERNELS)
    assert rows[0]["status"] == "info" and "peak 4800 GB/s" in rows[0]["detail"]
    timed, broken = rows[1], rows[2]
    assert timed["status"] == "pass" and "1920 GB/s = 40% of peak (HBM floor 0.0200 ms)" in timed["detail"]
    assert timed["fraction_of_peak"] == 0.4
    assert broken["status"] == "fail" and "skipped 5/6" in broken["detail"]
    assert gpu_check.status_of(rows, DriverProbe("", "12.8", [Gpu(0, "H200", "9.0", 1)])) == "failed"


def test_plugin_kernels_skip_without_nvcc_or_a_gpu(gpu_check, monkeypatch, tmp_path: Path) -> None:
    (row,) = gpu_check.plugin_kernel_rows(tmp_path, DriverProbe("no CUDA driver (test)"))
    assert row["status"] == "skip" and "no CUDA driver (test)" in row["detail"]
    monkeypatch.setattr(gpu_check.shutil, "which", lambda tool: None)
    (row,) = gpu_check.plugin_kernel_rows(tmp_path, DriverProbe("", "12.8", [Gpu(0, "H200", "9.0", 1)]))
    assert row["status"] == "skip" and "nvcc and cmake not on PATH" in row["detail"]


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
            self._it = iter([{"x": calibration["x"][i:i + 1]} for i in range(4)])

        def get_next(self):
            return next(self._it, None)

    quantize_static(str(model), str(tmp_path / "default.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    assert len(bias_dequantizers(tmp_path / "default.onnx")) == 3


def test_int8_comes_from_the_projects_quantize_stage(gpu_check, tmp_path: Path) -> None:
    import onnx

    model = gpu_check.conv_net(tmp_path / "conv.onnx")
    calibration = {"x": np.random.default_rng(1).standard_normal((4, 3, 64, 64)).astype(np.float32)}
    made, how = gpu_check.variant(model, "int8", tmp_path / "int8.onnx", calibration)
    assert "deploykit's quantize stage (tensorrt flavour)" in how
    nodes = onnx.load(str(made)).graph.node
    assert sum(n.op_type == "QuantizeLinear" for n in nodes) >= 3 and bias_dequantizers(made) == []


def test_when_the_quantize_stage_cannot_run_int8_falls_back_and_fp8_skips(gpu_check, monkeypatch, tmp_path: Path) -> None:
    def refuse(*args, **kwargs):
        raise EnvironmentProblem("ModelOpt is not installed (test)")

    monkeypatch.setattr(gpu_check, "project_quantize", refuse)
    model = gpu_check.conv_net(tmp_path / "conv.onnx")
    calibration = {"x": np.random.default_rng(2).standard_normal((2, 3, 64, 64)).astype(np.float32)}
    made, how = gpu_check.variant(model, "int8", tmp_path / "int8.onnx", calibration)
    assert made == tmp_path / "int8.onnx" and "biases unquantized" in how and "ModelOpt is not installed" in how
    assert gpu_check.variant(model, "fp8", tmp_path / "fp8.onnx", calibration)[0] is None
