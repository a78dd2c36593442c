"""FP16 never overflows silently: out-of-range nodes stay FP32, or the stage refuses naming them."""

import numpy as np
import pytest

from deploykit.config import QuantizeConfig
from deploykit.errors import ModelError
from deploykit.graph.run import session_from_onnx
from deploykit.quant.fp16 import overflow_nodes, to_fp16
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.ranges import RangeSettings, collect_ranges
from deploykit.quant.reader import SampleStream
from tests.quant import models


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))


def test_a_plain_fp16_conversion_breaks_the_batchnorm_model():
    """The hazard is real: BatchNorm variance 1e8 is inf in FP16 and the output is garbage."""
    model, x = models.batchnorm_overflow(), models.images(1)[0]
    ref = session_from_onnx(model).infer(x)["head_out"]
    naive = session_from_onnx(to_fp16(model, [])).infer(x)["head_out"]
    assert rel_l2(ref, naive) > 1.0


def test_overflow_nodes_names_weight_and_activation_offenders():
    model = models.batchnorm_overflow()
    ranges = collect_ranges(model, models.images(4), RangeSettings("max"))
    nodes = overflow_nodes(model, ranges, 16384.0)
    assert nodes["bn"].code == "fp16_weight_overflow" and "'bn.var' reaches 1e+08" in str(nodes["bn"])
    assert nodes["conv0"].code == "fp16_activation_overflow" and "'conv0_out'" in str(nodes["conv0"])  # ~2e4
    assert "head" not in nodes


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_out_of_range_nodes_stay_fp32_and_the_result_is_right(precision):
    data = models.images(8)
    result = quantize_model(Job(models.batchnorm_overflow(), QuantizeConfig(precision=precision), "tensorrt",
                                SampleStream(data)))
    assert {"bn", "conv0"} <= set(result.fp32)
    assert result.check.passed and result.check.metrics["head_out"]["rel_l2"] < 0.02
    fp32_bn = [n for n in result.model.graph.node if n.name == "bn"][0]
    assert fp32_bn.op_type == "BatchNormalization"


def test_refuse_policy_names_the_nodes():
    with pytest.raises(ModelError, match=r"FP16 would overflow in 2 node\(s\): bn: weight 'bn.var'"):
        quantize_model(Job(models.batchnorm_overflow(), QuantizeConfig(precision="fp16", fp16_overflow="refuse"),
                           "tensorrt", SampleStream(models.images(4))))


def test_activation_overflow_is_found_from_calibration_ranges():
    result = quantize_model(Job(models.activation_overflow(), QuantizeConfig(precision="int8"), "tensorrt",
                                SampleStream(models.images(4))))
    why = result.fp32["conv0"]
    assert why.code == "fp16_activation_overflow" and "'conv0_out'" in str(why)
    assert "relu" in result.fp32
    assert result.check.passed


def test_nan_inf_that_the_range_check_missed_is_caught_and_fixed(monkeypatch):
    """If the overflow analysis misses a node, the final check finds the first Inf and keeps that node FP32."""
    import deploykit.quant.fp16 as fp16

    monkeypatch.setattr(fp16, "overflow_nodes", lambda *a, **k: {})
    model = models.activation_overflow()
    assert not np.isfinite(session_from_onnx(to_fp16(model, [])).infer(models.images(1)[0])["head_out"]).all()
    result = quantize_model(Job(model, QuantizeConfig(precision="fp16"), "tensorrt", SampleStream(models.images(4))))
    assert result.fp32["conv0"].code == "fp16_nonfinite"
    assert result.check.passed and not result.check.nonfinite


def test_nan_inf_with_refuse_policy_is_an_error_naming_the_node(monkeypatch):
    import deploykit.quant.fp16 as fp16

    monkeypatch.setattr(fp16, "overflow_nodes", lambda *a, **k: {})
    with pytest.raises(ModelError, match="NaN/Inf in output.*first at node 'conv0'"):
        quantize_model(Job(models.activation_overflow(), QuantizeConfig(precision="fp16", fp16_overflow="refuse"),
                           "tensorrt", SampleStream(models.images(4))))
