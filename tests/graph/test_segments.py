"""A graph cut into parts that, run in turn, compute the whole graph's outputs."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from deploykit.graph.run import session_from_onnx
from deploykit.graph.segments import split


def _chain(blocks: int = 6, dim: int = 8, shared: bool = False):
    """x -> blocks of (Identity, MatMul, Relu), and the first MatMul's output as a second graph output:
    with Identity the accepted reader, a cut may go before each block only. ``shared``: every MatMul reads
    one weight through a node at the graph's start that computes from it alone (as a weight's
    DequantizeLinear does)."""
    rng = np.random.default_rng(0)
    nodes, inits, info = [], [], []
    if shared:
        inits.append(numpy_helper.from_array((rng.standard_normal((dim, dim)) / 3).astype(np.float32), "w"))
        nodes.append(helper.make_node("Neg", ["w"], ["w_neg"], name="neg"))
    x = "x"
    for k in range(blocks):
        w = numpy_helper.from_array((rng.standard_normal((dim, dim)) / 3).astype(np.float32), f"w{k}")
        if not shared:
            inits.append(w)
        nodes += [
            helper.make_node("Identity", [x], [f"i{k}"], name=f"id{k}"),
            helper.make_node("MatMul", [f"i{k}", "w_neg" if shared else f"w{k}"], [f"m{k}"], name=f"mm{k}"),
            helper.make_node("Relu", [f"m{k}"], [f"r{k}"], name=f"relu{k}"),
        ]
        info += [helper.make_tensor_value_info(t, TensorProto.FLOAT, [1, dim]) for t in (f"i{k}", f"m{k}", f"r{k}")]
        x = f"r{k}"
    outputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, dim])]
    outputs.append(helper.make_tensor_value_info("m0", TensorProto.FLOAT, [1, dim]))  # made in the first part
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, dim])],
        outputs,
        inits,
        value_info=info,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run_parts(parts, feeds):
    values = dict(feeds)
    for part in parts:
        values.update(session_from_onnx(part.model, "onnxruntime").infer({t: values[t] for t in part.reads}))
    return values


def test_the_parts_run_in_turn_compute_the_whole_graph_s_outputs_and_are_cut_only_before_accepted_readers():
    model = _chain()
    parts = split(model, 3, lambda node: node.op_type == "Identity")
    assert len(parts) == 3 and [p.start for p in parts] == sorted(p.start for p in parts)
    nodes = list(model.graph.node)
    for part in parts[1:]:
        # what crosses the cut (besides the graph's input) is read in this part by an Identity only
        crossing = [t for t in part.reads if t != "x"]
        assert crossing
        for t in crossing:
            readers = [n for n in nodes[part.start :] if t in n.input]
            assert readers and all(n.op_type == "Identity" for n in readers)
    assert sum(len(p.model.graph.node) for p in parts) == len(nodes)
    assert {i.name for p in parts for i in p.model.graph.initializer} == {t.name for t in model.graph.initializer}
    whole = session_from_onnx(model, "onnxruntime")
    for _ in range(3):
        x = np.random.default_rng().standard_normal((1, 8)).astype(np.float32)
        got, want = _run_parts(parts, {"x": x}), whole.infer({"x": x})
        for name in ("r5", "m0"):  # the last output and the one an early part makes
            np.testing.assert_array_equal(got[name], want[name])


def test_a_graph_with_no_place_to_cut_is_one_part():
    model = _chain()
    parts = split(model, 4, lambda node: False)
    assert len(parts) == 1 and parts[0].start == 0 and parts[0].reads == ("x",)
    assert len(parts[0].model.graph.node) == len(model.graph.node)
    onnx.checker.check_model(parts[0].model)


def test_a_tensor_without_a_declared_type_is_never_cut_across():
    model = _chain()
    del model.graph.value_info[:]  # no crossing tensor has a type: no cut qualifies
    assert len(split(model, 3, lambda node: node.op_type == "Identity")) == 1


def test_a_constant_computed_from_weights_goes_with_each_part_that_reads_it():
    model = _chain(shared=True)
    parts = split(model, 3, lambda node: node.op_type == "Identity")
    assert len(parts) == 3  # the shared constant read by every block does not keep the cuts away
    assert all("w_neg" not in p.reads and any(n.name == "neg" for n in p.model.graph.node) for p in parts)
    x = np.random.default_rng().standard_normal((1, 8)).astype(np.float32)
    want = session_from_onnx(model, "onnxruntime").infer({"x": x})
    got = _run_parts(parts, {"x": x})
    np.testing.assert_array_equal(got["r5"], want["r5"])


def test_a_weight_the_graph_gives_out_comes_from_the_last_part():
    model = _chain()
    model.graph.output.append(helper.make_tensor_value_info("w2", TensorProto.FLOAT, [8, 8]))
    parts = split(model, 3, lambda node: node.op_type == "Identity")
    assert "w2" in parts[-1].makes and all("w2" not in p.makes for p in parts[:-1])
    x = np.random.default_rng().standard_normal((1, 8)).astype(np.float32)
    np.testing.assert_array_equal(
        _run_parts(parts, {"x": x})["w2"], session_from_onnx(model, "onnxruntime").infer({"x": x})["w2"]
    )


def test_a_model_with_a_weight_the_caller_may_feed_stays_whole():
    model = _chain(shared=True)
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 8]))  # "w" may be fed
    parts = split(model, 3, lambda node: node.op_type == "Identity")
    assert len(parts) == 1 and parts[0].model is model and parts[0].reads == ("x",)
