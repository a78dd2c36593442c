"""remove_noops: drop nodes that pass their input through unchanged, and collapse pairs that cancel.

Single nodes: Identity; Dropout in inference (no training mode, mask unused); Cast/CastLike to the
type the tensor already has; Reshape/Expand/Flatten to the shape it already has; Transpose with the
identity permutation; Pad by zero; Slice over the whole tensor; Tile by ones; Concat/Sum/Max/Min/Mean
of one input; Add/Sub of zero and Mul/Div by one when broadcasting changes nothing. Pairs: Transpose
after Transpose (cancel, or merge into one), Reshape after Reshape (the first is redundant when the
second's target has no 0), Unsqueeze/Squeeze of the same axes.

A node between a graph input and a graph output stays: removing it would rename the model's
interface. Readers inside subgraphs (If/Loop bodies) are rewired too.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx

from deploykit.graph.proto import (
    constant_value,
    consumers,
    copy_model,
    graph_output_names,
    initializer_names,
    node_attribute,
    opset_version,
    producers,
    remove_unused,
)
from deploykit.surgery.base import NoParams, Pass, PassResult
from deploykit.surgery.graph import rename_uses


@dataclass
class _Types:
    """Element type and dims (int, symbol or None) of every tensor inference knows."""

    elem: dict[str, int]
    dims: dict[str, list[int | str | None] | None]

    @classmethod
    def of(cls, model: onnx.ModelProto) -> _Types:
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:  # inference is a hint: unknown types make fewer nodes removable
            pass
        g = model.graph
        elem, dims = {}, {}
        for vi in [*g.input, *g.value_info, *g.output]:
            if not vi.type.HasField("tensor_type"):
                continue
            tt = vi.type.tensor_type
            elem[vi.name] = tt.elem_type
            dims[vi.name] = (
                [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]
                if tt.HasField("shape")
                else None
            )
        for t in g.initializer:
            elem[t.name], dims[t.name] = t.data_type, list(t.dims)
        return cls(elem, dims)

    def same(self, a: str, b: str) -> bool:
        """Same element type and the same fully known shape (a symbol counts only if it is a named one)."""
        da, db = self.dims.get(a), self.dims.get(b)
        if self.elem.get(a) is None or self.elem.get(a) != self.elem.get(b) or da is None or da != db:
            return False
        return all(isinstance(d, int) or (isinstance(d, str) and not d.startswith("unk__")) for d in da)


class RemoveNoops(Pass):
    name = "remove_noops"
    description = "drop Identity, inference Dropout, no-op Cast/Reshape/Transpose/Pad/Slice..., cancelling pairs"
    Params = NoParams

    def run(self, model: onnx.ModelProto) -> PassResult:
        out = copy_model(model)
        removed: collections.Counter[str] = collections.Counter()
        kept: list[str] = []
        for _ in range(8):  # removing one no-op can make its neighbour one (a Transpose pair)
            types = _Types.of(out)
            changed = _merge_pairs(out, types, removed) + _drop_singles(out, types, removed, kept)
            if not changed:
                break
        dead = remove_unused(out.graph) if removed else 0
        if not removed:
            why = "no no-op nodes found" + (
                f" (kept {', '.join(sorted(set(kept)))}: they connect a graph input to an output)" if kept else ""
            )
            return PassResult(model, False, why)
        return PassResult(out, True, details={"removed": dict(sorted(removed.items())), "dead_nodes_removed": dead})


def _drop_singles(model: onnx.ModelProto, types: _Types, removed: collections.Counter[str], kept: list[str]) -> int:
    graph = model.graph
    opset = opset_version(model)
    count = 0
    for node in list(graph.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        rule = _SINGLE.get(node.op_type)
        source = rule(node, graph, types, opset) if rule else None
        if source is None:
            continue
        if _bypass(graph, node, source):
            removed[node.op_type] += 1
            count += 1
        else:
            kept.append(node.op_type)
    return count


def _bypass(graph: onnx.GraphProto, node: onnx.NodeProto, source: str) -> bool:
    """Remove ``node`` (whose first output equals ``source``), rewiring its readers; False if it must stay."""
    target = node.output[0]
    outputs = graph_output_names(graph)
    if any(o and o != target and (o in outputs or consumers(graph).get(o)) for o in node.output[1:]):
        return False  # a second output (Dropout's mask) is used
    if target in outputs:
        made = producers(graph)
        if source not in made or source in outputs or source in initializer_names(graph):
            return False  # graph input -> output, or two outputs sharing a tensor: the interface needs the node
        _remove(graph, node)
        producer = made[source]
        producer.output[list(producer.output).index(source)] = target
        rename_uses(graph, source, target)
        for vi in [v for v in graph.value_info if v.name == source]:
            graph.value_info.remove(vi)
        return True
    _remove(graph, node)
    rename_uses(graph, target, source)
    for vi in [v for v in graph.value_info if v.name == target]:
        graph.value_info.remove(vi)
    return True


def _remove(graph: onnx.GraphProto, node: onnx.NodeProto) -> None:
    for k, n in enumerate(graph.node):
        if n is node:
            del graph.node[k]
            return


# ---- single no-op nodes: each rule returns the tensor the output equals, or None -------------------

Rule = Callable[[onnx.NodeProto, onnx.GraphProto, _Types, int], "str | None"]


def _input_const(graph: onnx.GraphProto, node: onnx.NodeProto, index: int) -> np.ndarray | None:
    return constant_value(graph, node.input[index]) if len(node.input) > index and node.input[index] else None


def _identity(node, graph, types, opset):
    return node.input[0]


def _dropout(node, graph, types, opset):
    if opset < 7 and node_attribute(node, "is_test", 0) != 1:
        return None  # before opset 7 Dropout is a training op unless is_test=1
    if len(node.input) > 2 and node.input[2]:
        mode = _input_const(graph, node, 2)
        if mode is None or bool(mode):
            return None
    return node.input[0]


def _same_type(node, graph, types, opset):
    elem = types.elem.get(node.input[0])
    return node.input[0] if elem is not None and elem == types.elem.get(node.output[0]) else None


def _same_type_and_shape(node, graph, types, opset):
    return node.input[0] if types.same(node.input[0], node.output[0]) else None


def _transpose(node, graph, types, opset):
    perm = node_attribute(node, "perm")
    dims = types.dims.get(node.input[0])
    if perm is None:
        return node.input[0] if dims is not None and len(dims) <= 1 else None
    return node.input[0] if list(perm) == list(range(len(perm))) else None


def _pad(node, graph, types, opset):
    pads = _input_const(graph, node, 1) if opset >= 11 else np.array(node_attribute(node, "pads", [1]))
    return node.input[0] if pads is not None and not np.any(pads) else None


def _slice(node, graph, types, opset):
    dims = types.dims.get(node.input[0])
    if opset < 10 or dims is None:
        return None
    starts, ends = _input_const(graph, node, 1), _input_const(graph, node, 2)
    if starts is None or ends is None:
        return None
    axes = _input_const(graph, node, 3) if len(node.input) > 3 and node.input[3] else np.arange(len(starts))
    steps = _input_const(graph, node, 4) if len(node.input) > 4 and node.input[4] else np.ones_like(axes)
    if axes is None or steps is None or not len(starts) == len(ends) == len(axes) == len(steps):
        return None
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        size = dims[int(a)] if -len(dims) <= int(a) < len(dims) else None
        if st != 1 or s != 0 or not (e >= np.iinfo(np.int32).max or (isinstance(size, int) and e >= size)):
            return None
    return node.input[0]


def _tile(node, graph, types, opset):
    repeats = _input_const(graph, node, 1)
    return node.input[0] if repeats is not None and np.all(repeats == 1) else None


def _single_input(node, graph, types, opset):
    inputs = [i for i in node.input if i]
    return inputs[0] if len(inputs) == 1 and types.elem.get(inputs[0]) is not None else None


def _neutral_operand(value: float) -> Rule:
    """Add/Sub of 0, Mul/Div by 1: the other operand passes through if broadcasting changes nothing."""

    def rule(node, graph, types, opset):
        commutes = node.op_type in ("Add", "Mul")
        for const_at, other in ((1, 0), (0, 1)) if commutes else ((1, 0),):
            const = _input_const(graph, node, const_at)
            if const is not None and np.all(const == value) and types.same(node.input[other], node.output[0]):
                return node.input[other]
        return None

    return rule


_SINGLE: dict[str, Rule] = {
    "Identity": _identity,
    "Dropout": _dropout,
    "Cast": _same_type,
    "CastLike": _same_type,
    "Reshape": _same_type_and_shape,
    "Expand": _same_type_and_shape,
    "Flatten": _same_type_and_shape,
    "Transpose": _transpose,
    "Pad": _pad,
    "Slice": _slice,
    "Tile": _tile,
    "Concat": _single_input,
    "Sum": _single_input,
    "Max": _single_input,
    "Min": _single_input,
    "Mean": _single_input,
    "Add": _neutral_operand(0),
    "Sub": _neutral_operand(0),
    "Mul": _neutral_operand(1),
    "Div": _neutral_operand(1),
}


# ---- pairs --------------------------------------------------------------------------------------


def _merge_pairs(model: onnx.ModelProto, types: _Types, removed: collections.Counter[str]) -> int:
    """Rewire the second node of a cancelling pair to read the first's input; the first then dies."""
    graph = model.graph
    opset = opset_version(model)
    made, readers, outputs = producers(graph), consumers(graph), graph_output_names(graph)
    count = 0
    for second in list(graph.node):
        if second.domain not in ("", "ai.onnx") or not second.input:
            continue
        first = made.get(second.input[0])
        if first is None or first.domain not in ("", "ai.onnx") or first.output[0] in outputs:
            continue
        if len(readers.get(first.output[0], [])) != 1:
            continue  # the first node feeds others too: rewiring would not remove it
        kind = f"{first.op_type}+{second.op_type}"
        if kind == "Transpose+Transpose" and _merge_transposes(first, second):
            removed["Transpose pair"] += 1
        elif (
            kind == "Reshape+Reshape"
            and _input_const(graph, second, 1) is not None
            and not np.any(_input_const(graph, second, 1) == 0)
        ):
            second.input[0] = first.input[0]
            removed["Reshape pair"] += 1
        elif kind in ("Unsqueeze+Squeeze", "Squeeze+Unsqueeze") and _same_axes(graph, first, second, opset, types):
            second.op_type, second.input[:] = "Identity", [first.input[0]]
            del second.attribute[:]
            removed[f"{kind} pair"] += 1
        else:
            continue
        count += 1
    return count


