"""Q/DQ as TensorRT's explicit quantization accepts it.

Symmetric only (zero point absent or all zeros); the quantized type INT8, FP8 (E4M3FN), INT4 or FP4;
the scale a constant of positive, finite values: a scalar per tensor, a 1-D tensor of ``dim[axis]``
values per channel (weights only: conv weights on axis 0, ConvTranspose on 1, a MatMul's [K, N]
weights on 1), or blocks for INT4/FP8/FP4 weights; no DequantizeLinear of an INT32 tensor (ONNX
Runtime's quantized bias); FP16 scales and FP8/INT4/FP4 need new enough opsets. Placement that keeps
TensorRT from fusing (a Q read by something other than a DQ, a DQ into an operator TensorRT does not
run quantized) is a warning naming the node.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx

from deploykit.lint.findings import Issue
from deploykit.lint.tables import TYPE_NAMES, SupportTable
from deploykit.lint.view import GraphView, first_attribute

T = onnx.TensorProto
ALLOWED = {T.INT8, T.FLOAT8E4M3FN, T.INT4, T.FLOAT4E2M1}
BLOCKED_ONLY = {T.INT4, T.FLOAT8E4M3FN, T.FLOAT4E2M1}  # types TensorRT block-quantizes (weights)
MIN_OPSET = {T.INT8: 10, T.FLOAT8E4M3FN: 19, T.INT4: 21, T.FLOAT4E2M1: 23}
TARGET_FIX = "quantize for TensorRT: --set quantize.target=tensorrt (ModelOpt's symmetric INT8/FP8 Q/DQ)"
# Operators TensorRT fuses a DequantizeLinear into, or moves Q/DQ across (data movement, pooling)
QUANTIZABLE = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "MatMul",
        "Gemm",
        "Add",
        "Mul",
        "Sub",
        "Concat",
        "AveragePool",
        "MaxPool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "Reshape",
        "Transpose",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Slice",
        "Split",
        "Gather",
        "Resize",
        "Upsample",
        "Pad",
        "Identity",
        "Relu",
        "LeakyRelu",
        "Clip",
        "Sigmoid",
        "ReduceMean",
        "ReduceMax",
        "BatchNormalization",
        "Einsum",
        "Attention",
        "Where",
        "Expand",
        "Tile",
        "DepthToSpace",
        "SpaceToDepth",
        "QuantizeLinear",
    }
)
WEIGHT_AXIS = {"Conv": 0, "ConvTranspose": 1}


def check(view: GraphView, table: SupportTable) -> Iterator[Issue]:
    for node in view.graph.node:
        if node.op_type == "QuantizeLinear" and node.domain in ("", "ai.onnx"):
            yield from _node(view, node, _q_type(view, node))
            yield from _q_placement(view, node)
        elif node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx"):
            yield from _node(view, node, view.dtype(node.input[0]))
            yield from _dq_placement(view, node)


def _q_type(view: GraphView, node: onnx.NodeProto) -> int | None:
    if len(node.input) > 2 and node.input[2]:
        return view.dtype(node.input[2])
    output_dtype = first_attribute(node, "output_dtype", 0)
    return output_dtype or T.UINT8  # ONNX's default quantized type is UINT8


def _node(view: GraphView, node: onnx.NodeProto, qtype: int | None) -> Iterator[Issue]:
    label, op = view.name_of(node), node.op_type
    if node.op_type == "DequantizeLinear" and qtype == T.INT32:
        yield Issue(
            "qdq.bias",
            "error",
            label,
            op,
            "dequantizes an INT32 tensor (a quantized bias, as ONNX Runtime writes it): TensorRT has no INT32 Q/DQ",
            TARGET_FIX,
        )
        return
    if qtype == T.UINT8 and not _nonzero_zero_point(view, node):
        # The parser imports a zero-point-0 UINT8 Q/DQ as INT8 (with a warning): [0, 255] becomes [-128, 127]
        yield Issue(
            "qdq.type",
            "warning",
            label,
            op,
            "UINT8 Q/DQ: TensorRT imports it as INT8, so values above 127 clip (TensorRT has no UINT8 quantization)",
            TARGET_FIX,
        )
    elif qtype is not None and qtype not in ALLOWED:
        yield Issue(
            "qdq.type",
            "error",
            label,
            op,
            f"quantizes to {TYPE_NAMES.get(qtype, qtype)}"
            f"{' asymmetrically' if qtype == T.UINT8 else ''}: TensorRT's Q/DQ types are INT8, FP8 (E4M3FN), "
            "INT4 and FP4",
            TARGET_FIX,
        )
    yield from _zero_point(view, node, label)
    yield from _scale(view, node, label, qtype)
    if qtype in MIN_OPSET and view.opset < MIN_OPSET[qtype]:
        yield Issue(
            "qdq.opset",
            "error",
            label,
            op,
            f"{TYPE_NAMES[qtype]} Q/DQ needs opset {MIN_OPSET[qtype]}; the model is opset {view.opset}",
            f"convert it (surgery `convert_opset` to {MIN_OPSET[qtype]})",
        )


def _nonzero_zero_point(view: GraphView, node: onnx.NodeProto) -> bool:
    name = node.input[2] if len(node.input) > 2 else ""
    value = view.value(name) if name else None
    return value is not None and bool(np.any(value.astype(np.float64) != 0))


def _zero_point(view: GraphView, node: onnx.NodeProto, label: str) -> Iterator[Issue]:
    name = node.input[2] if len(node.input) > 2 else ""
    if not name:
        return
    value = view.value(name)
    if value is None:
        if not view.is_constant(name):
            yield Issue(
                "qdq.zero_point",
                "error",
                label,
                node.op_type,
                f"zero point {name!r} is not a constant",
                TARGET_FIX,
            )
        return
    if np.any(value.astype(np.float64) != 0):
        yield Issue(
            "qdq.zero_point",
            "error",
            label,
            node.op_type,
            f"zero point {name!r} is not zero ({_sample(value)}): TensorRT quantizes symmetrically only",
            TARGET_FIX,
        )


def _sample(value: np.ndarray) -> str:
    flat = value.reshape(-1)
    return ", ".join(str(v) for v in flat[:3].tolist()) + (", ..." if flat.size > 3 else "")


def _scale(view: GraphView, node: onnx.NodeProto, label: str, qtype: int | None) -> Iterator[Issue]:
    name, op = node.input[1], node.op_type
    if not view.is_constant(name):
        yield Issue(
            "qdq.scale",
            "error",
            label,
            op,
            f"scale {name!r} is not a constant: TensorRT needs build-time scales",
            "calibrate static scales (deploykit quantize)",
        )
        return
    value = view.value(name)
    if value is not None and (not np.all(np.isfinite(value)) or np.any(value <= 0)):
        yield Issue(
            "qdq.scale",
            "error",
            label,
            op,
            f"scale {name!r} has non-positive or non-finite values ({_sample(value)})",
            "recalibrate (a zero range gives a zero scale: check the calibration data)",
        )
    stype = view.dtype(name)
    if stype == T.FLOAT16:
        need = 21 if qtype == T.FLOAT8E4M3FN else 19
        if view.opset < need:
            yield Issue(
                "qdq.opset",
                "error",
                label,
                op,
                f"an FP16 scale with {TYPE_NAMES.get(qtype or 0, '?')} needs "
                f"opset {need}; the model is opset {view.opset}",
                f"convert it (surgery `convert_opset` to {need}), or keep FP32 scales",
            )
    yield from _granularity(view, node, label, qtype, value)


def _granularity(
    view: GraphView, node: onnx.NodeProto, label: str, qtype: int | None, scale: np.ndarray | None
) -> Iterator[Issue]:
    op, data = node.op_type, node.input[0]
    block = first_attribute(node, "block_size", 0)
    weight = view.is_constant(data) or (op == "DequantizeLinear" and _from_constant_q(view, data))
    if block:
        if qtype not in BLOCKED_ONLY or not weight:
            yield Issue(
                "qdq.axis",
                "error",
                label,
                op,
                f"block quantization (block_size {block}) of "
                f"{'a weight' if weight else 'an activation'} in {TYPE_NAMES.get(qtype or 0, '?')}: TensorRT "
                "block-quantizes INT4, FP8 and FP4 weights only",
                "quantize it per channel or per tensor",
            )
        return
    if scale is None or scale.size <= 1:
        return  # per tensor
    if scale.ndim != 1:
        yield Issue(
            "qdq.axis",
            "error",
            label,
            op,
            f"scale of shape {list(scale.shape)}: TensorRT takes a scalar "
            "(per tensor) or a 1-D scale (per channel) without block_size",
            "use a 1-D per-channel scale",
        )
        return
    if not weight:
        yield Issue(
            "qdq.axis",
            "error",
            label,
            op,
            f"per-channel scale ({scale.size} values) on an activation: TensorRT quantizes activations per tensor",
            "quantize activations per tensor (one scale)",
        )
        return
    shape = view.shapes.get(data)
    axis = first_attribute(node, "axis", 1)
    if shape and -len(shape) <= axis < len(shape) and isinstance(shape[axis], int) and shape[axis] != scale.size:
        yield Issue(
            "qdq.axis",
            "error",
            label,
            op,
            f"{scale.size} scales for axis {axis} of size {shape[axis]}",
            "give one scale per channel of the axis",
        )
    want = _weight_axis(view, node, shape)
    if want is not None and shape and axis % len(shape) != want:
        yield Issue(
            "qdq.axis",
            "error",
            label,
            op,
            f"per-channel axis {axis} on a weight whose output channels are axis {want}",
            f"quantize the weight per channel on axis {want}",
        )


def _from_constant_q(view: GraphView, name: str) -> bool:
    producer = view.producer.get(name)
    return producer is not None and producer.op_type == "QuantizeLinear" and view.is_constant(producer.input[0])


def _weight_axis(view: GraphView, node: onnx.NodeProto, shape: list | None) -> int | None:
    """The output-channel axis a weight's per-channel scale must be on, from the operator reading it."""
    out = (
        node.output[0]
        if node.op_type == "DequantizeLinear"
        else next((r.output[0] for r in view.readers(node.output[0]) if r.op_type == "DequantizeLinear"), "")
    )
    for reader in view.readers(out):
        if reader.op_type in WEIGHT_AXIS and len(reader.input) > 1 and reader.input[1] == out:
            return WEIGHT_AXIS[reader.op_type]
        if reader.op_type == "Gemm" and len(reader.input) > 1 and reader.input[1] == out:
            return 0 if first_attribute(reader, "transB", 0) else 1
        if reader.op_type == "MatMul" and len(reader.input) > 1 and reader.input[1] == out and shape:
            return len(shape) - 1
    return None


