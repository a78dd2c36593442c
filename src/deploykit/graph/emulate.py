"""Evaluate a graph *as written*: its FP16/BF16 tensors rounded the way TensorRT stores them.

ONNX Runtime's CPU kernels do not faithfully execute every mixed-precision graph (measured: an
FP16 + INT8 ModelOpt graph ran with rel-L2 0.12-0.24 in ORT against 0.004 with ``onnx.reference``),
so :func:`emulate_fp16` rewrites the graph to FP32 with every FP16 tensor going through a Cast pair
that rounds it to FP16 (overflow to inf included): FP32 accumulation with FP16 storage, as
TensorRT's FP16 kernels do. ``onnx.reference`` gives the same numbers but took ~250 s for one
128x128 sample of the example detector; the emulation takes milliseconds.

FP8 tensors moved between a QuantizeLinear and its DequantizeLinear (Q -> Slice -> DQ, which ModelOpt
writes and TensorRT runs) have no ORT kernel for most data-movement ops (``Slice`` rejects
float8e4m3fn; there is no ``Squeeze(21)`` for it): :func:`move_float8_as_float` runs such ops on the
values as FP32 between exact Casts, so the graph is evaluated as written without being changed.

Also here: which ORT optimizer rules are wrong for a graph (:func:`ort_disabled_optimizers`: FP8).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from deploykit.errors import ModelError
from deploykit.graph.proto import copy_model

if TYPE_CHECKING:
    import onnx

# ORT's level-2 rule "ReluQuantRewrite" drops a Relu in front of a QuantizeLinear, valid only for
# asymmetric integer types where the zero point clamps; for FP8 it changed cosine 0.997 -> 0.57.
FP8_UNSAFE_OPTIMIZERS = ("ReluQuantRewrite",)
_LOW = {10: np.float16, 16: None}  # FLOAT16, BFLOAT16 (numpy has no bfloat16: ml_dtypes does)
_FLOAT8 = {17, 18, 19, 20}  # FLOAT8E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ


def has_low_precision_float(model: onnx.ModelProto) -> bool:
    """Whether any tensor of the graph is FP16/BF16 (then evaluating it as written emulates)."""
    from deploykit.graph.proto import infer_shapes, tensor_types

    if any(t in _LOW for t in tensor_types(model).values()):
        return True
    return any(t in _LOW for t in tensor_types(infer_shapes(model)).values())


def has_float8(model: onnx.ModelProto) -> bool:
    """Whether the graph quantizes to an FP8 type (zero points or Q output_dtype)."""
    inits = {i.name: i.data_type for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) > 2:
            if inits.get(node.input[2]) in _FLOAT8:
                return True
        if any(a.name == "output_dtype" and a.i in _FLOAT8 for a in node.attribute):
            return True
    return False


def ort_disabled_optimizers(model: onnx.ModelProto) -> tuple[str, ...]:
    """The ORT optimizer rules any session over this graph must disable (FP8 graphs: ReluQuantRewrite).

    :mod:`deploykit.graph.run` disables them in every session it makes, the onnxruntime backend's
    offline optimization included.
    """
    return FP8_UNSAFE_OPTIMIZERS if has_float8(model) else ()


# Ops that only move or select values: on float8 values they are exact in FP32 (every float8 value is one)
MOVEMENT_OPS = frozenset(
    {
        "Slice",
        "Squeeze",
        "Unsqueeze",
        "Reshape",
        "Transpose",
        "Flatten",
        "Concat",
        "Split",
        "Gather",
        "GatherElements",
        "GatherND",
        "Expand",
        "Tile",
        "Identity",
        "DepthToSpace",
        "SpaceToDepth",
        "Pad",
    }
)


def move_float8_as_float(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` where each data-movement op that reads a float8 tensor reads it cast to FP32
    and writes FP32 cast back to the float8 type under its output's name (the same values: every float8
    value is an FP32 value), so ONNX Runtime can run graphs that move FP8 between Q and DQ; ``model``
    itself when none does."""
    from onnx import helper

    from deploykit.graph.proto import infer_shapes, tensor_types

    types = tensor_types(infer_shapes(model))
    nodes = list(model.graph.node)
    if not any(n.op_type in MOVEMENT_OPS and types.get(n.input[0]) in _FLOAT8 for n in nodes if n.input):
        return model
    out = copy_model(model)
    rewritten: list[onnx.NodeProto] = []
    for node in out.graph.node:
        if node.op_type not in MOVEMENT_OPS or not any(types.get(i) in _FLOAT8 for i in node.input):
            rewritten.append(node)
            continue
        for i, name in enumerate(node.input):
            if types.get(name) in _FLOAT8:
                wide = f"{name}__as_fp32_{node.name or i}"
                rewritten.append(helper.make_node("Cast", [name], [wide], to=1, name=wide))
                node.input[i] = wide
        back = []
        for j, name in enumerate(node.output):
            if types.get(name) in _FLOAT8:
                node.output[j] = f"{name}__fp32"
                back.append(helper.make_node("Cast", [node.output[j]], [name], to=types[name], name=f"{name}__back"))
        rewritten += [node, *back]
    del out.graph.node[:]
    out.graph.node.extend(rewritten)
    return out


