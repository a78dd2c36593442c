"""Constant weight Q/DQ chains computed once: the graph as written keeps its bits and its taps."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from deploykit.graph import fold
from deploykit.graph.fold import fold_constant_chains
from deploykit.graph.proto import expose_tensors
from deploykit.graph.run import session_from_onnx


def weight_qdq_graph(seed=0, act_scale=0.05, shadow=False, int8_read=False):
    """x -> MatMul(per-channel Q/DQ weight along axis 1) -> Relu -> Q/DQ (activation) -> MatMul(FP16
    weight cast to FP32) -> MatMul(FP32 weight, 512 deep: prepacking it changes the sum's last bits) ->
    Add(FP32 bias) -> y. ``shadow``: the first weight's scale is also a graph
    input (it can be fed, so it is not constant). ``int8_read``: a second DequantizeLinear whose scale is
    a graph input reads the quantized weight (an INT8 tensor the rest of the graph needs)."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((16, 24)).astype(np.float32)
    s1 = (np.abs(w1).max(axis=0) / 127).astype(np.float32)  # per output channel: axis 1 of a MatMul weight
    w2 = rng.standard_normal((24, 512)).astype(np.float16)
    w3 = rng.standard_normal((512, 8)).astype(np.float32)
    inits = [
        numpy_helper.from_array(w1, "w1"),
        numpy_helper.from_array(s1, "s1"),
        numpy_helper.from_array(np.zeros(24, np.int8), "z1"),
        numpy_helper.from_array(np.array(act_scale, np.float32), "sa"),
        numpy_helper.from_array(np.array(0, np.int8), "za"),
        numpy_helper.from_array(w2, "w2"),
        numpy_helper.from_array(w3, "w3"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["w1", "s1", "z1"], ["w1_q"], name="w1_quant", axis=1),
        helper.make_node("DequantizeLinear", ["w1_q", "s1", "z1"], ["w1_dq"], name="w1_dequant", axis=1),
        helper.make_node("MatMul", ["x", "w1_dq"], ["h"], name="mm1"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "sa", "za"], ["r_q"], name="r_quant"),
        helper.make_node("DequantizeLinear", ["r_q", "sa", "za"], ["r_dq"], name="r_dequant"),
        helper.make_node("Cast", ["w2"], ["w2_32"], name="w2_cast", to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["r_dq", "w2_32"], ["m2"], name="mm2"),
        helper.make_node("MatMul", ["m2", "w3"], ["m"], name="mm3"),
        helper.make_node("Add", ["m", "b"], ["y"], name="bias"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])]
    if shadow:
        inputs.append(helper.make_tensor_value_info("s1", TensorProto.FLOAT, [24]))
    if int8_read:
        nodes.append(helper.make_node("DequantizeLinear", ["w1_q", "s_in", "z1"], ["w1_again"], name="dq2", axis=1))
        inputs.append(helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [24]))
        outputs.append(helper.make_tensor_value_info("w1_again", TensorProto.FLOAT, [16, 24]))
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def unfolded(model, outputs=None, prepacking=True):
    """The graph run node by node as ONNX Runtime runs it without folding (constant weights prepacked)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if not prepacking:
        options.add_session_config_entry("session.disable_prepacking", "1")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda feeds: dict(
        zip(outputs or [o.name for o in model.graph.output], session.run(outputs, feeds), strict=True)
    )


def test_the_folded_graph_computes_the_same_bits_as_the_graph_as_written():
    model = weight_qdq_graph()
    folded, n = fold_constant_chains(model)
    assert n == 3  # the weight's Q and DQ and the FP16 weight's Cast; the activation's pair stays
    ops = [node.op_type for node in folded.graph.node]
    assert ops.count("QuantizeLinear") == 1 and "Cast" not in ops
    reference, unpacked = unfolded(model), unfolded(model, prepacking=False)
    session = session_from_onnx(model)
    rng = np.random.default_rng()
    xs = [rng.standard_normal((5, 16)).astype(np.float32) for _ in range(3)]
    for x in xs:
        assert np.array_equal(session.infer({"x": x})["y"], reference({"x": x})["y"])
    # the graph is one where the order of a sum shows: a fold that stopped prepacking would fail above
    assert any(not np.array_equal(reference({"x": x})["y"], unpacked({"x": x})["y"]) for x in xs)


def test_folded_weights_are_read_as_initializers_the_session_does_not_take_as_inputs():
    folded, _ = fold_constant_chains(weight_qdq_graph())
    shadowed = {i.name for i in folded.graph.input} & {i.name for i in folded.graph.initializer}
    assert shadowed == {"w1_dq", "w2_32"}  # not constant to ONNX Runtime: never prepacked
    assert [spec.name for spec in session_from_onnx(weight_qdq_graph()).inputs] == ["x"]


def test_quantized_weights_are_folded_along_their_own_axis():
    model = weight_qdq_graph()
    folded, _ = fold_constant_chains(model)
    values = {i.name: numpy_helper.to_array(i) for i in folded.graph.initializer}
    w1 = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "w1"))
    s1 = np.abs(w1).max(axis=0) / 127
    assert np.allclose(values["w1_dq"], np.clip(np.round(w1 / s1), -128, 127) * s1, atol=1e-6)
    assert not np.array_equal(values["w1_dq"], w1)  # it is quantized, not the float weight
    assert "w1" not in values  # nothing else reads the float weight any more


def test_taps_and_graph_outputs_stay_computed_by_their_nodes():
    model = weight_qdq_graph()
    folded, n = fold_constant_chains(model, keep=["w1_dq"])
    assert n == 1  # the Cast only
    assert {"w1_quant", "w1_dequant"} <= {node.name for node in folded.graph.node}
    x = np.random.default_rng().standard_normal((2, 16)).astype(np.float32)
    tapped = session_from_onnx(model, expose=["w1_dq", "h"]).infer({"x": x})
    reference = unfolded(expose_tensors(model, ["w1_dq", "h"]), ["w1_dq", "h", "y"])({"x": x})
    for name in ("w1_dq", "h", "y"):
        assert np.array_equal(tapped[name], reference[name])


def test_int8_tensors_something_reads_and_fed_initializers_are_not_folded():
    model = weight_qdq_graph(int8_read=True)
    folded, n = fold_constant_chains(model)
    names = {node.name for node in folded.graph.node}
    assert {"w1_quant", "w1_dequant"} <= names and n == 1  # w1_q (INT8) and what reads it stay computed
    shadowed, n = fold_constant_chains(weight_qdq_graph(shadow=True))
    assert {"w1_quant", "w1_dequant"} <= {node.name for node in shadowed.graph.node} and n == 1
    x = np.random.default_rng().standard_normal((3, 16)).astype(np.float32)
    s = np.full(24, 0.01, np.float32)
    got = session_from_onnx(model).infer({"x": x, "s_in": s})
    want = unfolded(model)({"x": x, "s_in": s})
    assert all(np.array_equal(got[k], want[k]) for k in want)


def test_a_graph_with_nothing_constant_to_fold_is_returned_as_it_is():
    from tests.graph.test_run import fp16_graph

    model = fp16_graph()
    assert fold_constant_chains(model) == (model, 0)


def test_graphs_differing_only_in_activation_scales_compute_their_weights_once(monkeypatch):
    fold._cache.clear()
    calls = []
    compute = fold._compute
    monkeypatch.setattr(fold, "_compute", lambda *a: calls.append(1) or compute(*a))
    first, _ = fold_constant_chains(weight_qdq_graph(act_scale=0.05))
    second, _ = fold_constant_chains(weight_qdq_graph(act_scale=0.07))
    assert len(calls) == 1
    other, _ = fold_constant_chains(weight_qdq_graph(seed=1))
    assert len(calls) == 2  # other weights: computed, not taken from the cache
    value = {g: {i.name: numpy_helper.to_array(i) for i in m.graph.initializer} for g, m in enumerate((first, other))}
    assert not np.array_equal(value[0]["w1_dq"], value[1]["w1_dq"])


def test_folds_larger_than_the_cache_are_not_kept(monkeypatch):
    fold._cache.clear()
    monkeypatch.setattr(fold, "_KEPT_BYTES", 100)
    fold_constant_chains(weight_qdq_graph())
    assert not fold._cache


def test_a_chain_onnx_runtime_refuses_alone_stays_in_the_graph(monkeypatch):
    fold._cache.clear()

    def refuse(*args):
        raise RuntimeError("no kernel")

    monkeypatch.setattr(fold, "_compute", refuse)
    model = weight_qdq_graph()
    assert fold_constant_chains(model) == (model, 0)
    x = np.random.default_rng().standard_normal((2, 16)).astype(np.float32)
    assert np.allclose(session_from_onnx(model).infer({"x": x})["y"], unfolded(model)({"x": x})["y"], atol=1e-5)
