"""Per-layer diagnosis: the first broken tensor and the node that adds the error, found by name."""

import json

import numpy as np
import onnx
from onnx import numpy_helper

from deploykit.metrics.divergence import compare_graphs, diagnose
from tests.quant import models


def perturbed(model, weight, channel=0, factor=1.5):
    out = onnx.ModelProto.FromString(model.SerializeToString())
    for init in out.graph.initializer:
        if init.name == weight:
            w = numpy_helper.to_array(init).copy()
            w[channel] *= factor
            init.CopyFrom(numpy_helper.from_array(w, weight))
    return out


def test_names_the_first_broken_tensor_and_the_node_that_broke_it():
    ref = models.cnn((8, 16, 16))
    cand = perturbed(ref, "conv1.weight", channel=3, factor=4.0)
    report = diagnose(ref, cand, models.images(3, seed=7), threshold=0.05)
    by_name = {t.tensor: t for t in report.tensors}
    assert by_name["relu0"].rel_l2 == 0.0  # upstream of the change: identical
    assert report.first.tensor == "conv1_out" and report.first.node == "conv1"
    assert report.top_growth[0].node == "conv1"
    assert by_name["relu2"].growth < report.top_growth[0].growth  # downstream nodes only carry it
    assert report.samples == 3 and report.unmatched == 0


def test_a_healthy_candidate_reports_nothing_over_threshold():
    ref = models.cnn((8,))
    report = diagnose(ref, ref, models.images(2))
    assert report.first is None and all(t.rel_l2 == 0 for t in report.tensors)
    assert "no tensor exceeds the threshold" in report.lines()[1]


def test_nan_in_the_candidate_points_at_the_first_node_producing_it():
    ref = models.cnn((8, 8))
    cand = perturbed(ref, "conv1.bias", channel=0, factor=np.inf)
    report = diagnose(ref, cand, models.images(2))
    assert report.first.tensor == "conv1_out" and report.first.nonfinite > 0
    assert report.top_growth[0].node == "conv1"
    json.dumps(report.to_dict(), allow_nan=False)  # reports hold no infinities


def test_quantized_candidates_align_through_qdq_and_name_the_computing_node():
    from deploykit.config import QuantizeConfig
    from deploykit.quant.quantize import Job, quantize_model
    from deploykit.quant.reader import SampleStream

    ref = models.cnn((16, 16), outlier=300.0)
    result = quantize_model(Job(ref, QuantizeConfig(precision="int8"), "onnxruntime", SampleStream(models.images(8))))
    report = diagnose(result.reference, result.model, models.images(2, seed=3), threshold=0.1)
    worst = report.top_growth[0]
    assert worst.candidate_node == "conv1"  # ORT fused the Relu: conv1 now writes 'relu1'
    assert report.first.tensor == "relu1"


def test_compare_graphs_takes_one_feeds_dict_and_paths(tmp_path):
    ref = models.save(models.cnn((8,)), tmp_path / "ref.onnx")
    cand = models.save(perturbed(models.cnn((8,)), "head.weight"), tmp_path / "cand.onnx")
    report = compare_graphs(ref, cand, models.images(1)[0], top=2)
    assert report.samples == 1 and len(report.top_growth) == 2
    assert report.to_dict()["top_growth"][0]["node"] == "head"
    assert "as written" in report.candidate_evaluator
