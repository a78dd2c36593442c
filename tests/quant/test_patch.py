"""Layer groups of quantized graphs and precision patches applied as graph edits."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploykit.config import QuantizeConfig, RepairConfig
from deploykit.graph.proto import opset_version, tensor_types
from deploykit.graph.run import session_from_onnx
from deploykit.quant.flavours import flavour_for
from deploykit.quant.groups import find_groups
from deploykit.quant.patch import apply_patch, switchable
from deploykit.quant.prepare import quantized_node_names
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.reader import SampleStream
from tests.quant import models


def base_of(model, flavour, data, **cfg):
    result = quantize_model(
        Job(model, QuantizeConfig(precision="int8", **cfg), flavour, SampleStream(data), reduce_range=True)
    )
    return result, {g.name: g for g in find_groups(result.base)}


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_groups_join_a_conv_with_its_activation_in_both_flavours():
    data = models.images(8, size=32)
    ort, ort_groups = base_of(models.depthwise(), "onnxruntime", data)
    trt, trt_groups = base_of(models.depthwise(), "tensorrt", data)
    assert list(ort_groups) == list(trt_groups)  # the same layers, named after their convolutions
    assert trt_groups["b0_dw"].ops == "Conv+HardSwish"
    assert ort_groups["b0_dw"].ops == "Conv+HardSigmoid+Mul"  # ORT's pre-processing writes HardSwish out
    assert trt_groups["b1_add"].nodes == ("b1_add",)  # a residual Add reads two groups: its own
    assert trt_groups["head"].ops == "Conv+Sigmoid" and "b0_project" in trt_groups


def attention(tokens=8, dim=16):
    """x -> q, k, v projections -> softmax(q k^T / 4) v -> output projection."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array((rng.standard_normal((dim, dim)) / 4).astype(np.float32), n)
        for n in ("wq", "wk", "wv", "wo")
    ] + [numpy_helper.from_array(np.array(4.0, np.float32), "scale")]
    nodes = [helper.make_node("MatMul", ["x", w], [w[1]], name=f"proj_{w[1]}") for w in ("wq", "wk", "wv")]
    nodes += [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="kt"),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="scores"),
        helper.make_node("Div", ["scores", "scale"], ["scaled"], name="scaled"),
        helper.make_node("Softmax", ["scaled"], ["attn"], axis=-1, name="softmax"),
        helper.make_node("MatMul", ["attn", "v"], ["mixed"], name="mix"),
        helper.make_node("MatMul", ["mixed", "wo"], ["y"], name="proj_o"),
    ]
    graph = helper.make_graph(
        nodes,
        "attn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, tokens, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_an_attention_block_is_one_group():
    rng = np.random.default_rng(1)
    data = [{"x": rng.standard_normal((1, 8, 16)).astype(np.float32)} for _ in range(6)]
    _, groups = base_of(attention(), "onnxruntime", data)
    assert groups["scores"].nodes == ("scores", "scaled", "softmax", "mix")
    assert {"proj_q", "proj_k", "proj_v", "proj_o"} <= set(groups)


@pytest.mark.parametrize(("flavour", "high"), [("onnxruntime", "fp32"), ("tensorrt", "fp32"), ("tensorrt", "fp16")])
def test_every_group_raised_computes_what_the_float_graph_computes(flavour, high):
    model, data = models.depthwise(), models.images(8, size=32)
    result, groups = base_of(model, flavour, data, high_precision=high)
    top = "fp32" if flavour == "onnxruntime" else high
    raised = apply_patch(result.base, result.reference, groups, {g: top for g in groups}, "int8", high)
    onnx.checker.check_model(raised)
    assert not quantized_node_names(raised)
    present = {t for n in raised.graph.node for t in (*n.input, *n.output)}
    stale = [v.name for v in raised.graph.value_info if v.name not in present]
    assert not stale, f"declarations of removed tensors (TensorRT lint reads them as INT8 outside Q/DQ): {stale[:3]}"
    fp32, got = session_from_onnx(model), session_from_onnx(raised)
    errors = [rel(got.infer(d)["prob"], fp32.infer(d)["prob"]) for d in data[:3]]
    int8 = session_from_onnx(result.base)
    plain = [rel(int8.infer(d)["prob"], fp32.infer(d)["prob"]) for d in data[:3]]
    assert max(errors) < (1e-6 if high == "fp32" else 3e-3) < min(plain)


def test_fp8_and_fp32_layers_in_an_int8_fp16_graph():
    model, data = models.depthwise(), models.images(8, size=32)
    result, groups = base_of(model, "tensorrt", data, repair=RepairConfig(enabled=True, max_iterations=1))
    assert opset_version(result.base) == 21 and flavour_for("tensorrt").ladder("int8", "fp16", 21) == (
        "int8",
        "fp8",
        "fp16",
        "fp32",
    )
    patched = apply_patch(result.base, result.reference, groups, {"b0_dw": "fp8", "b1_dw": "fp32"}, "int8", "fp16")
    onnx.checker.check_model(patched)
    inits = {t.name: t for t in patched.graph.initializer}
    nodes = {n.name: n for n in patched.graph.node}
    made_by = {o: n for n in patched.graph.node for o in n.output}
    dw_inputs = [made_by[i] for i in nodes["b0_dw"].input if i in made_by]
    assert {inits[d.input[2]].data_type for d in dw_inputs if d.op_type == "DequantizeLinear"} == {
        TensorProto.FLOAT8E4M3FN
    }
    others = [made_by[i] for i in nodes["b0_project"].input if i in made_by]
    assert {inits[d.input[2]].data_type for d in others if d.op_type == "DequantizeLinear"} == {TensorProto.INT8}
    types = tensor_types(onnx.shape_inference.infer_shapes(patched))
    assert types[nodes["b1_dw"].output[0]] == TensorProto.FLOAT and types[nodes["b1_dw"].input[1]] == TensorProto.FLOAT
    assert types["b1_dw_act"] == TensorProto.FLOAT16  # cast back for the FP16 rest
    assert "b1_dw" not in quantized_node_names(patched)
    out = session_from_onnx(patched).infer(data[0])["prob"]
    assert np.all(np.isfinite(out)) and rel(out, session_from_onnx(model).infer(data[0])["prob"]) < 0.2


@pytest.mark.parametrize("flavour", ["onnxruntime", "tensorrt"])
def test_the_switchable_graph_computes_each_patch_as_the_patch_s_own_graph(flavour):
    """Both run as written (Q/DQ as fake quantization): the switches pick, group by group, what
    apply_patch writes, the quantized model outputs included (the onnxruntime flavour quantizes them)."""
    model, data = models.depthwise(), models.images(8, size=32)
    result, groups = base_of(model, flavour, data, high_precision="fp32")
    screen, switches = switchable(result.base, result.reference, groups)
    onnx.checker.check_model(screen)
    assert sorted(switches) == sorted(groups)
    # each Q/DQ pair runs inside a switch's false branch only: a group switched to FP32 computes none
    assert not {n.op_type for n in screen.graph.node} & {"QuantizeLinear", "DequantizeLinear", "Where"}
    one, optimized = session_from_onnx(screen, level="disabled"), session_from_onnx(screen)
    rng = np.random.default_rng()
    names = list(groups)
    patches = [{}, dict.fromkeys(names, "fp32"), {names[-1]: "fp32"}]
    patches += [{g: "fp32" for g in names if rng.random() < 0.5} for _ in range(3)]
    outputs = []
    for patch in patches:
        own = session_from_onnx(
            apply_patch(result.base, result.reference, groups, patch, "int8", "fp32"), level="disabled"
        )
        feeds = {s: np.array(g in patch) for g, s in switches.items()}
        for d in data[:2]:
            got, want = one.infer({**d, **feeds})["prob"], own.infer(d)["prob"]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(optimized.infer({**d, **feeds})["prob"], got)  # as the search opens it
        outputs.append(got)
    assert rel(outputs[0], outputs[1]) > 1e-3 and rel(outputs[1], outputs[2]) > 1e-4  # the switches matter


def test_the_switchable_graph_dequantizes_per_channel_matmul_weights_along_their_axis():
    """MatMul weights [K, N] are quantized per output channel (axis 1): the constants the switches
    pick must dequantize along that axis, as the DequantizeLinear they replace did."""
    rng = np.random.default_rng()
    data = [{"x": rng.standard_normal((1, 8, 16)).astype(np.float32)} for _ in range(6)]
    result, groups = base_of(attention(), "onnxruntime", data, per_channel=True)
    axes = {
        next((a.i for a in n.attribute if a.name == "axis"), 1)
        for n in result.base.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in {t.name for t in result.base.graph.initializer}
    }
    assert 1 in axes
    screen, switches = switchable(result.base, result.reference, groups)
    one = session_from_onnx(screen, level="disabled")
    for patch in ({}, {"proj_q": "fp32"}, {g: "fp32" for g in groups if g != "proj_o"}):
        own = session_from_onnx(
            apply_patch(result.base, result.reference, groups, patch, "int8", "fp32"), level="disabled"
        )
        feeds = {s: np.array(g in patch) for g, s in switches.items()}
        for d in data[:2]:
            np.testing.assert_allclose(one.infer({**d, **feeds})["y"], own.infer(d)["y"], rtol=1e-5, atol=1e-6)


def test_the_switches_never_take_a_name_the_model_uses():
    model = attention()
    model.graph.input[0].name = "deploykit_switch_0"
    for node in model.graph.node:
        node.input[:] = ["deploykit_switch_0" if i == "x" else i for i in node.input]
    rng = np.random.default_rng()
    data = [{"deploykit_switch_0": rng.standard_normal((1, 8, 16)).astype(np.float32)} for _ in range(6)]
    result, groups = base_of(model, "onnxruntime", data)
    screen, switches = switchable(result.base, result.reference, groups)
    onnx.checker.check_model(screen)
    assert "deploykit_switch_0" not in switches.values() and len(set(switches.values())) == len(groups)
    feeds = {s: np.array(True) for s in switches.values()}
    got = session_from_onnx(screen, level="disabled").infer({**data[0], **feeds})["y"]
    np.testing.assert_allclose(got, session_from_onnx(model).infer(data[0])["y"], rtol=1e-4, atol=1e-5)


def test_the_same_patch_gives_the_same_bytes_in_any_order():
    model, data = models.depthwise(), models.images(8, size=32)
    result, groups = base_of(model, "onnxruntime", data)
    one = apply_patch(result.base, result.reference, groups, {"b0_dw": "fp32", "head": "fp32"}, "int8", "fp32")
    two = apply_patch(result.base, result.reference, groups, {"head": "fp32", "b0_dw": "fp32"}, "int8", "fp32")
    assert one.SerializeToString() == two.SerializeToString()
    assert (
        apply_patch(result.base, result.reference, groups, {}, "int8", "fp32").SerializeToString()
        == result.base.SerializeToString()
    )


def test_a_patch_built_for_sessions_refers_to_the_float_weights_and_fills_to_the_same_bytes(monkeypatch):
    """With a Held set the restored FP32 weights are references, not copies: a session computes what the
    self-contained graph computes, bit for bit, and fill_held gives that graph's bytes; a reference
    whose set is gone is never read (the graph must then go through a file, which fails loudly)."""
    from deploykit.graph import files

    monkeypatch.setattr(files, "APART_BYTES", 1)  # the test model's weights are small
    model, data = models.depthwise(), models.images(8, size=32)
    result, groups = base_of(model, "onnxruntime", data)
    patch = {"b0_dw": "fp32", "b1_expand": "fp32", "head": "fp32"}
    whole = apply_patch(result.base, result.reference, groups, patch, "int8", "fp32")
    held = files.Held(result.reference)
    light = apply_patch(result.base, result.reference, groups, patch, "int8", "fp32", held=held)
    referred = [t for t in light.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert referred and not any(t.HasField("raw_data") for t in referred)
    assert light.ByteSize() < whole.ByteSize()
    data_bytes, weights = files.session_source(light)
    assert {t.name for t in referred} <= set(weights)
    for sample in data[:2]:
        got = session_from_onnx(light, "onnxruntime", level="all").run_all(sample)
        want = session_from_onnx(whole, "onnxruntime", level="all").run_all(sample)
        assert all(np.array_equal(got[k], want[k]) for k in want)
    with files.as_file(light) as path:  # where a graph must go through a file, it holds its weights
        assert onnx.load(str(path)).SerializeToString() == whole.SerializeToString()
    assert files.fill_held(light).SerializeToString() == whole.SerializeToString()
    orphan = apply_patch(
        result.base, result.reference, groups, patch, "int8", "fp32", held=files.Held(result.reference)
    )
    assert files.session_source(orphan) == (None, {})


def test_layer_precisions_naming_a_missing_group_is_a_config_error():
    from deploykit.errors import ConfigError

    with pytest.raises(ConfigError, match="names 'b0_dww'.*close: b0_dw"):
        base_of(models.depthwise(), "onnxruntime", models.images(8, size=32), layer_precisions={"b0_dww": "fp32"})
    with pytest.raises(ConfigError, match="offers int8, fp32"):
        base_of(models.depthwise(), "onnxruntime", models.images(8, size=32), layer_precisions={"b0_dw": "fp8"})


def _drop_unread_by_passes(model):
    """The rule _drop_unread applies, as passes over the graph until none removes anything."""
    outputs = {o.name for o in model.graph.output}
    dropped = set()
    while True:
        read = {i for n in model.graph.node for i in n.input} | outputs
        gone = [
            n
            for n in model.graph.node
            if n.op_type in ("QuantizeLinear", "DequantizeLinear", "Cast") and not set(n.output) & read
        ]
        if not gone:
            break
        dropped |= {i for n in gone for i in n.input}
        keep = [n for n in model.graph.node if n not in gone]
        del model.graph.node[:]
        model.graph.node.extend(keep)
    used = {i for n in model.graph.node for i in n.input} | outputs
    keep = [t for t in model.graph.initializer if t.name in used or t.name not in dropped]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    present = {t for n in model.graph.node for t in (*n.input, *n.output)}
    keep = [v for v in model.graph.value_info if v.name in present]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)


@pytest.mark.parametrize("seed", range(6))
def test_one_pass_drops_the_same_unread_q_dq_chains_as_repeated_passes(seed):
    """Random DAGs of Q/DQ/Cast chains (some ending nowhere, some shared, some feeding an output):
    the one-pass removal leaves the same graph as removing unread nodes pass after pass."""
    from deploykit.quant.patch import _drop_unread

    rng = np.random.default_rng(seed)
    nodes, tensors, inits, infos = [], ["x"], [], []
    for k in range(60):
        op = rng.choice(["QuantizeLinear", "DequantizeLinear", "Cast", "Relu", "Add"])
        src = tensors[int(rng.integers(len(tensors)))]
        ins = [src]
        if op in ("QuantizeLinear", "DequantizeLinear"):
            scale = f"s{k}" if rng.random() < 0.7 else "s_shared"
            ins.append(scale)
            if scale not in {t.name for t in inits}:
                inits.append(numpy_helper.from_array(np.array(0.1, np.float32), scale))
        elif op == "Add":
            ins.append(tensors[int(rng.integers(len(tensors)))])
        out = f"t{k}"
        nodes.append(helper.make_node(str(op), ins, [out], name=f"n{k}"))
        infos.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, [1]))
        tensors.append(out)
    outs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, [1]) for t in rng.choice(tensors[1:], 3, replace=False)]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], outs, inits, value_info=infos
    )
    model = helper.make_model(graph)
    expected = onnx.ModelProto()
    expected.CopyFrom(model)
    _drop_unread_by_passes(expected)
    _drop_unread(model)
    assert len(model.graph.node) < len(nodes)  # something was dropped
    assert model.SerializeToString() == expected.SerializeToString()


