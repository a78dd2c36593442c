"""Operators against the support table: unsupported operators, the static restrictions of the support
matrix (each implemented once here, named by the ids the tables list per operator), documented input
types and the opset range.

A restriction returns what is wrong with a node in words, or nothing; it never guesses: a value it
cannot see (a dynamic K, an unknown rank) is not a finding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import onnx

from deploykit.lint.findings import Issue, Severity
from deploykit.lint.tables import TYPE_NAMES, SupportTable
from deploykit.lint.view import ONNX_DOMAINS, GraphView, Scoped, first_attribute

Problem = tuple[Severity, str]  # (severity, what is wrong)
QUANTIZED = frozenset({"INT8", "FP8", "INT4", "FP4", "UINT8"})  # type rules and Q/DQ rules own these
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})  # their types are qdq.py's
GENERIC_FIX = (
    "rewrite it with supported operators (a surgery pass), cut it off the graph (surgery `cut`), "
    "or give TensorRT a plugin for it (surgery `replace_with_plugin`, then --plugins LIB)"
)
QUANTIZED_OPS_FIX = (
    "quantize the FP32 model for TensorRT instead: --set quantize.target=tensorrt "
    "(static symmetric Q/DQ that TensorRT fuses)"
)
FIXES = {
    op: QUANTIZED_OPS_FIX
    for op in ("ConvInteger", "MatMulInteger", "QLinearConv", "QLinearMatMul", "DynamicQuantizeLinear")
}
FIXES.update(
    {
        op: "keep sequences out of the graph: export a fixed number of tensors (Concat/Split instead)"
        for op in (
            "SequenceAt",
            "SequenceConstruct",
            "SequenceEmpty",
            "SequenceErase",
            "SequenceInsert",
            "SequenceLength",
            "SequenceMap",
            "ConcatFromSequence",
            "SplitToSequence",
        )
    }
)


def check(view: GraphView, table: SupportTable) -> Iterator[Issue]:
    """Every operator finding for one table."""
    yield from _opset(view, table)
    for scoped in view.all_nodes():
        if scoped.where == "" and routed_to_plugins(scoped.node, table):
            continue  # the parser looks for a plugin: plugins.py judges it
        if scoped.node.domain in ONNX_DOMAINS or scoped.node.domain == "ai.onnx.ml":
            yield from node_issues(view, table, scoped)


def routed_to_plugins(node: onnx.NodeProto, table: SupportTable) -> bool:
    """Whether the parser resolves ``node`` as a plugin: it names a plugin version or namespace, or its op
    type is not an operator the table lists (the parser then falls back to a plugin of that name)."""
    pinned = any(a.name in ("plugin_version", "plugin_namespace") for a in node.attribute)
    return pinned or (node.domain in ONNX_DOMAINS and node.op_type not in table.ops)


def node_issues(view: GraphView, table: SupportTable, scoped: Scoped) -> Iterator[Issue]:
    """One standard-domain node (also one of an inlined function body) against the table."""
    node, where = scoped.node, f" ({scoped.where})" if scoped.where else ""
    op = node.op_type if node.domain != "ai.onnx.ml" else f"ai.onnx.ml::{node.op_type}"
    support = table.ops.get(node.op_type) if node.domain != "ai.onnx.ml" else None
    if support is None or not support.supported:
        said = "marks it unsupported" if support is not None else "does not list it"
        yield Issue(
            "op.unsupported",
            "error",
            scoped.label,
            op,
            f"the ONNX parser's support matrix {said}{where}",
            FIXES.get(node.op_type, GENERIC_FIX),
        )
        return
    for name in support.checks:
        for severity, message in CHECKS[name](view, node):
            yield Issue("op.attribute", severity, scoped.label, op, message + where, _fix(name))
    if support.types and node.input and not scoped.where and node.op_type not in QDQ_OPS:
        got = TYPE_NAMES.get(view.dtype(node.input[0]) or 0)
        if got and got not in support.types and got not in QUANTIZED and got != "DOUBLE":
            yield Issue(
                "op.type",
                "warning",
                scoped.label,
                op,
                f"input {node.input[0]!r} is {got}; the support matrix lists {op} for "
                f"{', '.join(sorted(support.types))} only",
                f"cast {node.input[0]!r} to a listed type",
            )


def _opset(view: GraphView, table: SupportTable) -> Iterator[Issue]:
    if not table.opset_min <= view.opset <= table.opset_max:
        yield Issue(
            "opset.range",
            "warning",
            "",
            "",
            f"the model is opset {view.opset}; the parser documents opsets {table.opset_min} to {table.opset_max}",
            f"convert it (surgery `convert_opset` to {min(max(view.opset, table.opset_min), table.opset_max)})",
        )


def _fix(check_name: str) -> str:
    return RESTRICTION_FIXES.get(
        check_name, "change the node so it meets the restriction (a surgery pass), or cut it off"
    )


# -- the restrictions -------------------------------------------------------------------------------


def _attr(node: onnx.NodeProto, name: str, default: object = None) -> object:
    return first_attribute(node, name, default)


def _input(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


def argminmax_select_last(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    if _attr(node, "select_last_index", 0) and view.opset < 12:
        return [("error", "select_last_index needs opset 12 or later")]
    return []


def attention_4d(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    out = []
    for i, what in ((0, "Q"), (1, "K"), (2, "V"), (3, "attn_mask")):
        rank = view.rank(_input(node, i))
        if rank is not None and rank != 4:
            out.append(("error", f"{what} has rank {rank}; TensorRT needs 4-D Q, K, V and attn_mask"))
    return out


def attention_no_cache(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    names = {4: "past_key", 5: "past_value", 6: "nonpad_kv_seqlen"}
    return [("error", f"input {what} is not supported") for i, what in names.items() if _input(node, i)]


def attention_outputs(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    names = {1: "present_key", 2: "present_value", 3: "qk_matmul_output"}
    return [
        ("error", f"output {what} is not supported")
        for i, what in names.items()
        if len(node.output) > i and node.output[i]
    ]


def attention_attributes(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    return [
        ("error", f"attribute {a} is not supported") for a in ("qk_matmul_output_mode", "softcap") if _attr(node, a)
    ]


def pool_spatial_rank(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    kernel = _attr(node, "kernel_shape", [])
    if isinstance(kernel, list) and len(kernel) > 3:
        return [("error", f"{len(kernel)}-D pooling; TensorRT pools over at most 3 spatial dims")]
    return []


def pool_dilations(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    dilations = _attr(node, "dilations", [])
    if isinstance(dilations, list) and any(d != 1 for d in dilations):
        return [("error", f"dilations {dilations}; TensorRT pools with dilation 1 only")]
    return []


def batchnorm_inference(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    return (
        [("error", "training_mode=1; TensorRT runs BatchNormalization in inference mode only")]
        if _attr(node, "training_mode", 0)
        else []
    )


def first_output_only(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    extra = [o for o in node.output[1:] if o]
    if extra:
        return [("error", f"output(s) {', '.join(map(repr, extra))} beyond the first are not supported")]
    return []


# Cast targets the parser maps to a TensorRT type (DOUBLE goes down to FLOAT: the type rules say so)
_CASTABLE = {1, 10, 16, 6, 7, 3, 2, 9, 17, 22, 23, 11}


def cast_target(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    to = _attr(node, "to")
    if isinstance(to, int) and to not in _CASTABLE:
        return [("error", f"Cast to {TYPE_NAMES.get(to, to)}: TensorRT has no such type")]
    return []


def constant_dense(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    found = [a.name for a in node.attribute if a.name in ("sparse_value", "value_string", "value_strings")]
    return [("error", f"attribute {found[0]} is not supported (dense numeric constants only)")] if found else []


def constant_of_shape_value(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    value = next((a.t for a in node.attribute if a.name == "value"), None)
    if value is not None and value.data_type == onnx.TensorProto.UINT8:
        return [("error", "a UINT8 value is not supported")]
    return []


def _must_be_constant(
    view: GraphView, node: onnx.NodeProto, i: int, what: str, severity: Severity = "error"
) -> list[Problem]:
    name = _input(node, i)
    if name and not view.is_constant(name):
        return [(severity, f"{what} ({name!r}) must be a build-time constant")]
    return []


def cumsum_axis_constant(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    return _must_be_constant(view, node, 1, "axis")


def deformconv_spatial(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    rank = view.rank(_input(node, 0))
    if rank is not None and rank not in (3, 4):
        return [("error", f"input of rank {rank}; TensorRT's DeformConv takes 1-D or 2-D spatial input")]
    return []


def deformconv_pads(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    pads = _attr(node, "pads", [])
    if isinstance(pads, list) and pads and pads[: len(pads) // 2] != pads[len(pads) // 2 :]:
        return [("error", f"pads {pads}: the begin and end pads of each axis must be equal")]
    return []


def dropout_inference(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    if view.opset <= 6 and _attr(node, "is_test", 1) == 0:
        return [("error", "is_test=0 (training mode) is not supported")]
    name = _input(node, 2)
    if not name:
        return []
    value = view.value(name)
    if value is None:
        return [("error", f"training_mode ({name!r}) must be a constant False")]
    return (
        [("error", "training_mode is True; TensorRT runs Dropout in inference mode only")] if bool(value.any()) else []
    )


def einsum_equation(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    equation = str(_attr(node, "equation", ""))
    bad = sorted({c for c in equation if not ("a" <= c <= "z" or c in "->., ")})
    if bad:
        return [
            (
                "error",
                f"equation {equation!r} uses {', '.join(map(repr, bad))}: the parser takes lower-case subscripts only",
            )
        ]
    return []


def static_input_shape(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    shape = view.shapes.get(_input(node, 0))
    if shape is not None and not all(isinstance(d, int) and d > 0 for d in shape):
        return [("error", f"input shape {shape} has dynamic dims; TensorRT needs them static here")]
    return []


def input_4d(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    rank = view.rank(_input(node, 0))
    return [("error", f"input of rank {rank}; TensorRT needs a 4-D input")] if rank not in (None, 4) else []


def rnn_same_activations(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    if _attr(node, "direction", "forward") != "bidirectional":
        return []
    for name in ("activations", "activation_alpha", "activation_beta"):
        values = _attr(node, name)
        if isinstance(values, list) and values:
            half = len(values) // 2
            if values[:half] != values[half:]:
                return [("error", f"bidirectional with different {name} for the reverse pass")]
    return []


def hardmax_axis_static(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    shape = view.shapes.get(_input(node, 0))
    axis = _attr(node, "axis", -1)
    if shape and isinstance(axis, int) and -len(shape) <= axis < len(shape):
        dim = shape[axis]
        if not (isinstance(dim, int) and dim > 0):
            return [("error", f"the dim at axis {axis} is dynamic ({dim}); TensorRT needs it static")]
    return []


def if_branches(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    then, other = (next((a.g for a in node.attribute if a.name == k), None) for k in ("then_branch", "else_branch"))
    if then is None or other is None:
        return []
    if len(then.output) != len(other.output):
        return [("error", f"then_branch has {len(then.output)} outputs, else_branch {len(other.output)}")]
    out: list[Problem] = []
    for a, b in zip(then.output, other.output, strict=True):
        if a.name == b.name:
            out.append(("error", f"both branches name an output {a.name!r}; they must differ"))
        ranks = [len(v.type.tensor_type.shape.dim) if v.type.tensor_type.HasField("shape") else None for v in (a, b)]
        if None not in ranks and ranks[0] != ranks[1]:
            out.append(
                (
                    "error",
                    f"branch outputs {a.name!r} and {b.name!r} differ in rank ({ranks[0]} vs {ranks[1]})",
                )
            )
    return out


def lstm_attributes(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    return [
        ("error", f"{a}={_attr(node, a)} is not supported (0 only)")
        for a in ("input_forget", "layout")
        if _attr(node, a, 0)
    ]


def lp_order(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    p = _attr(node, "p", 2)
    return [("error", f"p={p}: only L1 and L2 are supported")] if p not in (1, 2) else []


def onehot_depth_constant(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    return _must_be_constant(view, node, 1, "depth")


def random_dtype(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    dtype = _attr(node, "dtype")
    if dtype is not None and dtype not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
        return [("error", f"dtype {TYPE_NAMES.get(dtype, dtype)}: FLOAT or FLOAT16 only")]
    return []


def nms_inputs(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    """NonMaxSuppression as the parser imports it into ``INMSLayer``.

    The support matrix at the pinned parser commits lists NMS without restrictions (the 8.x matrix
    wanted all three optional inputs as initializers; the importer no longer does), but its importer
    still refuses boxes or scores that are not 3-D, an optional input that is not a single value, and
    a ``center_point_box`` other than 0 or 1. ``max_output_boxes_per_class`` bounds the layer's
    data-dependent output, so one computed from activations is a warning, as a non-constant axes is;
    so is a constant IoU threshold outside the [0, 1] that ``INMSLayer`` documents.
    """
    out: list[Problem] = []
    for i, what in ((0, "boxes"), (1, "scores")):
        rank = view.rank(_input(node, i))
        if rank is not None and rank != 3:
            out.append(("error", f"{what} has rank {rank}; TensorRT's NMS takes 3-D {what}"))
    for i, what in ((2, "max_output_boxes_per_class"), (3, "iou_threshold"), (4, "score_threshold")):
        shape = view.shapes.get(_input(node, i))
        if shape is not None and all(isinstance(d, int) for d in shape) and _volume(shape) != 1:
            out.append(("error", f"{what} has shape {shape}; TensorRT takes a single value (a scalar)"))
    box = _attr(node, "center_point_box", 0)
    if box not in (0, 1):
        out.append(("error", f"center_point_box={box}; 0 (corners) or 1 (centre and size) only"))
    out += _must_be_constant(view, node, 2, "max_output_boxes_per_class", severity="warning")
    iou = view.value(_input(node, 3))
    if iou is not None and iou.size == 1 and not 0.0 <= float(iou.reshape(-1)[0]) <= 1.0:
        out.append(("warning", f"iou_threshold {float(iou.reshape(-1)[0])}; INMSLayer documents a value in [0, 1]"))
    return out


def _volume(shape: list) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def reduce_axes_constant(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    return _must_be_constant(view, node, 1, "axes")


_TRANSFORMS = {"half_pixel", "pytorch_half_pixel", "tf_half_pixel_for_nn", "asymmetric", "align_corners"}
_NEAREST = {"floor", "ceil", "round_prefer_floor", "round_prefer_ceil"}


def resize_modes(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    out: list[Problem] = []
    transform = _attr(node, "coordinate_transformation_mode", "half_pixel")
    nearest = _attr(node, "nearest_mode", "round_prefer_floor")
    if view.opset >= 11 and transform not in _TRANSFORMS:
        out.append(
            (
                "error",
                f"coordinate_transformation_mode {transform!r}; supported: {', '.join(sorted(_TRANSFORMS))}",
            )
        )
    if _attr(node, "mode", "nearest") == "nearest" and nearest not in _NEAREST:
        out.append(("error", f"nearest_mode {nearest!r}; supported: {', '.join(sorted(_NEAREST))}"))
    if transform == "tf_half_pixel_for_nn" and nearest != "round_prefer_floor":
        out.append(("error", "tf_half_pixel_for_nn works with nearest_mode round_prefer_floor only"))
    if _attr(node, "antialias", 0):
        out.append(("error", "antialias=1 is not supported"))
    policy = _attr(node, "keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        out.append(("error", f"keep_aspect_ratio_policy {policy!r}; only 'stretch' is supported"))
    axes = _attr(node, "axes")
    if isinstance(axes, list) and axes:
        rank = view.rank(_input(node, 0))
        if len(set(axes)) != len(axes):
            out.append(("error", f"axes {axes} repeat an axis"))
        elif (
            _input(node, 2)
            and not view.is_constant(_input(node, 2))
            and rank is not None
            and [a % rank for a in axes] != list(range(rank))
        ):
            out.append(("error", f"axes {axes} with a tensor 'scales': axes must be 0..{rank - 1} in order"))
    return out


def reverse_sequence_axes(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    if _attr(node, "batch_axis", 1) == _attr(node, "time_axis", 0):
        return [("error", "batch_axis equals time_axis")]
    return []


def roialign_modes(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    out: list[Problem] = []
    mode = _attr(node, "mode", "avg")
    if mode not in ("avg", "max"):
        out.append(("error", f"mode {mode!r}; avg or max only"))
    ctm = _attr(node, "coordinate_transformation_mode", "half_pixel")
    if view.opset >= 16 and ctm not in ("half_pixel", "output_half_pixel"):
        out.append(("error", f"coordinate_transformation_mode {ctm!r}; half_pixel or output_half_pixel only"))
    return out


def rotary_position_ids(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    dtype = view.dtype(_input(node, 3))
    if dtype is not None and dtype != onnx.TensorProto.INT64:
        return [("error", f"position_ids is {TYPE_NAMES.get(dtype, dtype)}; INT64 only")]
    return []


def stft_constants(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    out = _must_be_constant(view, node, 1, "frame_step") + _must_be_constant(view, node, 2, "window")
    shape = view.shapes.get(_input(node, 0))
    if shape and shape[-1] not in (1, None) and isinstance(shape[-1], int):
        out.append(("error", "complex input (last dim 2); TensorRT's STFT takes real input"))
    return out


def scatternd_reduction(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    reduction = _attr(node, "reduction", "none")
    if reduction != "none":
        return [("error", f"reduction {reduction!r}; TensorRT's ScatterND supports 'none' only")]
    return []


def slice_inputs(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    if view.opset >= 10 and not 3 <= len(node.input) <= 5:
        return [("error", f"{len(node.input)} inputs; Slice from opset 10 takes 3 to 5")]
    return []


def axes_constant(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    return _must_be_constant(view, node, 1, "axes", severity="warning")


def tensorscatter_layout(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    out: list[Problem] = []
    for i, what in ((0, "past_cache"), (1, "update")):
        rank = view.rank(_input(node, i))
        if rank is not None and rank != 4:
            out.append(("error", f"{what} has rank {rank}; 4-D only"))
    if _attr(node, "axis", -2) != -2:
        out.append(("error", f"axis {_attr(node, 'axis')}; -2 only"))
    return out


def topk_sorted(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    return [("error", "sorted=0: TensorRT's TopK returns sorted results only")] if _attr(node, "sorted", 1) == 0 else []


TOPK_MAX_K = 3840


def topk_k_limit(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    k = view.value(_input(node, 1)) if view.opset >= 10 else _attr(node, "k")
    if k is not None:
        value = int(k if isinstance(k, int) else k.reshape(-1)[0])
        if value >= TOPK_MAX_K:
            return [("error", f"K = {value}; TensorRT's TopK takes K < {TOPK_MAX_K}")]
    return []


def upsample_mode(view: GraphView, node: onnx.NodeProto) -> list[Problem]:
    mode = _attr(node, "mode", "nearest")
    return (
        [("error", f"mode {mode!r}; nearest, linear or bilinear only")]
        if mode not in ("nearest", "linear", "bilinear")
        else []
    )


CHECKS: dict[str, Callable[[GraphView, onnx.NodeProto], list[Problem]]] = {
    f.__name__: f
    for f in (
        argminmax_select_last,
        attention_4d,
        attention_no_cache,
        attention_outputs,
        attention_attributes,
        pool_spatial_rank,
        pool_dilations,
        batchnorm_inference,
        first_output_only,
        cast_target,
        constant_dense,
        constant_of_shape_value,
        cumsum_axis_constant,
        deformconv_spatial,
        deformconv_pads,
        dropout_inference,
        einsum_equation,
        static_input_shape,
        input_4d,
        rnn_same_activations,
        hardmax_axis_static,
        if_branches,
        lstm_attributes,
        lp_order,
        nms_inputs,
        onehot_depth_constant,
        random_dtype,
        reduce_axes_constant,
        resize_modes,
        reverse_sequence_axes,
        roialign_modes,
        rotary_position_ids,
        stft_constants,
        scatternd_reduction,
        slice_inputs,
        axes_constant,
        tensorscatter_layout,
        topk_sorted,
        topk_k_limit,
        upsample_mode,
    )
}

RESTRICTION_FIXES = {
    "scatternd_reduction": "keep the scatter-add out of TensorRT: a plugin (e.g. deploykit's BEVPoolV2 via "
    "`replace_with_plugin`, then --plugins LIB) or ScatterElements/Add rewritten in the model",
    "topk_k_limit": "take the top K in two stages (top-K per chunk, then over the chunks), or lower K",
    "topk_sorted": "export TopK with sorted=True",
    "resize_modes": "export the resize with a supported mode (e.g. nearest/linear, half_pixel)",
    "reduce_axes_constant": "make axes an initializer (surgery `sanitize` folds constant subgraphs)",
    "cumsum_axis_constant": "make axis an initializer (surgery `sanitize` folds constant subgraphs)",
    "onehot_depth_constant": "make depth an initializer (surgery `sanitize` folds constant subgraphs)",
    "axes_constant": "fold axes to an initializer (surgery `sanitize`) unless it follows from shapes",
    "first_output_only": "drop the extra outputs (they are training outputs: re-export in eval mode)",
    "batchnorm_inference": "export the model in eval mode",
    "dropout_inference": "export the model in eval mode (Dropout becomes Identity, `remove_noops` drops it)",
    "einsum_equation": "write the equation with lower-case subscripts",
    "nms_inputs": "export NMS with 3-D boxes [batch, boxes, 4] and scores [batch, classes, boxes], scalar "
    "thresholds and max_output_boxes_per_class as an initializer (surgery `sanitize` folds constant subgraphs)",
}
