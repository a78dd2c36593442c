"""Inspect and prepare an FP32 ONNX graph for quantization.

Both quantizers see only what the graph shows them: weights held in ``Constant`` nodes are
invisible (0 of 62 convolutions quantized on a real opset-12 detector), per-channel Q/DQ needs
opset 13 (TensorRT's rules: 19), and exclusions need node names. :func:`prepare` fixes all of
that and says what it did.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.errors import ModelError, first_line
from deploykit.graph import proto
from deploykit.graph.proto import (
    constants_to_initializers,
    copy_model,
    opset_version,
    producers,
)

if TYPE_CHECKING:
    import onnx

QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
# Ops that show a model was quantized already (static QOperator or dynamic quantization).
QUANTIZED_OPS = QDQ_OPS | {
    "ConvInteger",
    "MatMulInteger",
    "QLinearConv",
    "QLinearMatMul",
    "DynamicQuantizeLinear",
    "QLinearAdd",
    "QLinearMul",
    "MatMulNBits",
    "QGemm",
}
# Outputs in a fixed range: entropy or percentile calibration would clip them (a probability map
# capped at 0.063 measured here), so they get max calibration or stay unquantized.
BOUNDED_OPS = frozenset({"Sigmoid", "Softmax", "Tanh", "HardSigmoid", "LogSoftmax"})


@dataclass
class Preparation:
    """What :func:`prepare` changed, for the artifact's summary."""

    opset_from: int = 0
    opset_to: int = 0
    constants_folded: int = 0
    nodes_named: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "opset_from": self.opset_from,
            "opset_to": self.opset_to,
            "constants_to_initializers": self.constants_folded,
            "nodes_named": self.nodes_named,
            "notes": list(self.notes),
        }


def quantized_nodes(model: onnx.ModelProto) -> Counter[str]:
    """Op-type counts of nodes that show the model is quantized already."""
    return Counter(n.op_type for n in model.graph.node if n.op_type in QUANTIZED_OPS)


def prepare(model: onnx.ModelProto, min_opset: int, where: Path | str) -> tuple[onnx.ModelProto, Preparation]:
    """Constants -> initializers, every node named, opset >= ``min_opset``, shapes inferred."""
    prep = Preparation(opset_from=opset_version(model))
    model = copy_model(model)  # never modify the caller's model
    prep.constants_folded = constants_to_initializers(model)
    prep.nodes_named = name_nodes(model)
    if prep.opset_from < min_opset:
        model = upgrade_opset(model, min_opset, where)
        prep.notes.append(f"opset upgraded {prep.opset_from} -> {min_opset} (per-channel Q/DQ needs it)")
    prep.opset_to = opset_version(model)
    if prep.constants_folded:
        prep.notes.append(
            f"{prep.constants_folded} Constant nodes turned into initializers (quantizers only see initializer weights)"
        )
    return infer_shapes(model, prep), prep


def name_nodes(model: onnx.ModelProto) -> int:
    """Give every unnamed node a unique name (exclusions and diagnoses refer to nodes by name)."""
    used = {n.name for n in model.graph.node if n.name}
    named = 0
    for i, node in enumerate(model.graph.node):
        if node.name:
            continue
        candidate = f"{node.op_type}_{i}"
        while candidate in used:
            candidate += "_"
        node.name = candidate
        used.add(candidate)
        named += 1
    return named


def upgrade_opset(model: onnx.ModelProto, target: int, where: Path | str) -> onnx.ModelProto:
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, target)
    except Exception as e:  # the converter raises bare RuntimeErrors/ValidationErrors
        raise ModelError(
            f"{where}: cannot upgrade opset {opset_version(model)} -> {target}: {first_line(e)}",
            hint="re-export the model at a newer opset",
        ) from e


def infer_shapes(model: onnx.ModelProto, prep: Preparation | None = None) -> onnx.ModelProto:
    """ONNX shape inference; a graph it cannot complete goes on without (calibration does not need it)."""
    return proto.infer_shapes(model, prep.notes if prep is not None else None)


def bounded_tensors(model: onnx.ModelProto) -> set[str]:
    """Outputs of ops whose range is fixed by the op (Sigmoid, Softmax, Tanh, ...)."""
    return {n.output[0] for n in model.graph.node if n.op_type in BOUNDED_OPS and n.output}


# Ops that move values without changing them: a tensor read or written through them holds the
# same values as its source, so it keeps the source's calibration rule.
LAYOUT_OPS = frozenset(
    {
        "Reshape",
        "Transpose",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Identity",
        "Slice",
        "Split",
        "Expand",
        "Tile",
        "DepthToSpace",
        "SpaceToDepth",
        "Concat",
    }
)


def through_layout(model: onnx.ModelProto, outputs: set[str], bounded: set[str]) -> set[str]:
    """``outputs`` and ``bounded`` plus the tensors holding the same values through layout ops:
    backwards from the outputs (a box head's Conv output before its Transpose/Reshape/Concat is the
    result too), forwards from bounded tensors through single-input layout ops."""
    nodes = [n for n in model.graph.node if n.op_type in LAYOUT_OPS]
    made_by = {o: n for n in nodes for o in n.output}
    result, todo = set(outputs), list(outputs)
    while todo:
        node = made_by.get(todo.pop())
        for name in (node.input if node.op_type == "Concat" else node.input[:1]) if node is not None else ():
            if name and name not in result:
                result.add(name)
                todo.append(name)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in nodes:
        if n.op_type != "Concat" and n.input:
            readers.setdefault(n.input[0], []).append(n)
    todo = list(bounded)
    result |= bounded
    while todo:
        for n in readers.get(todo.pop(), []):
            for name in n.output:
                if name and name not in result:
                    result.add(name)
                    todo.append(name)
    return result


def quantized_node_names(model: onnx.ModelProto) -> set[str]:
    """Compute nodes that read a DequantizeLinear output (directly or through a Cast)."""
    made_by = producers(model)
    out = set()
    for node in model.graph.node:
        if node.op_type in QDQ_OPS or node.op_type == "Cast":
            continue
        for name in node.input:
            src = made_by.get(name)
            while src is not None and src.op_type == "Cast":
                src = made_by.get(src.input[0])
            if src is not None and src.op_type == "DequantizeLinear":
                out.add(node.name)
                break
    return out
