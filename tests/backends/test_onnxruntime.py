"""The ONNX Runtime backend: offline optimization, loading, and providers that cannot start."""

import json

import numpy as np
import pytest

from deploykit.backends import get_backend
from deploykit.backends.onnxruntime import provider_status
from deploykit.config import BuildConfig
from deploykit.errors import BackendUnavailable
from deploykit.graph.run import session_from_onnx
from tests.conftest import run_cli
from tests.stages.test_ingest import small_onnx


@pytest.mark.parametrize("level", ["disabled", "basic", "extended", "all"])
def test_built_engine_matches_the_graph_as_written(tmp_path, level):
    model = small_onnx(tmp_path / "model.onnx")
    backend = get_backend("onnxruntime")
    (tmp_path / "engine").mkdir()
    summary = backend.build(model, BuildConfig(optimization_level=level), tmp_path / "engine")
    assert summary["optimization_level"] == level
    assert json.loads((tmp_path / "engine" / "engine.json").read_text())["provider"] == "cpu"
    session = backend.load(tmp_path / "engine")
    x = {"x": np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)}
    expected = session_from_onnx(model, "onnxruntime", level="disabled").infer(x)["y"]
    np.testing.assert_allclose(session.infer(x)["y"], expected, rtol=1e-6, atol=1e-6)
    assert session.outputs[0].name == "y" and session.inputs[0].shape == ("N", 4)


def test_level_all_is_keyed_to_this_cpu():
    backend = get_backend("onnxruntime")
    assert "device" in backend.build_fingerprint(BuildConfig(optimization_level="all"))
    assert "device" not in backend.build_fingerprint(BuildConfig(optimization_level="extended"))


@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_gpu_provider_that_cannot_start_exits_3_with_the_reason(tmp_path, provider):
    status = provider_status(provider)
    if status.available:
        pytest.skip(f"{provider} provider works on this machine")
    with pytest.raises(BackendUnavailable, match="cannot start|has no"):
        get_backend("onnxruntime").build_fingerprint(BuildConfig(provider=provider))
    model = small_onnx(tmp_path / "model.onnx")
    code, _, err = run_cli("build", str(model), "--provider", provider, "-w", str(tmp_path / "store"))
    assert code == 3
    assert "ExecutionProvider" in err


@pytest.mark.parametrize("level", ["extended", "all"])
def test_fp8_engine_keeps_the_relu_before_an_fp8_quantizer(tmp_path, level):
    """ORT's ReluQuantRewrite drops that Relu; the build must disable it for FP8 graphs."""
    import onnx

    from tests.graph.test_run import fp8_relu_graph

    onnx.save(fp8_relu_graph(), tmp_path / "fp8.onnx")
    (tmp_path / "engine").mkdir()
    backend = get_backend("onnxruntime")
    summary = backend.build(tmp_path / "fp8.onnx", BuildConfig(optimization_level=level), tmp_path / "engine")
    assert summary["disabled_optimizers"] == ["ReluQuantRewrite"]
    x = {"x": np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)}
    y = backend.load(tmp_path / "engine").infer(x)["y"]
    assert y.min() >= 0 and np.count_nonzero(y) > 10