def _merge_transposes(first: onnx.NodeProto, second: onnx.NodeProto) -> bool:
    p1, p2 = node_attribute(first, "perm"), node_attribute(second, "perm")
    if p1 is None or p2 is None or len(p1) != len(p2):
        return False
    composed = [p1[i] for i in p2]
    second.input[0] = first.input[0]
    for a in second.attribute:
        if a.name == "perm":
            a.ints[:] = composed  # an identity perm is then removed as a single no-op
    return True


def _same_axes(
    graph: onnx.GraphProto, first: onnx.NodeProto, second: onnx.NodeProto, opset: int, types: _Types
) -> bool:
    def axes(node: onnx.NodeProto, rank: int | None) -> list[int] | None:
        raw = _input_const(graph, node, 1) if opset >= 13 else node_attribute(node, "axes")
        if raw is None or rank is None:
            return None
        return sorted(int(a) % rank for a in np.asarray(raw).reshape(-1))

    # Axes index the higher-rank tensor: the middle one for Unsqueeze+Squeeze, the outer one otherwise.
    dims = types.dims.get(first.output[0] if first.op_type == "Unsqueeze" else first.input[0])
    rank = len(dims) if dims is not None else None
    a, b = axes(first, rank), axes(second, rank)
    return a is not None and a == b
