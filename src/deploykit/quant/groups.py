"""The layers a mixed-precision search moves between precisions: a compute node with what fuses into it.

A *group* is one compute node (Conv, ConvTranspose, MatMul, Gemm) of a quantized graph together with
the elementwise nodes that only finish its output (its activation: Relu, HardSwish written out as
HardSigmoid + Mul, a bias Add, a BatchNormalization): TensorRT fuses them into one kernel and ONNX
Runtime runs them as one QLinearConv, so moving half of them would measure nothing real. An
attention block (scores MatMul -> scale -> Softmax -> values MatMul) is one group too. Every other
node that reads a quantized tensor (a residual Add, a Resize, a pooling) is a group of its own.

Groups are found on the quantized graph, looking through Q/DQ pairs and precision Casts, and are
named after their first node, so a precision patch (group name -> precision) reads like the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
# Elementwise ops that finish a compute node's output when every non-constant input comes from it.
FINISHING_OPS = frozenset(
    {
        "Relu",
        "LeakyRelu",
        "PRelu",
        "Clip",
        "Sigmoid",
        "HardSigmoid",
        "HardSwish",
        "Tanh",
        "Elu",
        "Selu",
        "Softplus",
        "Mish",
        "Gelu",
        "Erf",
        "Mul",
        "Div",
        "Add",
        "Sub",
        "BatchNormalization",
        "Softmax",
    }
)
_PASS_THROUGH = frozenset({"QuantizeLinear", "DequantizeLinear", "Cast"})


@dataclass(frozen=True)
class Group:
    """One unit of the search: ``nodes`` in graph order, the first the one it is named after."""

    name: str
    nodes: tuple[str, ...]
    ops: str  # e.g. "Conv+HardSigmoid+Mul", for reports

    @property
    def compute(self) -> bool:
        return self.ops.split("+")[0] in COMPUTE_OPS

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "nodes": list(self.nodes), "ops": self.ops}


def find_groups(model: onnx.ModelProto) -> list[Group]:
    """The groups of a quantized graph, in graph order; nodes that read no quantized tensor and are
    not absorbed into a group (FP32 islands, shape arithmetic) belong to none."""
    from deploykit.graph.proto import producers
    from deploykit.quant.prepare import quantized_node_names

    made_by = producers(model)
    inits = {i.name for i in model.graph.initializer}
    quantized = quantized_node_names(model)
    owner: dict[str, str] = {}  # node name -> group name
    members: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        if node.op_type in _PASS_THROUGH:
            continue
        sources = [_source(made_by, i) for i in node.input if i and i not in inits]
        group = _absorbs(node, sources, owner, members)
        if group is not None:
            owner[node.name] = group
            members[group].append(node)
        elif node.op_type in COMPUTE_OPS or node.name in quantized:
            owner[node.name] = node.name
            members[node.name] = [node]
    return [
        Group(name, tuple(n.name for n in group), "+".join(n.op_type for n in group))
        for name, group in members.items()
        if _worth_a_group(group, quantized)
    ]


def _source(made_by: dict[str, onnx.NodeProto], tensor: str) -> onnx.NodeProto | None:
    """The node that computes ``tensor``'s value, looking through Q/DQ pairs and Casts (None: an input)."""
    node = made_by.get(tensor)
    while node is not None and node.op_type in _PASS_THROUGH:
        node = made_by.get(node.input[0])
    return node


def _absorbs(
    node: onnx.NodeProto,
    sources: list[onnx.NodeProto | None],
    owner: dict[str, str],
    members: dict[str, list[onnx.NodeProto]],
) -> str | None:
    """The group ``node`` finishes, if any: every non-constant input comes from that one group, or
    ``node`` is the values MatMul after an attention block's Softmax."""
    upstream = {owner.get(s.name) if s is not None else None for s in sources}
    if node.op_type in FINISHING_OPS and len(upstream) == 1 and None not in upstream:
        return next(iter(upstream))
    if node.op_type != "MatMul":
        return None
    softmax = {s.name for s in sources if s is not None and s.op_type == "Softmax"}
    return next(
        (
            owner[name]
            for name in softmax
            if name in owner and members[owner[name]][-1].name == name and members[owner[name]][0].op_type == "MatMul"
        ),
        None,
    )


def _worth_a_group(group: list[onnx.NodeProto], quantized: set[str]) -> bool:
    """A group must hold something quantized: a compute node the quantizer left alone stays out."""
    return any(n.name in quantized for n in group)
