"""The shared graph helpers: one constants_to_initializers for every attribute form, producers and
consumers of models and graphs alike, exposed intermediate tensors keep their types."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deploykit.graph.proto import (
    constants_to_initializers,
    consumers,
    expose_tensors,
    float_tensors,
    producers,
    shapes_inferred,
    tensor_types,
)
from deploykit.graph.run import session_from_onnx


def constants_model() -> onnx.ModelProto:
    """Every Constant attribute form feeding one Add chain; one Constant is itself a graph output."""
    nodes = [
        helper.make_node(
            "Constant", [], ["t"], name="t", value=numpy_helper.from_array(np.array([1.0, 2.0], np.float32))
        ),
        helper.make_node("Constant", [], ["f"], name="f", value_float=0.5),
        helper.make_node("Constant", [], ["fs"], name="fs", value_floats=[3.0, 4.0]),
        helper.make_node("Constant", [], ["k"], name="k", value_float=7.0),
        helper.make_node("Add", ["x", "t"], ["a"], name="add_t"),
        helper.make_node("Add", ["a", "f"], ["b"], name="add_f"),
        helper.make_node("Add", ["b", "fs"], ["y"], name="add_fs"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("k", TensorProto.FLOAT, []),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_constants_to_initializers_takes_every_form_and_keeps_graph_outputs():
    model = constants_model()
    x = {"x": np.array([10.0, 20.0], np.float32)}
    before = session_from_onnx(model).infer(x)
    assert constants_to_initializers(model) == 3  # value, value_float, value_floats; "k" is a graph output
    assert {i.name for i in model.graph.initializer} == {"t", "f", "fs"}
    assert [n.name for n in model.graph.node if n.op_type == "Constant"] == ["k"]
    assert all(i.data_type == TensorProto.FLOAT for i in model.graph.initializer)  # value_floats stays FP32
    onnx.checker.check_model(model)
    after = session_from_onnx(model).infer(x)
    np.testing.assert_array_equal(after["y"], before["y"])
    np.testing.assert_array_equal(after["y"], [14.5, 26.5])


def test_producers_and_consumers_take_a_model_or_its_graph():
    model = constants_model()
    assert producers(model) == producers(model.graph)
    assert producers(model)["a"].name == "add_t"
    readers = consumers(model)
    assert [n.name for n in readers["a"]] == ["add_f"]
    assert [n.name for n in readers["x"]] == ["add_t"]
    assert set(consumers(model.graph)) == set(readers)


def test_consumers_count_a_read_inside_a_subgraph_for_the_node_holding_it():
    branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["out"])],
        "then",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])],
    )
    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch, else_branch=branch)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    assert [n.name for n in consumers(graph)["x"]] == ["if"]


def test_exposed_tensors_keep_their_type_and_unknown_ones_are_typed_by_the_runtime():
    model = constants_model()
    model.graph.value_info.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]))
    out = expose_tensors(model, ["a", "b", "y"])
    assert [o.name for o in out.graph.output] == ["y", "k", "a", "b"]
    assert tensor_types(out)["a"] == TensorProto.FLOAT
    assert not out.graph.output[3].type.HasField("tensor_type")  # "b" has no declared type
    assert len(model.graph.output) == 2  # the caller's model is untouched
    got = session_from_onnx(out, "onnxruntime", level="disabled").infer({"x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(got["b"], [2.5, 3.5])


def test_float_tensors_are_the_float_activations_in_graph_order():
    model = onnx.shape_inference.infer_shapes(constants_model())
    assert float_tensors(model) == ["x", "t", "f", "fs", "k", "a", "b", "y"]


def _weights_model(listed: bool) -> onnx.ModelProto:
    """A Conv and a MatMul on weights over WEIGHT_BYTES, a Reshape by a small shape initializer, and an If whose
    branches read an outer weight; ``listed``: the weights also listed as graph inputs (IR 3 style)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 3, 3, 3)).astype(np.float32), "w")
    m = numpy_helper.from_array(rng.standard_normal((64 * 14 * 14, 32)).astype(np.float32), "m")
    b = numpy_helper.from_array(rng.standard_normal((1, 32)).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    branch = [("then", "Add"), ("else", "Sub")]
    bodies = {
        k: helper.make_graph(
            [helper.make_node(op, ["mm", "b"], [f"{k}_out"])],
            k,
            [],
            [helper.make_tensor_value_info(f"{k}_out", TensorProto.FLOAT, None)],
        )
        for k, op in branch
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Reshape", ["c", "shape"], ["flat"], name="flat"),
        helper.make_node("MatMul", ["flat", "m"], ["mm"], name="mm"),
        helper.make_node("If", ["cond"], ["y"], name="if", then_branch=bodies["then"], else_branch=bodies["else"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16]),
        helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
    ]
    if listed:
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in (w, m)]
    graph = helper.make_graph(
        nodes, "weights", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, m, b, shape]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_shapes_inferred_without_the_weights_data_are_what_onnx_infers_with_them(monkeypatch):
    """The weights go into inference as typed inputs without their bytes; the model that comes back is ONNX's
    own result, byte for byte (the Reshape read its small shape initializer, the If's branches the outer
    weights' types), with the weights and the graph inputs as they were."""
    seen = []
    real = onnx.shape_inference.infer_shapes
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", lambda m, *a, **k: seen.append(m.ByteSize()) or real(m))
    for listed in (False, True):
        model = _weights_model(listed)
        expected = real(model)
        assert shapes_inferred(model).SerializeToString() == expected.SerializeToString()
        assert seen[-1] < 4096 < model.ByteSize()  # inferred on the graph without the weights' data
        types = {v.name: v.type.tensor_type for v in expected.graph.value_info}
        assert list(types["mm"].shape.dim) and types["mm"].shape.dim[1].dim_value == 32
