"""Calibration statistics reused by a rerun (quant/calib_cache.py): the same ranges as a fresh pass for
any method, no pass over the samples, and never reused for other samples, another graph or settings."""

import numpy as np
import pytest

from deploykit.config import QuantizeConfig
from deploykit.quant import calib_cache
from deploykit.quant import quantize as q
from deploykit.quant.calib_cache import CalibrationCache
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.reader import SampleStream
from tests.quant import models


def run(model, data, stored, identity="these samples", flavour="onnxruntime", **cfg):
    cache = CalibrationCache({"data": identity}, stored.get)
    result = quantize_model(
        Job(model, QuantizeConfig(precision="int8", **cfg), flavour, SampleStream(data), calibration_cache=cache)
    )
    if result.calibration is not None:
        stored.setdefault(*result.calibration)
    return result


def no_pass(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("calibration ran a pass over the samples")

    monkeypatch.setattr(q, "calibrate", refuse)


@pytest.mark.parametrize("flavour", ["onnxruntime", "tensorrt"])
@pytest.mark.parametrize("method", ["auto", "percentile", "mse"])
def test_a_rerun_reads_the_statistics_and_quantizes_as_a_fresh_pass_does(monkeypatch, flavour, method):
    model, data = models.cnn((8, 16), outlier=40.0), models.images(24, seed=4)
    stored = {}
    run(model, data, stored, flavour=flavour, method="entropy")  # the first run, another method: its statistics
    fresh = run(model, data, {}, flavour=flavour, method=method)  # a pass of its own, nothing stored
    no_pass(monkeypatch)
    again = run(model, data, stored, flavour=flavour, method=method)
    assert again.ranges == fresh.ranges and again.settings == fresh.settings
    assert again.model.SerializeToString() == fresh.model.SerializeToString()
    assert again.range_samples == fresh.range_samples and again.check_samples == fresh.check_samples
    assert any("calibration statistics reused from an earlier artifact" in n for n in again.notes)
    assert not any("statistics reused" in n for n in fresh.notes)
    assert again.calibration[0] == fresh.calibration[0]  # filed under the same key again


def test_other_samples_another_graph_or_other_settings_are_calibrated_again(monkeypatch):
    """The samples' identity is the caller's (the stage: its data source's file digests and count)."""
    model, data = models.cnn((8, 16)), models.images(16, seed=5)
    stored = {}
    first = run(model, data, stored)
    calls = []
    real = q.calibrate
    monkeypatch.setattr(q, "calibrate", lambda *a, **k: calls.append(1) or real(*a, **k))
    for changed in (
        {"identity": "other samples"},
        {"model": models.cnn((8, 16), seed=1)},
        {"num_bins": 1024},
    ):
        kwargs = {"model": model, "identity": "these samples", **changed}
        result = run(kwargs.pop("model"), data, stored, **kwargs)
        assert not any("statistics reused" in n for n in result.notes), changed
    assert len(calls) == 3
    assert len({k for k in stored}) == 4 and first.calibration[0] in stored


def test_statistics_of_another_layout_are_not_trusted(monkeypatch):
    model, data = models.cnn((8, 16)), models.images(16, seed=6)
    stored = {}
    first = run(model, data, stored)
    key, arrays = first.calibration
    broken = {**arrays, "row": arrays["row"][:-1]}  # one tensor short
    fresh = run(model, data, {key: broken})
    assert fresh.ranges == first.ranges and not any("statistics reused" in n for n in fresh.notes)
    missing = {k: v for k, v in arrays.items() if k != "counts"}
    assert run(model, data, {key: missing}).ranges == first.ranges
    beyond = {**arrays, "row": arrays["row"] + len(arrays["counts"])}  # rows no histogram has
    assert run(model, data, {key: beyond}).ranges == first.ranges


def test_packed_statistics_keep_shared_histograms_shared():
    """Tensors that hold the same values (a Reshape's output) share one histogram in the pass; so do
    the unpacked ones, stored once."""
    import onnx
    from onnx import helper

    from deploykit.quant.ranges import RangeSettings, calibrate

    model = models.cnn((8, 16))
    model.graph.node.append(helper.make_node("Flatten", ["relu1"], ["relu1_flat"], name="flat"))
    model.graph.output.append(helper.make_tensor_value_info("relu1_flat", onnx.TensorProto.FLOAT, None))
    model = onnx.shape_inference.infer_shapes(model)
    settings = RangeSettings("percentile")
    found = calibrate(model, models.images(8, seed=7), settings, ("max", "histogram"))
    arrays = calib_cache.pack(found)
    back = calib_cache.unpack(arrays, settings, lambda n: [])
    names = list(found.statistics.stats)
    assert len(arrays["counts"]) == len({id(found.statistics.stats[n]) for n in names}) < len(names)
    for a in names:
        for b in names:
            assert (found.statistics.stats[a] is found.statistics.stats[b]) == (
                back.statistics.stats[a] is back.statistics.stats[b]
            )
    assert back.sets == found.sets and back.infinite == found.infinite and back.seen == found.seen
    assert all(np.array_equal(back.statistics.stats[n].counts, found.statistics.stats[n].counts) for n in names)
