"""The tensorrt flavour: Q/DQ that follows TensorRT's explicit-quantization rules, with deploykit's ranges."""

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

from deploykit.config import ParityConfig, ProbabilityMapCheck, QuantizeConfig, TaskChecks
from deploykit.quant.judge import Judging
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.reader import SampleStream
from deploykit.quant.reasons import Kept
from deploykit.quant.scales import activation_quantizers
from tests.quant import models


def quantize(model, precision="int8", samples=None, judging=None, **cfg):
    cfg.setdefault("high_precision", "fp32")
    return quantize_model(
        Job(
            model,
            QuantizeConfig(precision=precision, **cfg),
            "tensorrt",
            SampleStream(samples or models.images(16)),
            judging=judging or Judging(),
        )
    )


def initializers(model):
    return {i.name: i for i in model.graph.initializer}


@pytest.mark.parametrize(
    "precision, zp_type, qmax", [("int8", TensorProto.INT8, 127.0), ("fp8", TensorProto.FLOAT8E4M3FN, 448.0)]
)
def test_graph_follows_tensorrt_rules_and_scales_come_from_deploykit_ranges(precision, zp_type, qmax):
    result = quantize(models.cnn((32, 32)), precision)
    model, inits = result.model, initializers(result.model)
    assert next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 19
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        zp = inits[node.input[2]]
        assert zp.data_type == zp_type and not np.any(numpy_helper.to_array(zp).astype(np.float32))  # symmetric
        assert np.all(numpy_helper.to_array(inits[node.input[1]]) > 0)
    weight_dq = [
        n
        for n in model.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0].endswith("weight_QuantizeLinear_Output")
    ]
    for dq in weight_dq:  # per-channel weights: a 1-D scale over output channels, axis 0
        scale = numpy_helper.to_array(inits[dq.input[1]])
        assert scale.ndim == 1 and scale.size > 1
        assert next(a.i for a in dq.attribute if a.name == "axis") == 0
    acts = activation_quantizers(model)
    assert {src for _, src in acts} >= {"relu0"}
    for q, src in acts:  # deploykit's ranges, not ModelOpt's one-sample calibration
        scale = float(numpy_helper.to_array(inits[q.input[1]]))
        assert scale == pytest.approx(result.ranges[src].amax / qmax, rel=1e-6)


def test_convolutions_modelopt_skips_are_listed_with_the_reason():
    result = quantize(models.cnn((32, 32)), "fp8")  # ModelOpt runs no FP8 conv with < 16 input channels
    assert result.unquantized["conv0"] == Kept.PLACEMENT_RULES(
        op="Conv", shape=" (weight [32, 3, 3, 3])", tool="ModelOpt"
    )
    assert "conv1" not in result.unquantized


def test_fp8_keeps_every_relu():
    """ORT's quantizer drops Relu in front of asymmetric quantizers; an FP8 graph without its Relu is
    wrong (cosine 0.57 measured). ModelOpt quantizes symmetrically: the Relus must survive."""
    result = quantize(models.cnn((32, 32)), "fp8")
    assert sum(n.op_type == "Relu" for n in result.model.graph.node) == 2
    assert "conv1" in __import__("deploykit.quant.prepare", fromlist=["x"]).quantized_node_names(result.model)
    assert result.check.passed and result.check.metrics["head_out"]["cosine"] > 0.999


def test_fp16_high_precision_converts_the_rest_and_keeps_io_types():
    result = quantize(models.cnn((8, 16)), "int8", high_precision="fp16")
    model = result.model
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert any(i.data_type == TensorProto.FLOAT16 for i in model.graph.initializer)
    assert "FP16 tensors emulated" in result.check.evaluator and result.check.passed


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_the_float_rest_is_converted_once_for_every_range_set_method_auto_races(precision, monkeypatch):
    """The range sets differ only in activation scales: one FP16 conversion, its scales rewritten per
    set, gives the bytes a conversion per set gives (the race's choice and the final graph alike)."""
    from deploykit.quant import fp16, scales

    real, calls = fp16.to_fp16, []

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(fp16, "to_fp16", counted)
    model, data = models.depthwise(), models.images(16, size=32)
    parity = ParityConfig(tasks=TaskChecks(probability_map=(ProbabilityMapCheck("prob", min_iou=0.9),)))
    validation = Judging(parity, models.images(6, size=32, seed=5), "6 validation samples")  # sets race on it
    once = quantize(model, precision, data, high_precision="fp16", method="auto", judging=validation)
    converted_once, calls[:] = len(calls), []
    monkeypatch.setattr(scales, "copy_activation_scales", lambda source, target: False)  # convert every set
    each = quantize(model, precision, data, high_precision="fp16", method="auto", judging=validation)
    assert converted_once == 1 and len(calls) >= 4  # max, percentile, MSE, entropy (and the final graph)
    assert once.settings.method == each.settings.method
    assert once.model.SerializeToString() == each.model.SerializeToString()


def test_modelopt_leaves_onnx_runtime_quantization_as_it_found_it():
    """ModelOpt deletes Relu/Sigmoid from ORT's QDQ registry and patches calibrators process-wide."""
    from onnxruntime.quantization import calibrate
    from onnxruntime.quantization.registry import QDQRegistry

    before_registry, before_calibrator = dict(QDQRegistry), calibrate.MinMaxCalibrater.compute_data
    quantize(models.cnn((8,)), "int8")
    assert dict(QDQRegistry) == before_registry
    assert calibrate.MinMaxCalibrater.compute_data is before_calibrator


def test_weights_in_constant_nodes_of_an_opset_11_model_are_quantized_per_channel():
    old = models.with_constant_weights(models.cnn((8, 16), opset=11))
    assert not old.graph.initializer and sum(n.op_type == "Constant" for n in old.graph.node) == 6
    result = quantize(old, "int8")
    assert result.preparation["constants_to_initializers"] == 6 and result.preparation["opset_from"] == 11
    weight_dq = [
        n
        for n in result.model.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0].endswith("weight_QuantizeLinear_Output")
    ]
    assert len(weight_dq) == 3  # all three convolutions, per channel
    assert result.check.passed


def test_int4_quantizes_matmul_weights_in_blocks():
    samples = [{"x": np.random.default_rng(i).standard_normal((2, 64)).astype(np.float32)} for i in range(8)]
    result = quantize(models.matmul_mlp(), "int4", samples=samples, int4_block_size=32)
    types = {i.data_type for i in result.model.graph.initializer}
    assert TensorProto.INT4 in types or any(n.op_type == "MatMulNBits" for n in result.model.graph.node)
    assert result.check.passed, result.check.violations
