"""deploykit inspect: what a model holds, and every node ONNX Runtime cannot run."""

import json

import numpy as np
import onnx
from onnx import TensorProto, helper

from deploykit.graph.inspect import inspect_model
from tests.conftest import run_cli
from tests.surgery.models import legacy_detector, make

F = TensorProto.FLOAT


def test_json_describes_the_model(tmp_path):
    path = tmp_path / "legacy.onnx"
    onnx.save(legacy_detector(), path)
    code, out, err = run_cli("inspect", str(path), "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["inputs"] == [{"name": "images", "type": "float32", "shape": ["batch", 3, 32, 32]}]
    assert info["outputs"] == [{"name": "logits", "type": "float32", "shape": ["batch", 10]}]
    assert info["opsets"] == {"ai.onnx": 11} and info["ops"]["Constant"] == 33 and info["nodes"] == 58
    weights = sum(int(np.prod(n.attribute[0].t.dims)) for n in onnx.load(path).graph.node if n.op_type == "Constant")
    assert info["parameters"] == weights and info["parameter_bytes"] > 4 * (weights - 10)
    assert info["onnxruntime"] == {"loads": True, "error": "", "unsupported": []}
    assert info["checker"] == "ok" and info["problems"] == [] and "fc_48" in info["tensors"]
    code, out, _ = run_cli("inspect", str(path))  # the tables
    assert code == 0 and "[batch, 3, 32, 32]" in out and "BatchNormalization" in out


def test_every_node_ort_cannot_run_is_named(tmp_path):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("BEVPoolV2", ["a"], ["b"], name="bev", domain="trt.plugins"),
        helper.make_node("PillarScatter", ["b"], ["c"], name="scatter", domain="trt.plugins"),
        helper.make_node("Neg", ["c"], ["y"], name="fine"),
    ]
    model = make(nodes, [("x", F, [2])], [("y", F, [2])])
    model.opset_import.append(helper.make_opsetid("trt.plugins", 1))
    path = tmp_path / "plugins.onnx"
    onnx.save(model, path)
    info = inspect_model(path)
    assert info["onnxruntime"]["loads"] is False
    assert [(n["node"], n["op"]) for n in info["onnxruntime"]["unsupported"]] == [
        ("bev", "BEVPoolV2"),
        ("scatter", "PillarScatter"),
    ]
    assert [c["op"] for c in info["custom_nodes"]] == ["BEVPoolV2", "PillarScatter"]
    assert not any(c["has_body"] for c in info["custom_nodes"])


def test_broken_graph_is_described_not_refused(tmp_path):
    model = make([helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")], [("x", F, [2])], [("y", F, [2])])
    path = tmp_path / "broken.onnx"
    onnx.save(model, path)
    info = inspect_model(path)
    assert "add_ghost" in info["problems"][0] and info["checker"] != "ok"


def test_missing_file_exits_4(tmp_path):
    code, _, err = run_cli("inspect", str(tmp_path / "nope.onnx"))
    assert code == 4 and "no such ONNX file" in err


def test_standard_ops_without_a_cpu_kernel_are_found_by_probing(tmp_path):
    nodes = [
        helper.make_node("Erf", ["x"], ["a"], name="erf_double"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("Erf", ["b"], ["y"], name="erf_again"),
    ]
    path = tmp_path / "double.onnx"
    onnx.save(make(nodes, [("x", TensorProto.DOUBLE, [2])], [("y", TensorProto.DOUBLE, [2])]), path)
    ort_info = inspect_model(path)["onnxruntime"]
    assert "Could not find an implementation for Erf" in ort_info["error"]
    assert [n["node"] for n in ort_info["unsupported"]] == ["erf_double", "erf_again"]  # every one, not the first
