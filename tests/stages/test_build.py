"""The build stage's TensorRT wiring (profiles from the config, the timing cache as its own
artifact), driven through FakeTensorRT — a recording test double, not TensorRT. And the real
thing's absence: `--backend tensorrt` exits 3 with the reason."""

import json

import pytest

import deploykit
from deploykit.backends.tensorrt import TensorRTBackend
from tests.backends.test_tensorrt import tiny_onnx, use_double
from tests.conftest import run_cli

CONFIG = """
name: t
source: {onnx: model.onnx}
inputs: [{name: x, shape: [batch, 3, 8, 8]}]
dims: {batch: {min: 1, opt: 2, max: 6}}
build: {backend: tensorrt}
"""


def test_double_build_stage_passes_profiles_and_keeps_the_timing_cache(monkeypatch, tmp_path):
    fake = use_double(monkeypatch)
    tiny_onnx(tmp_path / "model.onnx")
    (tmp_path / "deploykit.yaml").write_text(CONFIG)
    result = deploykit.convert(tmp_path / "deploykit.yaml", workdir=tmp_path / "store", until="build")
    assert fake.called("set_shape") == [("set_shape", "x", (1, 3, 8, 8), (2, 3, 8, 8), (6, 3, 8, 8))]
    engine = result.artifacts["engine"]
    assert engine.manifest.summary["backend"] == "tensorrt"
    cache = engine.manifest.summary["timing_cache_artifact"]
    store = result.workdir
    first = (store / "objects" / cache / "timing.cache").read_bytes()
    assert first and fake.called("create_timing_cache") == [("create_timing_cache", b"")]
    # Another builder setting: a new engine, built with the stored timings.
    deploykit.convert(
        tmp_path / "deploykit.yaml", workdir=store, until="build", build__tensorrt={"builder_optimization_level": 2}
    )
    assert fake.called("create_timing_cache")[-1] == ("create_timing_cache", first)


def test_double_engine_key_follows_gpu_and_plugins(monkeypatch, tmp_path):
    from tests.backends.trt_double import FakeGpu

    use_double(monkeypatch)
    base = TensorRTBackend().build_fingerprint(deploykit.config.BuildConfig(backend="tensorrt"))
    use_double(monkeypatch, gpu=FakeGpu(name="NVIDIA H200", compute_capability="9.0"))
    other = TensorRTBackend().build_fingerprint(deploykit.config.BuildConfig(backend="tensorrt"))
    assert base["compute_capability"] != other["compute_capability"] or base["gpu"] != other["gpu"]


def test_tensorrt_backend_absent_exits_3_with_the_reason(tmp_path):
    if TensorRTBackend().availability().available:
        pytest.skip("TensorRT works on this machine")
    tiny_onnx(tmp_path / "model.onnx")
    (tmp_path / "deploykit.yaml").write_text(CONFIG)
    code, _, err = run_cli(
        "convert", str(tmp_path / "deploykit.yaml"), "-w", str(tmp_path / "store"), "--allow-missing-target"
    )
    assert code == 3
    errors = [line for line in err.splitlines() if line.startswith("error:")]  # progress lines go to stderr too
    assert len(errors) == 1 and "tensorrt" in errors[0].lower() and "hint:" in err
    # the TensorRT lint ran first (no device needed) and said whether the graph would parse
    kinds = {json.loads((d / "manifest.json").read_text())["kind"] for d in (tmp_path / "store" / "objects").iterdir()}
    assert "lint-report" in kinds and "engine" not in kinds