def declared_dtypes(model: onnx.ModelProto) -> dict[str, str]:
    """Tensor name -> numpy dtype name of the graph's inputs and outputs (as the graph declares them)."""
    from onnx import helper

    out = {}
    for v in [*model.graph.input, *model.graph.output]:
        t = v.type.tensor_type.elem_type
        if t:
            try:
                out[v.name] = np.dtype(helper.tensor_dtype_to_np_dtype(t)).name
            except (KeyError, TypeError):
                continue
    return out


def emulate_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """An FP32 graph computing what ``model`` computes with its FP16/BF16 tensors rounded.

    Each node output of a 16-bit float type keeps its name but is produced by a Cast pair
    (FP32 -> FP16 -> FP32) after the node, so names still align with the original graph.
    """
    from onnx import TensorProto, helper

    from deploykit.graph.proto import infer_shapes, tensor_types

    m = infer_shapes(copy_model(model))
    types = tensor_types(m)
    g = m.graph
    for init in g.initializer:
        if init.data_type in _LOW:
            init.CopyFrom(_to_fp32(init))
    nodes = []
    for node in g.node:
        _widen_attributes(node)
        nodes.append(node)
        for i, name in enumerate(node.output):
            low = types.get(name)
            if not name or low not in _LOW:
                if name and low is None and node.op_type not in ("QuantizeLinear",) and _touches_low(node, types):
                    raise ModelError(
                        f"cannot evaluate node {node.name!r} as written: the type of {name!r} is unknown",
                        hint="run shape inference on the model (surgery 'sanitize')",
                    )
                continue
            node.output[i] = f"{name}__fp32"
            nodes.append(
                helper.make_node("Cast", [f"{name}__fp32"], [f"{name}__low"], to=low, name=f"{node.name}__round_{i}")
            )
            nodes.append(
                helper.make_node("Cast", [f"{name}__low"], [name], to=TensorProto.FLOAT, name=f"{node.name}__widen_{i}")
            )
    del g.node[:]
    g.node.extend(nodes)
    for v in [*g.input, *g.output]:
        if v.type.tensor_type.elem_type in _LOW:
            v.type.tensor_type.elem_type = TensorProto.FLOAT
    del g.value_info[:]
    return m


def _touches_low(node: onnx.NodeProto, types: dict[str, int]) -> bool:
    return any(types.get(i) in _LOW for i in node.input if i)


def _widen_attributes(node: onnx.NodeProto) -> None:
    """Cast targets and constant-valued attributes of 16-bit float type become FP32."""
    from onnx import AttributeProto, TensorProto

    for attr in node.attribute:
        if node.op_type == "Cast" and attr.name == "to" and attr.i in _LOW:
            attr.i = TensorProto.FLOAT  # the Cast pair added after the node does the rounding
        elif attr.type == AttributeProto.TENSOR and attr.t.data_type in _LOW:
            if node.op_type not in ("Constant", "ConstantOfShape"):
                raise ModelError(
                    f"cannot evaluate node {node.name!r} ({node.op_type}) as written: FP16 attribute {attr.name!r}",
                    hint="keep this node in FP32",
                )
            attr.t.CopyFrom(_to_fp32(attr.t))
        elif attr.name == "dtype" and attr.i in _LOW:
            raise ModelError(
                f"cannot evaluate node {node.name!r} ({node.op_type}) as written: FP16 dtype attribute",
                hint="keep this node in FP32",
            )


def _to_fp32(tensor: onnx.TensorProto) -> onnx.TensorProto:
    from onnx import numpy_helper

    return numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name)
