"""Latency costs of higher-precision layers: a roofline for TensorRT, the profiler on the CPU."""

import pytest

from deploykit.graph.proto import infer_shapes, static_shapes
from deploykit.quant.groups import Group
from deploykit.quant.latency_cost import PEAKS, _flops, measure, roofline
from tests.quant import models


def test_convolution_flops_and_a_compute_bound_layer_costs_more_at_higher_precision():
    model = infer_shapes(models.cnn((64, 128), size=64))
    shapes = static_shapes(model)
    conv1 = next(n for n in model.graph.node if n.name == "conv1")
    assert _flops(conv1, shapes) == 2.0 * 128 * 64 * 64 * 64 * 3 * 3  # N=1 (a named batch dim counts as 1)
    groups = {"conv1": Group("conv1", ("conv1", "relu1"), "Conv+Relu")}
    costs = roofline(model, groups, ("int8", "fp8", "fp16", "fp32"), "int8", "fp16")
    delta = costs.delta["conv1"]
    assert delta["fp8"] == pytest.approx(0.0) and 0 < delta["fp16"] < delta["fp32"]
    assert delta["fp16"] == pytest.approx(_flops(conv1, shapes) * (1 / PEAKS["fp16"] - 1 / PEAKS["int8"]) / 1e6, rel=0.01)
    assert costs.of({"conv1": "fp32"}) == pytest.approx(costs.top) and "no GPU measured" in costs.method


def test_timing_whole_graphs_interleaved():
    small, big = models.cnn((8,), size=32), models.cnn((64, 64, 64), size=32)
    ms = measure({"small": small, "big": big}, models.images(1, size=32)[0], "extended", budget_s=0.5)
    assert set(ms) == {"small", "big"} and ms["big"] > ms["small"] > 0
