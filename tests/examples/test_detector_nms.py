"""The detector with in-graph NMS (deploykit-nms.yaml) and its cut for TensorRT builds
(deploykit-nms-cut.yaml): both convert, parity matches boxes independent of their order."""

import numpy as np
import pytest

from deploykit.graph.files import load_model
from tests.examples.cases import EXAMPLES, accurate, convert, torch_outputs, validation_samples

NMS = EXAMPLES / "detector" / "deploykit-nms.yaml"
CUT = EXAMPLES / "detector" / "deploykit-nms-cut.yaml"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("detector-nms-store")  # both configs share the export


def test_the_detections_depend_on_the_input():
    a, b = validation_samples(NMS)
    (ba, sa, _), (bb, _, _) = torch_outputs(NMS, a), torch_outputs(NMS, b)
    assert len(ba) >= 5 and len(bb) >= 5 and (sa > 0.3).all()
    from deploykit.metrics.detection import match_boxes

    matched = match_boxes(ba.astype(np.float64), bb.astype(np.float64), 0.5)
    assert len(matched) < 0.5 * min(len(ba), len(bb))  # other images, other boxes


def test_fp32_with_nms_in_the_graph(store, capfd):
    result = convert(NMS, store)
    assert "def forward" not in capfd.readouterr().err  # torch.export's graph dump of the failed dynamo try
    assert accurate(result), repr(result)
    export = result.artifacts["reference"].manifest.summary
    assert export["exporter"] == "torchscript"
    assert "GuardOnDataDependentSymNode" in export["fallback_reason"] and "\x1b" not in export["fallback_reason"]
    assert "NonMaxSuppression" in {
        n.op_type for n in load_model(result.artifacts["model"].file("model.onnx")).graph.node
    }
    parity = result.parity
    assert set(parity["not_compared_elementwise"]) == {"boxes", "scores", "labels"} and parity["outputs"] == {}
    task = next(t for t in parity["tasks"] if t["reference"] == "torch")
    assert task["metrics"]["reference_boxes"] > 50 and task["metrics"]["matched"] == 1.0


def test_cut_for_tensorrt_and_int8_tensorrt_flavour(store):
    fp32 = convert(CUT, store)
    assert accurate(fp32), repr(fp32)
    graph = load_model(fp32.artifacts["model"].file("model.onnx")).graph
    assert "NonMaxSuppression" not in {n.op_type for n in graph.node}
    assert [o.name for o in graph.output] == ["/Concat_output_0", "/detector/Sigmoid_output_0"]
    assert "surgery changed the outputs" in fp32.parity["reference_note"]
    assert fp32.artifacts["reference"].digest == convert(NMS, store).artifacts["reference"].digest  # one export
    int8 = convert(CUT, store, "int8", "tensorrt")
    assert accurate(int8), repr(int8)
    task = next(t for t in int8.parity["tasks"] if t["reference"] == "onnx")
    assert task["metrics"]["matched"] >= 0.95 and task["metrics"]["reference_boxes"] > 50


# INT8 alone with NMS in the graph flips classes (measured: ORT flavour 0.029, tensorrt flavour 0.067 >
# 0.02; cut before NMS the same INT8 passes at 0.006): NMS turns small score changes into other kept
# boxes. The config enables the search. ORT flavour: the decoding and NMS after the last conv stay float
# (the output tail) and the search keeps 8 layer groups in FP32; it passes, about as fast as FP32.
@pytest.mark.slow
def test_int8_with_nms_in_the_graph_passes_with_the_search_in_the_onnxruntime_flavour(store):
    result = convert(NMS, store, "int8", "onnxruntime")
    assert accurate(result), repr(result)
    task = next(t for t in result.parity["tasks"] if t["reference"] == "onnx")
    assert task["metrics"]["class_flips"] <= 0.02 and task["metrics"]["matched"] >= 0.95
    assert result.artifacts["model"].manifest.summary["repair"]["passed"]


# tensorrt flavour: with auto's range sets ranked by parity's detection check on the validation
# data (each scored as it ships, FP16 elsewhere), INT8 passes; it failed (class flips 0.048 > 0.02 at
# the best mix cheaper than all-FP16) while auto ranked by rel-L2 on held-out calibration samples.
@pytest.mark.slow
def test_int8_with_nms_in_the_graph_tensorrt_flavour(store):
    assert accurate(convert(NMS, store, "int8", "tensorrt"))


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "target"), [("int8", "onnxruntime"), ("fp8", "tensorrt")])
def test_cut_matrix(store, precision, target):
    assert accurate(convert(CUT, store, precision, target))
