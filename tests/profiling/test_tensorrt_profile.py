"""Profiling on TensorRT, checked WITH THE RECORDING TEST DOUBLE (tests/backends/trt_double.py): these tests
prove deploykit's logic around IProfiler and the engine inspector (how the profiler is attached and
detached, how inspector layers become precisions, FLOPs and bytes), nothing about TensorRT itself. No
engine is built here; the double's "plan" is a placeholder string."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deploykit.profiling import ProfileOptions
from deploykit.profiling import run as profile_run
from deploykit.profiling.cost import layer_cost
from deploykit.profiling.peaks import Peaks
from deploykit.profiling.summary import summarize
from deploykit.profiling.tensorrt import layers_from_inspector
from tests.backends.test_tensorrt import build_with_double, use_double
from tests.backends.trt_double import Scenario

# DETAILED inspector output of a Q/DQ network where one convolution did not take INT8 (its inputs are Half).
INSPECTOR = {
    "Layers": [
        {
            "Name": "conv1 + relu1",
            "LayerType": "CaskConvolution",
            "ParameterType": "Convolution",
            "Inputs": [
                {
                    "Name": "x_q",
                    "Dimensions": [2, 16, 32, 32],
                    "Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format",
                }
            ],
            "Outputs": [
                {
                    "Name": "c1",
                    "Dimensions": [2, 32, 32, 32],
                    "Format/Datatype": "Thirty-two wide channel vectorized row major Int8 format",
                }
            ],
            "Kernel": [3, 3],
            "OutMaps": 32,
            "Groups": 1,
            "Weights": {"Type": "Int8", "Count": 4608},
            "Bias": {"Type": "Float", "Count": 32},
            "TacticName": "sm90_xmma_fprop_implicit_gemm_int8",
            "Metadata": "[ONNX Layer: /conv1/Conv]\x1e[ONNX Layer: /relu1/Relu]",
        },
        {
            "Name": "conv2",
            "LayerType": "CaskConvolution",
            "ParameterType": "Convolution",
            "Inputs": [{"Name": "c1", "Dimensions": [2, 32, 32, 32], "Datatype": "Half", "Format": "Channel major"}],
            "Outputs": [{"Name": "c2", "Dimensions": [2, 8, 32, 32], "Datatype": "Half", "Format": "Channel major"}],
            "Kernel": [1, 1],
            "OutMaps": 8,
            "Groups": 2,
            "Weights": {"Type": "Half", "Count": 128},
        },
        {
            "Name": "Reformatting CopyNode for Output Tensor 0",
            "LayerType": "Reformat",
            "Inputs": [{"Name": "c2", "Dimensions": [2, 8, 32, 32], "Format/Datatype": "Channel major FP16 format"}],
            "Outputs": [{"Name": "y", "Dimensions": [2, 8, 32, 32], "Format/Datatype": "Row major linear FP32"}],
        },
    ],
    "Bindings": ["x", "y"],
}
TIMES = {
    "conv1 + relu1": [0.20, 0.22, 0.21],
    "conv2": [0.05, 0.05, 0.06],
    "Reformatting CopyNode for Output Tensor 0": [0.01, 0.01, 0.01],
    "__myl_Gelu_0": [0.03, 0.03, 0.03],
}


def test_inspector_layers_say_which_precision_each_layer_ran_in() -> None:
    layers = {layer.name: layer for layer in layers_from_inspector(json.dumps(INSPECTOR), TIMES)}
    conv1, conv2 = layers["conv1 + relu1"], layers["conv2"]
    assert conv1.precision == "int8" and conv2.precision == "fp16"  # where INT8 did not take
    assert layers["Reformatting CopyNode for Output Tensor 0"].op_type == "Reformat"
    assert conv1.extra["onnx_nodes"] == ["/conv1/Conv", "/relu1/Relu"]
    assert conv1.extra["tactic"] == "sm90_xmma_fprop_implicit_gemm_int8"
    assert layer_cost(conv1).flops == 2 * (2 * 32 * 32 * 32) * (16 * 3 * 3)
    assert layer_cost(conv2).flops == 2 * (2 * 8 * 32 * 32) * (32 // 2)  # groups from the inspector
    # bytes: int8 activations count 1 byte, weights (int8) and bias (fp32) held inside the layer
    assert layer_cost(conv1).bytes == 2 * 16 * 32 * 32 + 2 * 32 * 32 * 32 + 4608 + 4 * 32
    unknown = layers["__myl_Gelu_0"]  # timed by TensorRT but not listed by the inspector
    assert unknown.op_type == "unknown" and unknown.ms == 0.03


def test_by_precision_shows_where_int8_did_not_take() -> None:
    report = summarize(
        layers_from_inspector(json.dumps(INSPECTOR), TIMES),
        Peaks("gpu", {"fp16": 400e12, "int8": 800e12}, {1 << 30: 3e12}),
        backend="tensorrt",
    )
    shares = {g["precision"]: g["ms"] for g in report["by_precision"]}
    assert shares["int8"] == pytest.approx(0.21) and shares["fp16"] == pytest.approx(0.05 + 0.01)
    rows = {r["name"]: r for r in report["layers"]}
    assert rows["conv1 + relu1"]["peak_precision"] == "int8" and rows["conv2"]["peak_precision"] == "fp16"


def test_inspector_json_that_is_not_one_is_refused() -> None:
    from deploykit.errors import ArtifactCorrupt

    with pytest.raises(ArtifactCorrupt, match="no 'Layers' list"):
        layers_from_inspector(json.dumps({"Bindings": []}), {})


def test_double_layer_times_attach_the_profiler_only_while_profiling(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from deploykit.backends.tensorrt import TensorRTBackend

    fake = use_double(monkeypatch, Scenario(layer_ms={"conv1": 0.5, "head": 0.25}))
    build_with_double(tmp_path, fake)
    session = TensorRTBackend().load(tmp_path / "engine")
    x = {"x": np.random.default_rng(0).standard_normal((4, 3, 8, 8)).astype(np.float32)}
    times = session.layer_times(x, iterations=4, warmup=2)
    assert times == {"conv1": [0.5, 0.505, 0.51, 0.515], "head": [0.25, 0.2525, 0.255, 0.2575]}
    context = fake.last_context
    assert context.enqueues == 6  # warm-up and profiled runs are plain enqueues (no CUDA graph replay)
    assert context.profiler is None and context.enqueue_emits_profile is True  # detached: the gate times without it
    np.testing.assert_array_equal(session.infer(x)["y"], 2 * x["x"])
    session.layer_information()
    assert fake.called("get_engine_information")[-1] == ("get_engine_information", True)  # for this context's shapes


def test_double_profile_engine_on_a_tensorrt_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = use_double(monkeypatch, Scenario(inspector=INSPECTOR, layer_ms={k: v[0] for k, v in TIMES.items()}))
    build_with_double(tmp_path, fake)
    seen = {}

    def peaks(record, layers, folder):
        seen["needed"] = {layer.precision for layer in layers}
        return Peaks("gpu", {"fp16": 400e12, "int8": 800e12}, {1 << 30: 3e12}), ""

    monkeypatch.setattr(profile_run, "machine_peaks", peaks)
    feeds = profile_run.engine_feeds(tmp_path / "engine", {})
    assert feeds["x"].shape == (4, 3, 8, 8)  # the TensorRT profile's opt shape
    report = profile_run.profile_engine(tmp_path / "engine", feeds, ProfileOptions(iterations=3, warmup=1))
    assert report["backend"] == "tensorrt" and report["top"][0] == "conv1 + relu1"
    assert seen["needed"] == {"int8", "fp16", ""} and "IProfiler" in report["timing"]
    assert report["layers"][0]["runs"] == 3


def test_gpu_peaks_measure_fp8_only_on_gpus_that_have_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = []
    monkeypatch.setattr(
        profile_run,
        "cached_peaks",
        lambda d, key, device, needed, measure, measurable: (
            calls.append((key, measurable)) or Peaks("x", {"fp32": 1.0}, {1: 1.0})
        ),
    )
    record = {"backend": "tensorrt", "gpu": "NVIDIA H200", "compute_capability": "9.0", "tensorrt": "10.13.3.9"}
    profile_run.machine_peaks(record, [], tmp_path)
    profile_run.machine_peaks({**record, "gpu": "NVIDIA A100", "compute_capability": "8.0"}, [], tmp_path)
    assert "fp8" in calls[0][1] and "fp8" not in calls[1][1]
    assert calls[0][0]["gpu"] == "NVIDIA H200" and calls[0][0] != calls[1][0]  # one cache per GPU
    note = profile_run.machine_peaks({"backend": "onnxruntime", "provider": "cuda"}, [], tmp_path)
    assert note[0] is None and "measured through TensorRT" in note[1]


# -- real TensorRT (skipped without TensorRT and a GPU) ------------------------------------------------


@pytest.mark.tensorrt
@pytest.mark.gpu
@pytest.mark.skipif(
    not __import__("deploykit.backends.tensorrt", fromlist=["TensorRTBackend"])
    .TensorRTBackend()
    .availability()
    .available,
    reason="needs TensorRT and a GPU",
)
def test_tensorrt_profile_of_fp32_and_int8_engines(tmp_path: Path) -> None:
    """On a GPU: per-layer times from IProfiler, and the INT8 engine's convolutions reported as int8."""
    from deploykit.backends.tensorrt import TensorRTBackend
    from deploykit.config import BuildConfig
    from tests.backends.test_tensorrt import conv_onnx, int8_qdq_onnx

    fp32 = conv_onnx(tmp_path / "fp32.onnx")
    profiles = {"x": ((1, 3, 32, 32), (2, 3, 32, 32), (4, 3, 32, 32))}
    for name, model in (("fp32", fp32), ("int8", int8_qdq_onnx(fp32, tmp_path / "int8.onnx"))):
        TensorRTBackend().build(model, BuildConfig(backend="tensorrt"), tmp_path / name, profiles=profiles)
        report = profile_run.profile_engine(
            tmp_path / name,
            profile_run.engine_feeds(tmp_path / name, {}),
            ProfileOptions(iterations=20, warmup=5),
            peaks_dir=tmp_path / "peaks",
        )
        assert report["layers_count"] >= 1 and report["total_ms"] > 0 and report["floor_ms"] > 0
        precisions = {g["precision"] for g in report["by_precision"]}
        assert ("int8" in precisions) == (name == "int8"), report["by_precision"]
