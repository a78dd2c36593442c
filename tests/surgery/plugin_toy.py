"""A toy plugin for the tests: ScaledSoftmax(x) = Softmax(x * scale, axis=-1), its pattern and its body."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from deploykit.surgery.patterns import Node, Pattern, PluginSpec
from tests.surgery.models import make


def _scale(match) -> dict:
    return {"scale": float(match.constant("scale").reshape(-1)[0])}


PATTERN = Pattern(
    "scaled_softmax",
    nodes=(Node("Mul", ("x", "scale"), ("scaled",)), Node("Softmax", ("scaled",), ("y",), attrs={"axis": -1})),
    inputs=("x",),
    outputs=("y",),
    attributes=_scale,
    plugin=PluginSpec("ScaledSoftmax", version="2", namespace="toy"),
)


def body(node: onnx.NodeProto, opset: int) -> onnx.FunctionProto:
    """The ONNX body of one ScaledSoftmax node (its scale attribute becomes a constant)."""
    scale = next(a.f for a in node.attribute if a.name == "scale")
    nodes = [
        helper.make_node("Constant", [], ["s"], value=helper.make_tensor("s", TensorProto.FLOAT, [], [scale])),
        helper.make_node("Mul", ["X", "s"], ["m"]),
        helper.make_node("Softmax", ["m"], ["Y"], axis=-1),
    ]
    return helper.make_function("any", "any", ["X"], ["Y"], nodes, [helper.make_opsetid("", opset)])


def wrong_body(node: onnx.NodeProto, opset: int) -> onnx.FunctionProto:
    """A body that forgets the scale: the runner must catch it."""
    nodes = [helper.make_node("Softmax", ["X"], ["Y"], axis=-1)]
    return helper.make_function("any", "any", ["X"], ["Y"], nodes, [helper.make_opsetid("", opset)])


def attention_like(scales=(0.125, 0.125)) -> onnx.ModelProto:
    """Two scaled softmaxes (one per head group) feeding a MatMul, plus a Softmax the pattern must skip."""
    nodes, inits = [], {}
    for k, s in enumerate(scales):
        inits[f"scale{k}"] = np.array(s, np.float32)
        nodes += [
            helper.make_node("MatMul", ["q", "k"], [f"qk{k}"], name=f"qk{k}"),
            helper.make_node("Mul", [f"qk{k}", f"scale{k}"], [f"scaled{k}"], name=f"mul{k}"),
            helper.make_node("Softmax", [f"scaled{k}"], [f"p{k}"], name=f"softmax{k}", axis=-1),
        ]
    nodes += [
        helper.make_node("Add", ["p0", "p1"], ["p"]),
        helper.make_node("Softmax", ["p"], ["ps"], axis=0),
        helper.make_node("MatMul", ["ps", "v"], ["y"]),
    ]
    f = TensorProto.FLOAT
    return make(nodes, [("q", f, [4, 8]), ("k", f, [8, 4]), ("v", f, [4, 8])], [("y", f, [4, 8])], inits)
