"""Latency costs of higher-precision layers: rooflines for TensorRT and the CPU, with precision boundaries."""

import pytest

from deploykit.graph.proto import infer_shapes, static_shapes
from deploykit.quant.groups import Group
from deploykit.quant.latency_cost import PEAKS, _flops, cpu_estimate, measure, roofline
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
    assert delta["fp16"] == pytest.approx(
        _flops(conv1, shapes) * (1 / PEAKS["fp16"] - 1 / PEAKS["int8"]) / 1e6, rel=0.01
    )
    assert costs.of({"conv1": "fp32"}) == pytest.approx(costs.top) and "no GPU measured" in costs.method


def test_timing_whole_graphs_interleaved():
    small, big = models.cnn((8,), size=32), models.cnn((64, 64, 64), size=32)
    ms = measure({"small": small, "big": big}, models.images(1, size=32)[0], "extended", budget_s=0.5)
    assert set(ms) == {"small", "big"} and ms["big"] > ms["small"] > 0


def test_the_cpu_estimate_is_load_independent_and_knows_depthwise_int8_gains_nothing():
    from deploykit.config import QuantizeConfig
    from deploykit.quant.groups import find_groups
    from deploykit.quant.quantize import Job, quantize_model
    from deploykit.quant.reader import SampleStream

    model = models.depthwise()
    result = quantize_model(
        Job(model, QuantizeConfig(precision="int8"), "onnxruntime", SampleStream(models.images(8, size=32)))
    )
    groups = {g.name: g for g in find_groups(result.model)}
    one, two = (cpu_estimate(result.reference, result.model, groups, ("int8", "fp32")) for _ in range(2))
    assert one == two  # nothing measured: the same graph gets the same costs under any load
    convs = {n.name: n for n in result.reference.graph.node if n.op_type == "Conv"}
    depthwise = [g for g in groups if g in convs and any(a.name == "group" and a.i > 1 for a in convs[g].attribute)]
    dense = [g for g in groups if g in convs and g not in depthwise]
    assert depthwise and dense
    from deploykit.quant.latency_cost import _cpu_us

    shapes = static_shapes(infer_shapes(result.reference))
    for g in depthwise:  # INT8 depthwise is no faster on the CPU
        assert _cpu_us(convs[g], shapes, "int8") >= _cpu_us(convs[g], shapes, "fp32")
    assert all(one.delta[g]["fp32"] > 0 for g in dense)
    island = dense[len(dense) // 2]
    assert one.of({island: "fp32"}) > one.base + one.delta[island]["fp32"]  # a float island pays its conversions
    everything = dict.fromkeys(groups, "fp32")
    assert one.of(everything) == pytest.approx(one.top)


def test_a_patchs_conversions_as_arrays_give_the_per_tensor_sum_to_the_same_bits():
    """Borders.cost counts each tensor's precisions as arrays: on random graphs of groups and random
    patches (precisions that hand INT8 on alike among them) it equals the sum of the per-tensor costs
    in tensor order, bit for bit (the search compares these sums)."""
    import random

    from deploykit.quant.latency_cost import Borders

    rng = random.Random(3)
    for _ in range(50):
        groups = [f"g{i}" for i in range(rng.randint(1, 30))]
        tensors = tuple(
            (
                rng.random() * 10 ** rng.randint(-3, 3),
                rng.choice(["", *groups]),
                tuple(rng.sample(["", *groups], min(3, len(groups) + 1))),
            )
            for _ in range(rng.randint(1, 60))
        )
        alike = rng.choice([(), ("int8", "fp8")])
        borders = Borders(tensors, "int8", rng.choice(["fp32", "int8", "fp16"]), alike)
        for _ in range(20):
            patch = {g: rng.choice(["fp32", "fp16", "fp8"]) for g in rng.sample(groups, rng.randint(0, len(groups)))}
            direct = sum(borders._tensor(t, patch) for t in tensors)
            assert borders.cost(patch) == direct
