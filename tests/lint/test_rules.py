"""The lint's rules on graphs built in code: each case next to the same graph made right, so a rule
that fires on everything (or on nothing) fails."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from deploykit.lint import LintOptions, lint_model
from tests.lint.graphs import F, conv_net, errors, init, model, rules, single, value

T = TensorProto
BOTH = LintOptions()


def lint(m: onnx.ModelProto, **options) -> object:
    return lint_model(m, LintOptions(**options))


def test_a_plain_conv_net_is_clean_for_every_version():
    report = lint(conv_net())
    assert report.findings == () and report.passed and report.exit_code == 0
    assert [v.line() for v in report.verdicts()] == [
        "TensorRT 10.13: 0 errors, 0 warnings",
        "TensorRT 11: 0 errors, 0 warnings",
    ]


@pytest.mark.parametrize("op", ["ConvInteger", "Unique", "SequenceEmpty"])
def test_unsupported_operators_are_errors_with_a_fix(op):
    node_inputs = {"ConvInteger": ["x", "w"], "Unique": ["x"], "SequenceEmpty": []}[op]
    inits = [init("w", np.ones((1, 1, 1, 1), np.uint8))] if op == "ConvInteger" else []
    elem = T.UINT8 if op == "ConvInteger" else F
    values = [value("x", elem, [1, 1, 2, 2])] if node_inputs else []
    report = lint(single(op, node_inputs, values, inits))
    found = [f for f in report.findings if f.rule == "op.unsupported"]
    assert len(found) == 1 and found[0].versions == ("10.13", "11") and found[0].op == op
    assert ("quantize.target=tensorrt" in found[0].fix) == (op == "ConvInteger")
    assert report.exit_code == 4


def test_an_operator_newer_than_a_version_is_an_error_for_that_version_only():
    q = value("q", F, [1, 2, 4, 8])
    m = single("Attention", ["q", "q", "q"], [q], opset=23, out_shape=[1, 2, 4, 8])
    report = lint(m)  # not in 10.13's table: the parser falls back to a plugin of that name, finds none
    assert errors(report, "10.13") == {"plugin.missing"} and errors(report, "11") == set()
    assert "not an operator the parser imports" in report.findings[0].message


def test_attention_restrictions_in_11():
    q = value("q", F, [2, 4, 8])  # 3-D: TensorRT needs 4-D
    m = single("Attention", ["q", "q", "q"], [q], opset=23, softcap=1.0)
    found = [f.message for f in lint(m, versions=("11",)).findings if f.rule == "op.attribute"]
    assert any("rank 3" in m for m in found) and any("softcap" in m for m in found)


@pytest.mark.parametrize(("k", "bad"), [(100, False), (3839, False), (3840, True), (5000, True)])
def test_topk_k_limit(k, bad):
    x = value("x", F, [1, 8000])
    m = single("TopK", ["x", "k"], [x], [init("k", np.array([k], np.int64))], outputs=("v", "i"))
    report = lint(m)
    assert ("op.attribute" in errors(report)) == bad


def test_topk_unsorted_is_an_error():
    x = value("x", F, [1, 10])
    m = single("TopK", ["x", "k"], [x], [init("k", np.array([3], np.int64))], outputs=("v", "i"), sorted=0)
    assert "sorted=0" in " ".join(f.message for f in lint(m).findings)


@pytest.mark.parametrize(
    ("attrs", "bad"),
    [
        ({"mode": "linear", "coordinate_transformation_mode": "half_pixel"}, False),
        ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, False),
        ({"mode": "cubic"}, False),  # the parser's checker accepts cubic (InterpolationMode.CUBIC)
        ({"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize"}, True),
        ({"mode": "linear", "antialias": 1}, True),
        (
            {
                "mode": "nearest",
                "coordinate_transformation_mode": "tf_half_pixel_for_nn",
                "nearest_mode": "floor",
            },
            True,
        ),
        ({"mode": "linear", "keep_aspect_ratio_policy": "not_larger"}, True),
    ],
)
def test_resize_modes(attrs, bad):
    x = value("x", F, [1, 3, 4, 4])
    m = single("Resize", ["x", "", "s"], [x], [init("s", np.array([1, 1, 2, 2], np.float32))], opset=19, **attrs)
    assert ("op.attribute" in errors(lint(m))) == bad


@pytest.mark.parametrize(("reduction", "bad"), [("none", False), ("add", True), ("max", True)])
def test_scatternd_reduction(reduction, bad):
    data, idx, upd = value("d", F, [4, 3]), value("i", T.INT64, [2, 1]), value("u", F, [2, 3])
    m = single("ScatterND", ["d", "i", "u"], [data, idx, upd], opset=18, reduction=reduction)
    assert ("op.attribute" in errors(lint(m))) == bad


def test_pooling_dilations_and_extra_outputs():
    x = value("x", F, [1, 1, 8, 8])
    ok = single("MaxPool", ["x"], [x], kernel_shape=[2, 2])
    dilated = single("MaxPool", ["x"], [x], kernel_shape=[2, 2], dilations=[2, 2])
    indices = single("MaxPool", ["x"], [x], kernel_shape=[2, 2], outputs=("y", "idx"))
    assert errors(lint(ok)) == set()
    assert "dilation" in lint(dilated).findings[0].message
    assert "'idx'" in lint(indices).findings[0].message


def test_reduce_axes_must_be_constant():
    x, axes = value("x", F, [2, 3]), value("axes", T.INT64, [1])
    constant = single("ReduceSum", ["x", "a"], [x], [init("a", np.array([1], np.int64))], opset=18)
    dynamic = single("ReduceSum", ["x", "axes"], [x, axes], opset=18)
    assert "op.attribute" not in errors(lint(constant, profiles={}))
    assert "op.attribute" in errors(lint(dynamic, profiles={"axes": [(1,), (1,), (1,)]}))


def nms(boxes=(1, 6, 4), scores=(1, 2, 6), max_out=(5, ()), iou=(0.5, ()), **attrs) -> onnx.ModelProto:
    """NonMaxSuppression over graph inputs ``boxes`` and ``scores``; ``max_out`` and ``iou`` are
    (value, shape) initializers, or None for a graph input of that name."""
    values = [value("boxes", F, list(boxes)), value("scores", F, list(scores))]
    inits = []
    if max_out is None:
        values.append(value("max_out", T.INT64, []))
    else:
        inits.append(init("max_out", np.full(max_out[1], max_out[0], np.int64)))
    inits.append(init("iou", np.full(iou[1], iou[0], np.float32)))
    return single(
        "NonMaxSuppression", ["boxes", "scores", "max_out", "iou"], values, inits, T.INT64, [None, 3], **attrs
    )


def nms_findings(m: onnx.ModelProto) -> set[tuple[str, str]]:
    return {(f.severity, f.message.split(";")[0]) for f in lint(m, profiles={}).findings if f.rule == "op.attribute"}


def test_a_plain_nonmaxsuppression_is_clean_for_every_version():
    report = lint(nms(), profiles={})
    assert report.findings == () and report.exit_code == 0


@pytest.mark.parametrize(
    ("bad", "severity", "message"),
    [
        ({"boxes": (6, 4)}, "error", "boxes has rank 2"),
        ({"scores": (1, 1, 2, 6)}, "error", "scores has rank 4"),
        ({"max_out": (5, (2,))}, "error", "max_output_boxes_per_class has shape [2]"),
        ({"iou": (0.5, (1, 2))}, "error", "iou_threshold has shape [1, 2]"),
        ({"center_point_box": 2}, "error", "center_point_box=2"),
        ({"max_out": None}, "warning", "max_output_boxes_per_class ('max_out') must be a build-time constant"),
        ({"iou": (1.5, ())}, "warning", "iou_threshold 1.5"),
    ],
)
def test_nonmaxsuppression_inputs(bad, severity, message):
    found = nms_findings(nms(**bad))
    assert found == {(severity, message)}
    report = lint(nms(**bad), profiles={})
    assert {f.versions for f in report.findings} == {("10.13", "11")}
    assert "3-D boxes" in report.findings[0].fix


def test_a_one_element_threshold_is_a_scalar_to_the_parser():
    assert nms_findings(nms(max_out=(5, (1,)), iou=(0.4, (1,)))) == set()


def test_einsum_upper_case_subscripts_are_refused():
    a = value("a", F, [2, 3])
    assert errors(lint(single("Einsum", ["a", "a"], [a], equation="ij,ij->i"))) == set()
    assert errors(lint(single("Einsum", ["a", "a"], [a], equation="IJ,IJ->I"))) == {"op.attribute"}


def test_an_input_type_the_matrix_does_not_list_is_a_warning():
    x = value("x", T.INT32, [2, 2])
    report = lint(single("MatMul", ["x", "x"], [x], out_elem=T.INT32))
    assert {(f.rule, f.severity) for f in report.findings} == {("op.type", "warning")}


def test_opset_outside_the_documented_range_warns():
    assert rules(lint(conv_net(opset=8))) == {"opset.range"}
    assert rules(lint(conv_net(opset=24))) == set() or rules(lint(conv_net(opset=24)), "10.13") == {"opset.range"}
    assert rules(lint(conv_net(opset=24)), "11") == set()


# -- types --------------------------------------------------------------------------------------


def test_double_io_and_compute_warn():
    x = value("x", T.DOUBLE, [2])
    report = lint(single("Relu", ["x"], [x], out_elem=T.DOUBLE))
    assert {(f.rule, f.severity) for f in report.findings} >= {("type.double", "warning")}
    assert report.passed


def test_uint8_inside_the_network_is_an_error_but_not_at_its_edges():
    x = value("x", T.UINT8, [4])
    at_edge = single("Cast", ["x"], [x], to=T.FLOAT)  # a UINT8 input cast at once: fine
    inside = model(
        [
            helper.make_node("Cast", ["f"], ["u"], name="to_u8", to=T.UINT8),
            helper.make_node("Cast", ["u"], ["y"], name="back", to=T.FLOAT),
        ],
        [value("f", F, [4])],
        [value("y", F, [4])],
    )
    assert rules(lint(at_edge)) == set()
    assert errors(lint(inside)) == {"type.uint8"}


def test_an_int8_weight_cast_back_is_an_error_but_its_dequantize_is_not():
    w = init("w", np.ones((4,), np.int8))
    cast = model(
        [helper.make_node("Cast", ["w"], ["wf"], to=T.FLOAT), helper.make_node("Add", ["x", "wf"], ["y"])],
        [value("x", F, [4])],
        [value("y", F, [4])],
        [w],
    )
    dq = model(
        [
            helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]),
            helper.make_node("Add", ["x", "wf"], ["y"]),
        ],
        [value("x", F, [4])],
        [value("y", F, [4])],
        [w, init("s", np.array(0.1, np.float32))],
    )
    assert errors(lint(cast)) == {"type.quantized"}
    assert rules(lint(dq)) == set()


def test_int64_constants_beyond_int32_are_narrowed_where_the_reader_has_no_int64():
    """Range reads INT64 in the matrix; Clip lists float types only, so its INT64 bounds are narrowed."""
    x = value("x", T.INT64, [4])
    big, small = np.array(2**40, np.int64), np.array(7, np.int64)

    def clip(bound: np.ndarray) -> onnx.ModelProto:
        return single("Clip", ["x", "lo", "hi"], [x], [init("lo", np.array(0, np.int64)), init("hi", bound)], T.INT64)

    narrowed = lint(clip(big))
    found = [f for f in narrowed.findings if f.rule == "type.int64"]
    assert [(f.severity, f.node, f.op, f.versions) for f in found] == [("warning", "hi", "Clip", ("10.13", "11"))]
    assert "beyond INT32" in found[0].message and narrowed.passed
    assert "type.int64" not in rules(lint(clip(small)))
    fits = single("Add", ["x", "c"], [x], [init("c", big)], T.INT64)  # Add lists INT64: nothing is narrowed
    assert "type.int64" not in rules(lint(fits))


@pytest.mark.parametrize(
    ("base", "exponent", "bad"),
    [(T.FLOAT16, np.float32, True), (F, np.int64, True), (F, np.float32, False), (T.FLOAT16, np.float16, False)],
)
def test_a_pow_whose_exponent_type_differs_from_its_base_is_refused_strongly_typed(base, exponent, bad):
    m = single("Pow", ["x", "e"], [value("x", base, [4])], [init("e", np.array(2, exponent))], base)
    report = lint(m)
    assert ("type.strong" in errors(report)) == bad
    if bad:
        (found,) = [f for f in report.findings if f.rule == "type.strong"]
        assert found.versions == ("10.13", "11") and "give the exponent the base's type" in found.fix


def test_the_strongly_typed_precision_note_is_for_11_only_and_only_for_an_fp32_graph():
    def note(report) -> bool:
        return any("strongly typed networks only" in n for n in report.notes)

    assert note(lint(conv_net(), versions=("11",)))
    assert not note(lint(conv_net(), versions=("10.13",)))
    half = single("Relu", ["x"], [value("x", T.FLOAT16, [4])], out_elem=T.FLOAT16)
    assert not note(lint(half, versions=("11",)))


# -- Q/DQ ---------------------------------------------------------------------------------------


def qdq_conv(
    *,
    zero_dtype=np.int8,
    zero=0,
    weight_axis=0,
    per_channel=True,
    scale=0.02,
    opset=17,
    activation_scale=None,
) -> onnx.ModelProto:
    """x -> Q -> DQ -> Conv(DQ(W)) -> y: symmetric INT8 with per-channel weights by default."""
    rng = np.random.default_rng(1)
    w = rng.integers(-127, 127, (4, 3, 3, 3)).astype(np.int8)
    wscale = np.full((4 if weight_axis == 0 else 3,) if per_channel else (), 0.01, np.float32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dq"),
        helper.make_node("DequantizeLinear", ["w", "ws"], ["wd"], name="dq_w", axis=weight_axis),
        helper.make_node("Conv", ["xd", "wd"], ["y"], name="conv"),
    ]
    inits = [
        init("w", w),
        init("ws", wscale),
        init("xs", np.asarray(activation_scale if activation_scale is not None else scale, np.float32)),
        init("xz", np.asarray(zero, zero_dtype)),
    ]
    return model(nodes, [value("x", F, [1, 3, 8, 8])], [value("y", F, [1, 4, 6, 6])], inits, opset=opset)


def test_symmetric_int8_with_per_channel_weights_is_clean():
    assert lint(qdq_conv()).findings == ()


def test_a_declaration_of_a_tensor_nothing_writes_or_reads_is_not_linted():
    """A Q/DQ pair removed by an edit can leave its INT8 declaration behind; the parser never sees
    that tensor, so no rule reads it. The same tensor written by a Cast is still refused."""
    stale = qdq_conv()
    stale.graph.value_info.append(value("gone_QuantizeLinear_Output", T.INT8, [1, 3, 8, 8]))
    assert lint(stale).findings == ()
    written = qdq_conv()
    written.graph.node.append(helper.make_node("Cast", ["x"], ["gone"], to=T.INT8))
    written.graph.output.append(value("y2", F, None))
    written.graph.node.append(helper.make_node("Cast", ["gone"], ["y2"], to=T.FLOAT))
    assert "type.quantized" in errors(lint(written))


def test_onnxruntime_style_asymmetric_uint8_is_refused():
    report = lint(qdq_conv(zero_dtype=np.uint8, zero=128))
    assert {"qdq.type", "qdq.zero_point"} <= errors(report)
    assert all("quantize.target=tensorrt" in f.fix for f in report.findings if f.rule.startswith("qdq."))


def test_a_nonzero_int8_zero_point_is_refused():
    assert errors(lint(qdq_conv(zero=3))) == {"qdq.zero_point"}


def test_int32_bias_dequantize_is_refused():
    m = qdq_conv()
    m.graph.initializer.append(init("b", np.zeros(4, np.int32)))
    m.graph.initializer.append(init("bs", np.array(0.0002, np.float32)))
    m.graph.node.insert(3, helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"], name="dq_bias"))
    m.graph.node[4].input.append("bd")
    assert errors(lint(m)) == {"qdq.bias"}


def test_per_channel_weights_on_the_wrong_axis_are_refused():
    report = lint(qdq_conv(weight_axis=1))
    assert errors(report) == {"qdq.axis"} and "axis 0" in report.findings[0].message


def test_per_channel_scales_on_an_activation_are_refused():
    assert "qdq.axis" in errors(lint(qdq_conv(activation_scale=np.full((3,), 0.02, np.float32))))


@pytest.mark.parametrize("scale", [0.0, -0.1, float("inf")])
def test_a_scale_that_is_not_positive_and_finite_is_refused(scale):
    assert errors(lint(qdq_conv(scale=scale))) == {"qdq.scale"}


def test_a_scale_computed_at_run_time_is_refused():
    m = qdq_conv()
    m.graph.input.append(value("xs_in", F, []))
    m.graph.node[0].input[1] = "xs_in"
    assert "qdq.scale" in errors(lint(m, profiles={}))


def test_fp8_needs_opset_19_and_fp16_scales_with_fp8_need_21():
    def fp8(opset: int, scale_type) -> onnx.ModelProto:
        zp = helper.make_tensor("z", T.FLOAT8E4M3FN, [], [0.0])
        nodes = [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
        ]
        x_type = T.FLOAT16 if scale_type == np.float16 else F
        return model(
            nodes,
            [value("x", x_type, [4])],
            [value("y", x_type, [4])],
            [init("s", np.array(0.5, scale_type)), zp],
            opset=opset,
        )

    assert "qdq.opset" in errors(lint(fp8(17, np.float32)))
    assert errors(lint(fp8(19, np.float32))) == set()
    assert "qdq.opset" in errors(lint(fp8(19, np.float16)))
    assert errors(lint(fp8(21, np.float16))) == set()


def test_unpaired_quantize_and_dequantize_into_softmax_are_placement_warnings():
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], name="dq"),
        helper.make_node("Softmax", ["d"], ["y"], name="softmax"),
    ]
    ok_inits = [init("s", np.array(0.1, np.float32)), init("z", np.array(0, np.int8))]
    fused = model(
        nodes[:2] + [helper.make_node("Relu", ["d"], ["y"])],
        [value("x", F, [4])],
        [value("y", F, [4])],
        ok_inits,
    )
    standalone = model(nodes, [value("x", F, [4])], [value("y", F, [4])], ok_inits)
    unpaired = model(
        [nodes[0], helper.make_node("Identity", ["q"], ["y"])],
        [value("x", F, [4])],
        [value("y", T.INT8, [4])],
        ok_inits,
    )
    assert rules(lint(fused)) == set()
    both = model(
        nodes[:2] + [helper.make_node("Softmax", ["d"], ["y"]), helper.make_node("Relu", ["d"], ["z"])],
        [value("x", F, [4])],
        [value("y", F, [4]), value("z", F, [4])],
        ok_inits,
    )
    assert rules(lint(both)) == set()  # a quantizable reader fuses the pair; the Softmax reads float
    assert {(f.rule, f.severity, f.node) for f in lint(standalone).findings} == {("qdq.placement", "warning", "dq")}
    assert ("qdq.placement", "warning", "q") in {(f.rule, f.severity, f.node) for f in lint(unpaired).findings}


# -- shapes -------------------------------------------------------------------------------------


def dynamic_net() -> onnx.ModelProto:
    return model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [value("x", F, ["batch", 3, 8, 8])],
        [value("y", F, ["batch", 3, 8, 8])],
    )


def test_dynamic_inputs_need_profiles_that_fit():
    m = dynamic_net()
    assert errors(lint(m, profiles=None)) == {"shape.profile"}
    assert errors(lint(m, profiles={"x": [(1, 3, 8, 8), (2, 3, 8, 8), (4, 3, 8, 8)]})) == set()
    wrong = lint(m, profiles={"x": [(1, 3, 9, 8), (2, 3, 9, 8), (4, 3, 9, 8)]})
    assert errors(wrong) == {"shape.profile"} and "fixed to 8" in wrong.findings[0].message
    unknown = lint(m, profiles={"x": [(1, 3, 8, 8)] * 3, "images": [(1,)] * 3})
    assert "did you mean" in " ".join(f.message for f in unknown.findings) or "images" in unknown.findings[0].node


def test_each_input_is_judged_by_its_own_profile():
    m = model(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        [value("a", F, ["n", 4]), value("b", F, ["n", 4])],
        [value("y", F, ["n", 4])],
    )
    both = {"a": [(1, 4), (2, 4), (3, 4)], "b": [(1, 4), (2, 4), (3, 4)]}
    assert rules(lint(m, profiles=both)) == set()
    assert {f.node for f in lint(m, profiles={"a": both["a"]}).findings} == {"b"}


def test_an_integer_input_feeding_a_reshape_shape_is_a_shape_tensor():
    m = model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
        [value("x", F, [2, 3]), value("shape", T.INT64, [2])],
        [value("y", F, [3, 2])],
    )
    report = lint(m, profiles={})
    assert errors(report) == {"shape.tensor"} and "input 1 of Reshape 'reshape'" in report.findings[0].message
    constant = model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [value("x", F, [2, 3])],
        [value("y", F, [3, 2])],
        [init("shape", np.array([3, 2], np.int64))],
    )
    assert rules(lint(constant)) == set()


# -- plugins ------------------------------------------------------------------------------------


def plugin_node_model(
    op: str = "BEVPoolV2",
    namespace: str | None = "deploykit",
    version: str = "1",
    body: bool = False,
    domain: str = "deploykit",
) -> onnx.ModelProto:
    attrs = {"plugin_version": version} if namespace is not None else {}
    if namespace is not None:
        attrs["plugin_namespace"] = namespace
    node = helper.make_node(op, ["x"], ["y"], name="plug", domain=domain, **attrs)
    functions = []
    if body:
        functions = [
            helper.make_function(
                domain,
                op,
                ["a"],
                ["b"],
                [
                    helper.make_node("ScatterND", ["a", "i", "a"], ["b"], reduction="add"),
                ],
                [helper.make_opsetid("", 18)],
            )
        ]
        functions[0].node.insert(
            0, helper.make_node("Constant", [], ["i"], value=helper.make_tensor("i", T.INT64, [1, 1], [0]))
        )
    return model(
        [node],
        [value("x", F, [4, 3])],
        [value("y", F, [4, 3])],
        opset=18,
        functions=functions,
        domains={domain: 1},
    )


def test_a_plugin_node_without_a_library_is_an_error_when_tensorrt_is_the_target():
    assert errors(lint(plugin_node_model(), plugins=())) == {"plugin.missing"}
    warned = lint(plugin_node_model(), plugins=None)  # no TensorRT build in this run: a warning
    assert {(f.rule, f.severity) for f in warned.findings} == {("plugin.missing", "warning")}


def test_a_removed_builtin_plugin_is_an_error_on_11_only():
    report = lint(plugin_node_model("BatchedNMS_TRT", namespace="", domain=""), plugins=())
    assert errors(report, "10.13") == set() and "plugin.deprecated" in rules(report, "10.13")
    assert errors(report, "11") == {"plugin.removed"}


def test_a_current_builtin_plugin_needs_a_shipped_version():
    assert errors(lint(plugin_node_model("ROIAlign_TRT", namespace="", version="2", domain=""), plugins=())) == set()
    assert errors(lint(plugin_node_model("ROIAlign_TRT", namespace="", version="7", domain=""), plugins=())) == {
        "plugin.missing"
    }


def test_a_custom_node_with_an_onnx_body_is_inlined_and_its_body_linted():
    report = lint(plugin_node_model("MyOp", namespace=None, body=True, domain="custom"), plugins=())
    assert ("plugin.function", "warning") in {(f.rule, f.severity) for f in report.findings}
    body = [f for f in report.findings if f.rule == "op.attribute"]
    assert body and "in function MyOp" in body[0].message and "'add'" in body[0].message


def test_a_custom_domain_node_named_like_an_onnx_operator_is_imported_as_that_operator():
    report = lint(plugin_node_model("Relu", namespace=None, domain="com.microsoft"), plugins=())
    assert {(f.rule, f.severity) for f in report.findings} == {("plugin.domain", "warning")}


def test_findings_for_both_versions_merge_into_one_listing_both():
    report = lint(single("Unique", ["x"], [value("x", F, [4])]))
    assert [f.versions for f in report.findings] == [("10.13", "11")]
    assert report.findings[0].line().startswith("error op.unsupported 'n' (Unique) [TensorRT 10.13, 11]: ")


def test_the_report_round_trips_through_json():
    import json

    from deploykit.lint import LintReport
    from deploykit.store.jsonio import dumps

    report = lint(qdq_conv(zero_dtype=np.uint8, zero=128))
    again = LintReport.from_dict(json.loads(dumps(report.to_dict())))
    assert again == report and again.exit_code == 4
    assert json.loads(dumps(report.to_dict()))["verdicts"][0]["line"].startswith("TensorRT 10.13: ")
