"""quantize_model on models from other exporters and on bad input: clear errors, named things."""

import numpy as np
import pytest

from deploykit.config import QuantizeConfig
from deploykit.errors import ConfigError, ModelError
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.reader import SampleStream
from deploykit.quant.reasons import Kept
from tests.quant import models


def job(model, flavour="tensorrt", samples=None, **cfg):
    cfg.setdefault("precision", "int8")
    return Job(model, QuantizeConfig(**cfg), flavour, SampleStream(samples or models.images(8)))


def test_a_model_with_qdq_is_refused_naming_what_it_holds():
    qdq = quantize_model(job(models.cnn((8,)), high_precision="fp32")).model
    with pytest.raises(ModelError, match=r"already quantized \(\d+ DequantizeLinear, \d+ QuantizeLinear\)"):
        quantize_model(job(qdq))


def test_a_model_with_dynamic_quantization_is_refused_or_passed_through():
    model = models.conv_integer()
    samples = [{"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)}]
    with pytest.raises(ModelError, match="1 ConvInteger, 1 DynamicQuantizeLinear"):
        quantize_model(job(model, samples=samples))
    result = quantize_model(job(model, samples=samples, already_quantized="pass"))
    assert result.passthrough and result.model is model and "passed through unchanged" in result.notes[0]


def test_int4_on_a_model_without_matmul_names_the_problem():
    with pytest.raises(ModelError, match="int4 quantizes MatMul/Gemm weights, and the model has none.*Conv"):
        quantize_model(job(models.cnn((8,)), precision="int4"))


def test_exclusion_of_a_missing_node_lists_close_names():
    with pytest.raises(ModelError, match="exclude_nodes names 'conv_1', which the model does not have.*close: conv1"):
        quantize_model(job(models.cnn((8, 16)), exclude_nodes=("conv_1",)))
    with pytest.raises(ModelError, match="keep_fp32_nodes names 'nope'"):
        quantize_model(job(models.cnn((8, 16)), keep_fp32_nodes=("nope",)))


def quantized_weights(model):
    """Nodes whose weight input comes out of a DequantizeLinear (they compute quantized)."""
    made_by = {o: n.op_type for n in model.graph.node for o in n.output}
    return {n.name for n in model.graph.node if len(n.input) > 1 and made_by.get(n.input[1]) == "DequantizeLinear"}


@pytest.mark.parametrize("flavour", ["tensorrt", "onnxruntime"])
def test_exclusions_by_name_op_type_and_pattern_stay_unquantized(flavour):
    from deploykit.quant.prepare import quantized_node_names

    model = models.cnn((16, 16, 16))
    result = quantize_model(
        job(model, flavour, exclude_nodes=("conv0",), exclude_patterns=("^conv2$", "nomatch"), high_precision="fp32")
    )
    assert {"conv0", "conv2"}.isdisjoint(quantized_weights(result.model))
    assert {"conv1", "head"} <= quantized_weights(result.model)
    if flavour == "tensorrt":  # ModelOpt also leaves the inputs of an excluded node in float
        assert {"conv0", "conv2"}.isdisjoint(quantized_node_names(result.model))
    assert result.excluded["conv0"].code == "by_name"
    assert result.excluded["conv2"] == Kept.BY_PATTERN(pattern="^conv2$")
    assert "exclude_patterns 'nomatch' matches no node" in result.notes
    by_type = quantize_model(job(model, flavour, exclude_op_types=("Conv",)))
    assert not quantized_weights(by_type.model)


def test_bounded_exclude_keeps_sigmoid_readers_out_of_quantization():
    from onnx import TensorProto, helper

    model = models.cnn((8,), head="sigmoid")
    # a consumer of the Sigmoid output that a quantizer would quantize
    w = helper.make_tensor("w2", TensorProto.FLOAT, [4, 4, 1, 1], np.eye(4, dtype=np.float32).ravel())
    model.graph.initializer.append(w)
    model.graph.node.append(helper.make_node("Conv", ["y", "w2"], ["z"], name="after_sigmoid"))
    model.graph.output[0].name = "z"
    result = quantize_model(job(model, "onnxruntime", bounded="exclude"))
    assert result.excluded["after_sigmoid"] == Kept.BOUNDED_READER(tensor="y")
    assert result.ranges["y"].method == "max"


def test_precision_fp16_without_calibration_checks_on_random_inputs():
    result = quantize_model(Job(models.cnn((8,)), QuantizeConfig(precision="fp16"), "tensorrt", None))
    assert result.check.passed and result.check.samples == 2
    assert not result.ranges


def test_missing_activation_in_the_config_combination_is_a_config_error():
    with pytest.raises(ConfigError, match="int4 with target onnxruntime"):
        quantize_model(job(models.matmul_mlp(), "onnxruntime", precision="int4"))


@pytest.mark.parametrize("flavour", ["tensorrt", "onnxruntime"])
def test_auto_method_keeps_the_ranges_whose_model_checks_best(flavour, monkeypatch):
    from deploykit.config import parity_preset
    from deploykit.quant import modelopt_flavour, ort_flavour
    from deploykit.quant.check import Reference, check
    from deploykit.quant.quantize import _opener
    from deploykit.quant.ranges import AUTO_METHODS

    calls = []
    for module in (modelopt_flavour, ort_flavour):
        real = module.quantize
        monkeypatch.setattr(module, "quantize", lambda *a, _real=real, **k: calls.append(1) or _real(*a, **k))
    samples = models.images(64)
    the_job = job(models.cnn((16, 16)), flavour, samples=samples, high_precision="fp32")
    result = quantize_model(the_job)
    note = next(n for n in result.notes if n.startswith("calibration method auto"))
    listed = note.split(": mean rel-L2 on 4 held-out samples ")[1].split(" -> ")[0]
    scores = {m: float(v) for m, v in (item.split() for item in listed.split(", "))}
    assert set(scores) == set(AUTO_METHODS)
    chosen = result.settings.method
    assert scores[chosen] == min(scores.values())
    assert len(calls) == 1  # the quantizer placed Q/DQ once; each range set only rewrote scales
    preset = parity_preset(the_job.cfg)
    again = check(Reference(result.reference, samples[:4]), result.model, _opener(the_job), lambda _: preset)
    assert again.typical() == pytest.approx(scores[chosen], rel=1e-3)  # the chosen graph is the one scored (4 digits)
    assert "the first 16 are held out" in " ".join(result.notes)
    assert {r.method for r in result.ranges.values()} <= {chosen, "max"}  # bounded/outputs stay at max


@pytest.mark.parametrize("flavour", ["tensorrt", "onnxruntime"])
def test_with_validation_data_auto_keeps_the_ranges_parity_task_scores_best(flavour):
    """Parity's task on its validation data decides, not rel-L2 on held-out calibration samples: on
    this depthwise network (tensorrt flavour) rel-L2 ranks percentile first and the IoU ranks MSE first."""
    from deploykit.config import ParityConfig, ProbabilityMapCheck, RepairConfig, TaskChecks
    from deploykit.quant.judge import Judging
    from deploykit.quant.ranges import AUTO_METHODS

    model, data, val = models.depthwise(), models.images(40, size=32), models.images(8, size=32, seed=9)
    parity = ParityConfig(tasks=TaskChecks(probability_map=(ProbabilityMapCheck("prob", min_iou=0.99),)))
    judging = Judging(parity, val, "8 validation samples")

    def run(method):
        return quantize_model(
            Job(
                model,
                QuantizeConfig(
                    precision="int8", high_precision="fp32", method=method, repair=RepairConfig(auto=False)
                ),  # the plain graphs
                flavour,
                SampleStream(data),
                judging=judging,
            )
        )

    iou = {m: run(m).check.tasks[0]["metrics"]["iou"] for m in AUTO_METHODS}  # each method's graph on its own
    auto = run("auto")
    note = next(n for n in auto.notes if n.startswith("calibration method auto"))
    assert "task-metric rank sums on 8 validation samples" in note
    assert not any("held out for the check" in n for n in auto.notes)  # the validation samples judge
    assert any(n.startswith("ranges from all 40 calibration samples") for n in auto.notes)
    assert iou[auto.settings.method] == max(iou.values())
    assert auto.check.tasks[0]["metrics"]["iou"] == iou[auto.settings.method]


def test_rank_sums_share_ranks_on_ties_and_count_a_missing_metric_last():
    from deploykit.quant.judge import rank_sums

    got = rank_sums({"a": {"x": 1.0, "y": -0.9}, "b": {"x": 1.0, "y": -0.95}, "c": {"x": 0.5}})
    assert got == {"a": 2.5 + 2, "b": 2.5 + 1, "c": 1 + 3}