def _q_placement(view: GraphView, node: onnx.NodeProto) -> Iterator[Issue]:
    out = node.output[0]
    readers = view.readers(out)
    others = sorted({r.op_type for r in readers if r.op_type != "DequantizeLinear"})
    if others:
        yield Issue(
            "qdq.placement",
            "warning",
            view.name_of(node),
            node.op_type,
            f"its quantized output is read by {', '.join(others)}, not by a DequantizeLinear: TensorRT "
            "fuses Q/DQ pairs",
            "pair every QuantizeLinear with a DequantizeLinear",
        )
    elif not readers and out not in view.outputs:
        yield Issue(
            "qdq.placement",
            "warning",
            view.name_of(node),
            node.op_type,
            "its output is never read",
            "remove the QuantizeLinear",
        )


def _dq_placement(view: GraphView, node: onnx.NodeProto) -> Iterator[Issue]:
    if view.is_constant(node.input[0]) or _from_constant_q(view, node.input[0]):
        return  # a weight's DQ: its reader decides the axis (judged above)
    readers = view.readers(node.output[0])
    others = sorted({r.op_type for r in readers if r.op_type not in QUANTIZABLE})
    if others and not any(r.op_type in QUANTIZABLE for r in readers):  # one quantizable reader fuses the pair
        yield Issue(
            "qdq.placement",
            "warning",
            view.name_of(node),
            node.op_type,
            f"dequantizes into {', '.join(others)}, which TensorRT does not run quantized: the pair runs "
            "on its own (no fusion)",
            "leave that input unquantized (quantize.exclude_op_types), or move the "
            "Q/DQ to an input of a Conv/MatMul/Gemm/Add/pooling",
        )