def _ort_outputs(model, sample, disabled=()):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled)
    )
    return session.run(None, sample)


def _behind_q_dq(model, node_name):
    """``model`` with the node's input and output each passed through a Q/DQ pair of its own."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    node = next(n for n in out.graph.node if n.name == node_name)
    scale = numpy_helper.from_array(np.array(0.05, np.float32), f"{node_name}_hz_scale")
    zero = numpy_helper.from_array(np.array(128, np.uint8), f"{node_name}_hz_zero")
    out.graph.initializer.extend([scale, zero])

    def pair(src, dst, tag):
        q = helper.make_node("QuantizeLinear", [src, scale.name, zero.name], [f"{src}_{tag}_q"], name=f"{src}_{tag}_Q")
        dq = helper.make_node("DequantizeLinear", [q.output[0], scale.name, zero.name], [dst], name=f"{src}_{tag}_DQ")
        return [q, dq]

    x, y = node.input[0], node.output[0]
    node.input[0], node.output[0] = f"{x}_hz_in", f"{y}_hz_pre"
    nodes = list(out.graph.node)
    at = nodes.index(node)
    del out.graph.node[:]
    out.graph.node.extend(
        [*nodes[:at], *pair(x, node.input[0], "in"), node, *pair(node.output[0], y, "out"), *nodes[at + 1 :]]
    )
    return out


@pytest.mark.parametrize("patch", [{"b1_expand": "fp32"}, {"b1_expand": "fp32", "b1_dw": "fp32"}, {"head": "fp32"}])
def test_onnx_runtime_does_not_quantize_a_raised_group_again(patch):
    """ONNX Runtime's WeightBiasQuantization rule (basic level and up) quantizes the float weights of
    a Conv that reads a DequantizeLinear and feeds a QuantizeLinear: a raised group reading its input
    through the base's Q/DQ would run INT8 again, silently. It reads the float tensor past the pair, so
    the optimized graph computes what it computes without the rule; the same conv put between Q/DQ
    pairs does not (the rule is live in this ONNX Runtime)."""
    model, data = models.depthwise(), models.images(8, size=32)
    result, groups = base_of(model, "onnxruntime", data)
    raised = apply_patch(result.base, result.reference, groups, patch, "int8", "fp32")
    weights = {t.name for t in raised.graph.initializer}
    writer = {o: n.op_type for n in raised.graph.node for o in n.output}
    float_compute = [n for n in raised.graph.node if n.op_type in ("Conv", "Gemm", "MatMul") and n.input[1] in weights]
    assert {n.name for n in float_compute} >= set(patch)
    assert not [n.name for n in float_compute if writer.get(n.input[0]) == "DequantizeLinear"]
    off = ["WeightBiasQuantization"]
    for got, without in zip(_ort_outputs(raised, data[0]), _ort_outputs(raised, data[0], off), strict=True):
        assert np.array_equal(got, without)
    hazard = _behind_q_dq(raised, next(iter(patch)))
    assert not np.array_equal(_ort_outputs(hazard, data[0])[0], _ort_outputs(hazard, data[0], off)[0])
