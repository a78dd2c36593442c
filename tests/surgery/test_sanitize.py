"""sanitize: constant folding, Constant nodes -> initializers (old exporters), shape folding."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.surgery.models import apply, const_node, feeds_for, legacy_detector, make, ops, ort_run


@pytest.mark.parametrize("weights_as", ["constant", "input"])
def test_opset11_weights_become_initializers_and_outputs_match(weights_as):
    model = legacy_detector(opset=11, weights_as=weights_as)
    out, reports = apply(model, "sanitize")
    assert "Constant" not in ops(out)
    assert [i.name for i in out.graph.input] == ["images"]  # weights left the input list
    conv_weights = {n.input[1] for n in out.graph.node if n.op_type == "Conv"}
    assert conv_weights <= {t.name for t in out.graph.initializer}  # quantizers can see them now
    assert reports[0]["nodes_after"] < reports[0]["nodes_before"] or weights_as == "input"
    assert reports[0]["numerics"].startswith("outputs match")
    for batch in (1, 3):  # the folded Reshape target must hold for every batch, not just the checked one
        feeds = feeds_for(model, batch=batch)
        np.testing.assert_allclose(ort_run(out, feeds)["logits"], ort_run(model, feeds)["logits"], rtol=1e-6, atol=1e-6)


def test_traced_view_becomes_a_constant_reshape_target():
    out, reports = apply(legacy_detector(), "sanitize")
    assert reports[0]["details"]["reshape_targets_folded"] == 1
    assert not {"Shape", "Gather", "Unsqueeze", "Concat"} & set(ops(out))
    reshape = next(n for n in out.graph.node if n.op_type == "Reshape")
    target = next(t for t in out.graph.initializer if t.name == reshape.input[1])
    assert onnx.numpy_helper.to_array(target).tolist() == [0, -1]  # copy the batch, infer the rest


def test_shape_start_end_is_honoured():
    # onnx-graphsurgeon's own Shape folding ignores start/end (opset 15): sanitize folds shapes itself.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=1, end=3),
        helper.make_node("Cast", ["s"], ["f"], to=1),
        helper.make_node("Add", ["y", "f"], ["z"]),
    ]
    model = make(
        nodes,
        [("x", TensorProto.FLOAT, [2, 3, 4, 5]), ("y", TensorProto.FLOAT, [2])],
        [("z", TensorProto.FLOAT, [2])],
        opset=17,
    )
    out, _ = apply(model, "sanitize")
    assert ops(out) == ["Add"]
    feeds = feeds_for(model)
    np.testing.assert_array_equal(ort_run(out, feeds)["z"], feeds["y"] + np.array([3, 4], np.float32))


def test_constant_value_forms_of_newer_opsets_fold():
    nodes = [
        helper.make_node("Constant", [], ["k"], value_floats=[1.5, -2.0]),
        helper.make_node("Constant", [], ["one"], value_float=1.0),
        helper.make_node("Add", ["k", "one"], ["k1"]),
        helper.make_node("Mul", ["x", "k1"], ["y"]),
    ]
    model = make(nodes, [("x", TensorProto.FLOAT, [3, 2])], [("y", TensorProto.FLOAT, [3, 2])], opset=13)
    out, _ = apply(model, "sanitize")
    assert ops(out) == ["Mul"]
    k1 = onnx.numpy_helper.to_array(next(t for t in out.graph.initializer if t.name == out.graph.node[0].input[1]))
    np.testing.assert_array_equal(k1, [2.5, -1.0])


def test_graph_graphsurgeon_cannot_import_still_gets_constants_folded():
    # Optional types make onnx-graphsurgeon's importer fail; sanitize falls back to plain folding.
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    nodes = [
        const_node("k", np.array([2.0, 3.0], np.float32)),
        helper.make_node("Mul", ["x", "k"], ["m"]),
        helper.make_node("Optional", ["m"], ["o"]),
        helper.make_node("OptionalGetElement", ["o"], ["y"]),
    ]
    model = make(nodes, [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])], opset=18)
    model.graph.value_info.append(helper.make_value_info("o", opt_type))
    out, reports = apply(model, "sanitize")
    assert "Constant" not in ops(out)
    assert "fallback" in reports[0]["details"]


def test_clean_graph_is_not_modified_and_says_why():
    model = make(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])]
    )
    _, reports = apply(model, "sanitize")
    assert reports[0]["modified"] is False and "already clean" in reports[0]["reason"]
    assert reports[0]["numerics"] == "unchanged"


def test_ours_is_at_least_as_small_as_onnxslim():
    onnxslim = pytest.importorskip("onnxslim")
    model = legacy_detector(opset=12)
    ours, _ = apply(model, "sanitize", "remove_noops", "fold_batchnorm")
    slim = onnxslim.slim(onnx.ModelProto.FromString(model.SerializeToString()))
    assert len(ours.graph.node) <= len(slim.graph.node)
    feeds = feeds_for(model, batch=3)
    np.testing.assert_allclose(ort_run(ours, feeds)["logits"], ort_run(model, feeds)["logits"], rtol=1e-5, atol=1e-5)
