"""The planner example: a transformer over a dynamic number of agents with a key-padding mask.
Default suite: FP32 and FP16; slow: INT8 (both flavours) and FP8."""

import numpy as np
import pytest

from deploykit.errors import ParityFailed
from deploykit.onnxio import load_model
from tests.examples.cases import (
    EXAMPLES,
    convert,
    rel_change,
    torch_outputs,
    validation_samples,
)

CONFIG = EXAMPLES / "planner" / "deploykit.yaml"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return tmp_path_factory.mktemp("planner-store")


def test_the_output_depends_on_the_input_and_not_on_padding():
    a, b = validation_samples(CONFIG)
    ta, _ = torch_outputs(CONFIG, a)
    tb, _ = torch_outputs(CONFIG, b)
    assert rel_change(ta, tb) > 0.3  # vs parity's 1e-4 (FP32)
    padded = {k: v.copy() for k, v in a.items()}
    padded["agents"][padded["agent_mask"]] = 5.0  # padding rows are masked out of attention
    assert padded["agent_mask"].any()
    np.testing.assert_allclose(torch_outputs(CONFIG, padded)[0], ta, atol=1e-5)


def test_fp32_exports_with_auto_over_a_dynamic_agent_count(store):
    result = convert(CONFIG, store)
    assert result.passed, repr(result)
    export = result.artifacts["reference"].manifest.summary
    assert export["exporter"] == "dynamo" and export["check"]["shapes"] == ["opt", "min", "max"]
    graph = load_model(result.artifacts["reference"].file("model.onnx")).graph
    assert {"LayerNormalization", "Softmax", "MatMul", "Where"} <= {n.op_type for n in graph.node}
    assert graph.input[0].type.tensor_type.shape.dim[1].dim_param == "agents"
    task = next(t for t in result.parity["tasks"] if t["reference"] == "torch")
    assert task["metrics"]["top1"] == 1.0 and task["metrics"]["ade"] < 1e-5
    agents = {s for s in _validation_agent_counts()}
    assert len(agents) > 3  # validation covers many agent counts, not one traced shape


def test_fp16_passes_the_trajectory_parity(store):
    result = convert(CONFIG, store, "fp16", "tensorrt")
    assert result.passed, repr(result)
    task = next(t for t in result.parity["tasks"] if t["reference"] == "onnx")
    assert task["metrics"]["ade"] < 0.01 and task["metrics"]["top1"] == 1.0


# Measured (ORT flavour): rel-L2 0.059, ADE 0.076 (76 cm) / FDE 0.171 > 0.05 / 0.1 with LayerNorm/Softmax
# in FP32 (0.072 / 0.165 before issue 12's calibration; 0.079 quantizing them too); top-1 mode agreement 1.0.
@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=ParityFailed, reason="INT8 planner: ADE 0.076 > 0.05 (measured)")
def test_int8_onnxruntime_flavour(store):
    assert convert(CONFIG, store, "int8", "onnxruntime").passed


# The tensorrt flavour (ModelOpt's get_first crash fixed by issue 12), evaluated as written: INT8
# ADE 0.048 but FDE 0.107 > 0.1; FP8 ADE 0.041 / FDE 0.085 passes.
@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=ParityFailed, reason="INT8 planner, tensorrt flavour: FDE 0.107 > 0.1 (measured)")
def test_int8_tensorrt_flavour(store):
    assert convert(CONFIG, store, "int8", "tensorrt").passed


@pytest.mark.slow
def test_fp8_tensorrt_flavour(store):
    result = convert(CONFIG, store, "fp8", "tensorrt")
    assert result.passed, repr(result)
    task = next(t for t in result.parity["tasks"] if t["reference"] == "onnx")
    assert task["metrics"]["ade"] < 0.05 and task["metrics"]["fde"] < 0.1 and task["metrics"]["top1"] == 1.0


def _validation_agent_counts():
    return [s["agents"].shape[1] for s in validation_samples(CONFIG, 12)]
