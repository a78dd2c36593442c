"""split_large_weights: the >2 GB path, exercised with small thresholds instead of 2 GB of data."""

import numpy as np
import onnx
import pytest

from deploykit.errors import ConfigError
from deploykit.graph.files import load_model, save_model
from tests.surgery.models import apply, feeds_for, legacy_detector, ort_run


def test_weights_move_to_a_data_file_and_the_model_still_runs(tmp_path):
    model = legacy_detector(weights_as="initializer")
    # It runs last (weights later passes create stay inline), but passes after it still work.
    out, reports = apply(
        model,
        "fold_batchnorm",
        {"split_large_weights": {"model_limit_bytes": 1000, "tensor_threshold_bytes": 256}},
        "remove_noops",
    )
    details = reports[1]["details"]
    assert details["tensors"] > 0 and details["location"] == "model.onnx.data"
    assert all(r["numerics"].startswith("outputs match") for r in reports)
    assert save_model(out, tmp_path / "model.onnx") == [tmp_path / "model.onnx"]
    assert (tmp_path / "model.onnx.data").is_file()  # written by onnx with the model, as the tensors say
    assert (tmp_path / "model.onnx").stat().st_size < 20_000 < (tmp_path / "model.onnx.data").stat().st_size
    back = load_model(tmp_path / "model.onnx")
    feeds = feeds_for(model)
    np.testing.assert_allclose(ort_run(back, feeds)["logits"], ort_run(model, feeds)["logits"], rtol=1e-5, atol=1e-5)


def test_small_model_is_left_alone_by_default():
    _, reports = apply(legacy_detector(), "split_large_weights")
    assert reports[0]["modified"] is False and "under the 2048.0 MiB limit" in reports[0]["reason"]


def test_location_must_stay_beside_the_model():
    with pytest.raises(ConfigError, match="must be a plain file name"):
        apply(legacy_detector(), {"split_large_weights": {"location": "../weights.bin", "model_limit_bytes": 0}})


def test_runner_handles_models_over_the_protobuf_limit(monkeypatch):
    from deploykit.graph import files

    monkeypatch.setattr(files, "PROTO_LIMIT", 10_000)  # what a 2 GB model does, with a small one
    model = legacy_detector(weights_as="initializer")
    assert model.ByteSize() > 10_000
    out, reports = apply(model, "remove_noops")
    assert reports[0]["numerics"].startswith("outputs match")
    assert isinstance(out, onnx.ModelProto)
