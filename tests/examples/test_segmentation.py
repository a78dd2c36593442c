"""The segmentation example: trained, its output driven by its input, converted at FP32 and FP8 in the
default suite; the INT8 flavours in the slow matrix."""

import numpy as np
import pytest

from tests.examples.cases import EXAMPLES, accurate, convert, rel_change, torch_outputs, validation_samples

CONFIG = EXAMPLES / "segmentation" / "deploykit.yaml"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("segmentation-store")  # export and surgery shared between precisions


def test_the_output_depends_on_the_input():
    a, b = validation_samples(CONFIG)
    (la,), (lb,) = torch_outputs(CONFIG, a), torch_outputs(CONFIG, b)
    assert rel_change(la, lb) > 0.5  # vs parity's 1e-4 (FP32) and 0.05 (INT8 here)
    flipped = np.mean(la.argmax(1) != lb.argmax(1))
    assert flipped > 0.1 and len(np.unique(la.argmax(1))) >= 4  # vs the 2% parity allows; most classes present


def test_fp32_converts_and_keeps_the_argmax_maps(store):
    result = convert(CONFIG, store)
    assert accurate(result), repr(result)
    parity = result.parity
    assert parity["data"]["kind"] == "validation" and parity["data"]["samples"] == 8
    task = next(t for t in parity["tasks"] if t["reference"] == "torch")
    assert task["metrics"]["pixel_agreement"] == 1.0 and task["metrics"]["classes_present"] == 5
    ops = {n.op_type for n in _onnx(result).graph.node}
    assert {"Resize", "HardSwish", "Conv"} <= ops  # the patterns the example exists to exercise


def test_fp8_passes_the_task_parity(store):
    result = convert(CONFIG, store, "fp8")
    assert accurate(result), repr(result)
    task = next(t for t in result.parity["tasks"] if t["reference"] == "onnx")
    assert task["metrics"]["miou"] >= 0.95 and task["metrics"]["pixel_agreement"] >= 0.98


# Measured: INT8 (either flavour) reaches rel-L2 0.083-0.086 and mIoU 0.92 without the search. With the
# config's search both pass: onnxruntime flavour rel-L2 0.026, mIoU 0.970 (8 of 17 groups in FP32, the
# last upsampling kept float as the output tail); tensorrt flavour rel-L2 0.044, mIoU 0.963 (8 in FP16).
# The onnxruntime search orders by measured CPU latency, so its mix can differ between runs; capped
# at 8 groups and judged on 4 scenes it missed once under load, so the config gives it 16 groups and
# judges every state on all 8 scenes.
@pytest.mark.slow
@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
def test_int8(store, target):
    result = convert(CONFIG, store, "int8", target)
    assert accurate(result), repr(result)
    task = next(t for t in result.parity["tasks"] if t["reference"] == "onnx")
    assert task["metrics"]["miou"] >= 0.95 and task["metrics"]["pixel_agreement"] >= 0.98


def _onnx(result):
    from deploykit.graph.files import load_model

    return load_model(result.artifacts["reference"].file("model.onnx"))
