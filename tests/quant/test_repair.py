"""The precision-repair loop: a model with an outlier-sensitive layer fails INT8 and is repaired."""

import pytest

from deploykit.diagnose import TensorError
from deploykit.quant.check import Check
from deploykit.quant.config import QuantizeConfig, RepairConfig
from deploykit.quant.graph import quantized_node_names
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.reader import SampleStream
from deploykit.quant.repair import repair_loop
from tests.quant import models


@pytest.mark.parametrize("flavour", ["tensorrt", "onnxruntime"])
def test_outlier_layer_fails_plain_int8_and_the_loop_repairs_it(flavour):
    model, data = models.cnn((16, 16), outlier=300.0), models.images(24)
    plain = quantize_model(Job(model, QuantizeConfig(precision="int8"), flavour, SampleStream(data)))
    assert not plain.check.passed and plain.check.metrics["head_out"]["rel_l2"] > 0.3

    cfg = QuantizeConfig(precision="int8", repair=RepairConfig(enabled=True))
    fixed = quantize_model(Job(model, cfg, flavour, SampleStream(data)))
    assert fixed.check.passed and fixed.check.metrics["head_out"]["rel_l2"] < 0.05
    assert "conv1" in fixed.repair.added  # the conv that reads the outlier channel
    assert len(fixed.repair.added) <= 2 and fixed.repair.stopped == "passed"
    steps = fixed.repair.to_dict()["steps"]
    assert steps[0]["added"] == [] and not steps[0]["passed"] and steps[-1]["passed"]
    assert steps[-1]["worst_rel_l2"] < steps[0]["worst_rel_l2"] / 5
    assert "repair step 1" in fixed.excluded[fixed.repair.added[0]]


@pytest.mark.parametrize("flavour", ["tensorrt", "onnxruntime"])
def test_a_depthwise_network_reaches_a_tighter_tolerance_than_int8_or_fp8_alone(flavour):
    """MobileNetV3-style blocks lose accuracy under every plain recipe; the loop trades INT8 nodes for
    higher precision (FP16 in the tensorrt flavour, FP32 in onnxruntime) until the tolerance holds."""
    from deploykit.quant.config import QuantTolerance, QuantTolerances

    model, data = models.depthwise(), models.images(40, size=32)
    tight = QuantTolerances(int8=QuantTolerance(rel_l2=0.04, cosine=0.999), fp8=QuantTolerance(rel_l2=0.04, cosine=0.999))
    plain = quantize_model(Job(model, QuantizeConfig(precision="int8", tolerances=tight), flavour, SampleStream(data)))
    assert not plain.check.passed
    if flavour == "tensorrt":
        fp8 = quantize_model(Job(model, QuantizeConfig(precision="fp8", tolerances=tight), flavour, SampleStream(data)))
        assert not fp8.check.passed

    repair = RepairConfig(enabled=True, nodes_per_step=2, max_iterations=8, max_nodes=14)
    fixed = quantize_model(Job(model, QuantizeConfig(precision="int8", tolerances=tight, repair=repair), flavour,
                               SampleStream(data)))
    assert fixed.check.passed and fixed.repair.stopped == "passed"
    assert fixed.check.worst() < plain.check.worst() * 0.9
    convs = [n.name for n in model.graph.node if n.op_type == "Conv"]
    still_int8 = [c for c in convs if c in quantized_node_names(fixed.model)]
    assert len(still_int8) >= len(convs) // 2  # a patch, not a retreat to FP32
    assert all(fixed.excluded[n].startswith("repair step") for n in fixed.repair.added)


def fake_check(worst):
    return Check({"y": {"rel_l2": worst}}, [] if worst < 0.1 else [f"y: rel_l2 {worst}"], "fake", 1)


def err(node, growth):
    return TensorError(f"{node}_out", node, "Conv", node, 0, growth, 0.9, 1.0, growth, 0)


def test_loop_stops_at_the_node_budget_and_records_every_step():
    built = []

    def build(excluded):
        built.append(sorted(excluded))
        return len(built)

    result = repair_loop(build, lambda m: fake_check(0.5), lambda m, ex: [err(f"n{len(ex)}", 0.3)],
                         RepairConfig(enabled=True, max_iterations=10, max_nodes=3), {"user": "excluded by name"})
    assert result.stopped == "node budget spent (3)" and result.added == ["n1", "n2", "n3"]
    assert built[0] == ["user"] and built[-1] == ["n1", "n2", "n3", "user"]
    assert not result.check.passed and len(result.steps) == 4


def test_loop_stops_when_nothing_is_left_to_exclude_or_at_the_iteration_budget():
    r = repair_loop(lambda ex: 0, lambda m: fake_check(0.5), lambda m, ex: [], RepairConfig(enabled=True), {})
    assert r.stopped == "no quantized node adds error any more" and len(r.steps) == 1
    r = repair_loop(lambda ex: 0, lambda m: fake_check(0.5), lambda m, ex: [err(f"n{len(ex)}", 0.1)],
                    RepairConfig(enabled=True, max_iterations=3, max_nodes=50), {})
    assert r.stopped == "iteration budget spent (3)" and len(r.steps) == 3


def test_loop_does_nothing_when_the_first_check_passes():
    r = repair_loop(lambda ex: "model", lambda m: fake_check(0.01), lambda m, ex: pytest.fail("no diagnosis needed"),
                    RepairConfig(enabled=True), {})
    assert r.check.passed and r.stopped == "passed" and r.added == []
