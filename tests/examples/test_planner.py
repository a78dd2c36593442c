"""The planner example: a transformer over a dynamic number of agents with a key-padding mask.
Default suite: FP32 and FP16; slow: INT8 (both flavours) and FP8."""

import numpy as np
import pytest

from deploykit.graph.files import load_model
from tests.examples.cases import (
    EXAMPLES,
    accurate,
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
    assert accurate(result), repr(result)
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
    assert accurate(result), repr(result)
    task = next(t for t in result.parity["tasks"] if t["reference"] == "onnx")
    assert task["metrics"]["ade"] < 0.01 and task["metrics"]["top1"] == 1.0


# INT8 alone misses (measured on an AVX2 CPU: ORT flavour ADE 0.076 / FDE 0.171; tensorrt flavour FDE 0.107 > 0.1), so
# the config enables the mixed-precision search, judged on the validation scenes by parity's own check:
# it keeps a few groups in higher precision (2 in FP32, ORT flavour, beside the float output tail; 2 above
# INT8, tensorrt).
@pytest.mark.slow
@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
def test_int8_passes_with_the_configured_search(store, target):
    result = convert(CONFIG, store, "int8", target)
    assert accurate(result), repr(result)
    task = next(t for t in result.parity["tasks"] if t["reference"] == "onnx")
    assert task["metrics"]["ade"] < 0.05 and task["metrics"]["fde"] < 0.1 and task["metrics"]["top1"] >= 0.95
    repair = result.artifacts["model"].manifest.summary["repair"]
    # on a CPU with VNNI (full 8-bit weights, no reduce_range) plain INT8 already passes and no search
    # runs (measured on an AVX-512 VNNI Xeon); the 7-bit weights an AVX2 CPU needs miss without it
    assert repair is None or (repair["passed"] and 0 < len(repair["excluded_nodes"]) < 20)  # a few groups


@pytest.mark.slow
def test_fp8_tensorrt_flavour(store):
    result = convert(CONFIG, store, "fp8", "tensorrt")
    assert accurate(result), repr(result)
    task = next(t for t in result.parity["tasks"] if t["reference"] == "onnx")
    assert task["metrics"]["ade"] < 0.05 and task["metrics"]["fde"] < 0.1 and task["metrics"]["top1"] == 1.0


def _validation_agent_counts():
    return [s["agents"].shape[1] for s in validation_samples(CONFIG, 12)]
