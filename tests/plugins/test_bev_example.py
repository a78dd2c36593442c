"""examples/bev converts end to end on the CPU, keeping its BEVPoolV2 plugin node (FP32 and INT8)."""

from __future__ import annotations

import sys
from pathlib import Path

import onnx
import pytest
from onnx import helper

import deploykit
from deploykit.stages import STAGE_NAMES

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bev" / "deploykit.yaml"


@pytest.fixture(autouse=True)
def _fresh_factory_module():
    yield
    sys.modules.pop("model", None)  # the example's model.py; other examples name theirs alike


def _plugin_node(path: Path) -> onnx.NodeProto:
    model = onnx.load(str(path))
    nodes = [n for n in model.graph.node if n.domain == "deploykit"]
    assert [n.op_type for n in nodes] == ["BEVPoolV2"]
    assert [(f.domain, f.name) for f in model.functions] == [("deploykit", "BEVPoolV2")]
    return nodes[0]


def test_bev_example_converts_with_its_plugin_node(tmp_path):
    result = deploykit.convert(EXAMPLE, workdir=tmp_path / "store", gate__iterations=10, gate__trials=1)
    assert result.passed
    assert [r.stage for r in result.stages if r.status == "ran"] == ["export", "surgery", "build", "parity", "gate"]
    node = _plugin_node(result.artifacts["model"].file("model.onnx"))
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs == {"bev_shape": [1, 32, 32], "plugin_version": b"1", "plugin_namespace": b"deploykit"}
    for reference in ("onnx", "torch"):
        assert result.parity["outputs"]["heatmap"][reference]["metrics"]["max_abs"] < 1e-4


@pytest.mark.skipif("quantize" not in STAGE_NAMES, reason="no quantize stage in this deploykit yet "
                                                          "(src/deploykit/stages/quantize.py)")
def test_bev_example_converts_to_int8_keeping_the_plugin_in_fp32(tmp_path):
    result = deploykit.convert(EXAMPLE, workdir=tmp_path / "store", quantize__precision="int8",
                               gate__iterations=10, gate__trials=1)
    assert result.passed
    quantized = result.artifacts["model"].file("model.onnx")
    node = _plugin_node(quantized)
    model = onnx.shape_inference.infer_shapes(onnx.load(str(quantized)))
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*model.graph.value_info, *model.graph.output]}
    assert {types[node.input[0]], types[node.input[1]], types[node.output[0]]} == {onnx.TensorProto.FLOAT}
    assert sum(n.op_type == "QuantizeLinear" for n in model.graph.node) >= 4
