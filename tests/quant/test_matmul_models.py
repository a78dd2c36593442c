"""Graphs with Gemm/MatMul in every flavour and precision: a CNN classifier head, a transformer encoder.

ModelOpt runs one inference with ``reader.get_first()`` to read MatMul/Gemm shapes; a reader
without it crashed every such graph in the tensorrt flavour and at FP8. Each quantized graph is
checked here on fresh inputs the calibration never saw, through its flavour's evaluator, against
the FP32 graph.
"""

import logging

import numpy as np
import pytest

from deploykit.config import QuantizeConfig
from deploykit.graph.run import session_from_onnx
from deploykit.metrics import compare
from deploykit.quant import ort_flavour
from deploykit.quant.flavours import flavour_for
from deploykit.quant.prepare import quantized_node_names
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.reader import SampleStream
from tests.quant import models

CASES = [("int8", "tensorrt"), ("int8", "onnxruntime"), ("fp8", "tensorrt")]
# Worst rel-L2 over fresh samples. INT8 at 7-bit weights (reduce_range without VNNI) on a 10-class
# head measured 0.03-0.09; a dropped scale, a wrong axis or a clipped Softmax gives > 0.3.
REL_L2 = {"int8": 0.1, "fp8": 0.1}


def _quantize(model, samples, precision, flavour):
    cfg = QuantizeConfig(precision=precision, high_precision="fp32")
    reduce_range = ort_flavour.resolve_reduce_range("auto") if flavour == "onnxruntime" else False
    return quantize_model(Job(model, cfg, flavour, SampleStream(samples), reduce_range=reduce_range))


def _worst_on_fresh(fp32, quantized, flavour, samples):
    ref = session_from_onnx(fp32, "as_written")
    cand = session_from_onnx(quantized, flavour_for(flavour).evaluator)
    worst = {"rel_l2": 0.0, "cosine": 1.0}
    for s in samples:
        for name, value in ref.infer(s).items():
            m = compare(value, cand.infer(s)[name])
            worst = {"rel_l2": max(worst["rel_l2"], m["rel_l2"]), "cosine": min(worst["cosine"], m["cosine"])}
    return worst


@pytest.mark.parametrize("precision, flavour", CASES)
def test_classifier_with_a_gemm_head_quantizes_and_keeps_its_top1(precision, flavour):
    fp32 = models.classifier()
    result = _quantize(fp32, models.images(24, seed=1), precision, flavour)
    assert "conv1" in quantized_node_names(result.model)
    fresh = models.images(8, seed=77)
    worst = _worst_on_fresh(fp32, result.model, flavour, fresh)
    assert worst["rel_l2"] < REL_L2[precision] and worst["cosine"] > 0.99, worst
    ref = session_from_onnx(fp32, "as_written")
    cand = session_from_onnx(result.model, flavour_for(flavour).evaluator)
    agree = [np.argmax(ref.infer(s)["logits"]) == np.argmax(cand.infer(s)["logits"]) for s in fresh]
    assert np.mean(agree) >= 7 / 8
    if flavour == "tensorrt":  # a batch-1 Gemm is a GEMV: ModelOpt leaves it out, and deploykit says so
        fc = result.unquantized["fc"]
        assert fc.code == "placement_rules" and fc.sentence.startswith("Gemm")


@pytest.mark.parametrize("precision, flavour", CASES)
def test_transformer_encoder_quantizes_its_matmuls(precision, flavour):
    fp32 = models.encoder()
    result = _quantize(fp32, models.tokens(24, seed=1), precision, flavour)
    matmuls = {n.name for n in fp32.graph.node if n.op_type == "MatMul"}
    quantized = quantized_node_names(result.model) & matmuls
    assert {"q_proj", "k_proj", "v_proj", "mlp_up", "mlp_down"} <= quantized, sorted(quantized)
    assert any(n.op_type == "Softmax" for n in result.model.graph.node)
    worst = _worst_on_fresh(fp32, result.model, flavour, models.tokens(8, seed=78))
    assert worst["rel_l2"] < REL_L2[precision] and worst["cosine"] > 0.99, worst


def test_normalization_scales_quantize_without_onnx_runtime_axis_warnings(caplog):
    """ORT's default per-channel axis 1 does not exist on a LayerNormalization's 1-D scale: it logged
    'Axis 1 is out-of-range' for each such node on every quantize call."""
    with caplog.at_level(logging.WARNING):
        result = _quantize(models.encoder(), models.tokens(20, seed=2), "int8", "onnxruntime")
    assert not [r for r in caplog.records if "out-of-range" in r.getMessage()]
    assert result.check.passed
