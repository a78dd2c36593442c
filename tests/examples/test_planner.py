"""The planner example: a transformer over a dynamic number of agents with a key-padding mask.
Default suite: FP32 and FP16; slow: INT8 (both flavours) and FP8."""

import numpy as np
import pytest

from deploykit.errors import ModelError, ParityFailed
from deploykit.onnxio import load_model
from tests.examples.cases import (
    EXAMPLES,
    MODELOPT_GET_FIRST,
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


# Measured (ORT flavour): rel-L2 0.057, ADE 0.072 (72 cm) > 0.05 with LayerNorm/Softmax in FP32
# (0.079 quantizing them too); top-1 mode agreement 1.0.
@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=ParityFailed, reason="INT8 planner: ADE 0.072 > 0.05 (measured)")
def test_int8_onnxruntime_flavour(store):
    assert convert(CONFIG, store, "int8", "onnxruntime").passed


# With i12a's reader fix (emulated here): INT8 ADE 0.062 and FP8 ADE 0.0495 / FDE 0.104 > 0.1; so
# after the fix these are expected to fail parity instead (then mark them with what they measure).
@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=ModelError, reason=MODELOPT_GET_FIRST)
@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_tensorrt_flavour(store, precision):
    assert convert(CONFIG, store, precision, "tensorrt").passed


def _validation_agent_counts():
    return [s["agents"].shape[1] for s in validation_samples(CONFIG, 12)]
