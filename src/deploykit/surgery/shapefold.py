"""Constant Reshape targets from shape arithmetic on symbolic dims (used by ``sanitize``).

Traced ``x.view(x.size(0), -1)`` becomes ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``.
Constant folding cannot remove it while the batch dim is dynamic, and ONNX's own data propagation
gives up on the opset-11 forms. Here each element of such a 1-D shape tensor is evaluated to an
int, to a dim name from shape inference (equal names are equal sizes: ``batch`` flows from the
input through every Conv), or to "dim ``i`` of tensor ``X``". The Reshape then gets a constant
target: ints as they are, the Reshape input's own dim at the same position as 0 (copy), and at most
one other as -1.
That is exact for every input shape: -1 resolves to the one value that keeps the element count,
which the original target also had to produce.
"""

from __future__ import annotations

from typing import Any, Union

import numpy as np
import onnx

from deploykit.graph.proto import constant_value, node_attribute, producers

# A known size; ("sym", name) for a dynamic dim shape inference named; (tensor, axis) for an unnamed one.
Dim = Union[int, tuple[str, Any]]


def fold_reshape_targets(model: onnx.ModelProto) -> int:
    """Give Reshapes with a computed target a constant one; return how many changed."""
    from onnx import numpy_helper

    graph = model.graph
    made = producers(graph)
    shapes = _static_shapes(model)
    names = {t.name for t in graph.initializer} | set(made) | {i.name for i in graph.input}
    changed = 0
    for node in graph.node:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        if constant_value(graph, node.input[1]) is not None:
            continue
        if any(a.name == "allowzero" and a.i for a in node.attribute):
            continue  # 0 would mean a zero-sized dim, not "copy"
        dims = _evaluate(graph, made, shapes, node.input[1], depth=0)
        target = _constant_target(dims, node.input[0], shapes.get(node.input[0])) if dims is not None else None
        if target is None:
            continue
        name = f"{node.output[0]}_shape"
        while name in names:
            name += "_"
        names.add(name)
        graph.initializer.append(numpy_helper.from_array(np.array(target, dtype=np.int64), name))
        node.input[1] = name
        changed += 1
    return changed


def fold_static_shapes(model: onnx.ModelProto) -> int:
    """Replace ``Shape`` (and ``Gather``/``Slice`` of a ``Shape``) by a constant where the dims read are static.

    onnx-graphsurgeon's own shape folding ignores ``Shape``'s ``start``/``end`` attributes (opset 15),
    so ``sanitize`` turns it off and folds here instead; ordinary constant folding does the rest.
    """
    from onnx import numpy_helper

    graph = model.graph
    made, shapes = producers(graph), _static_shapes(model)
    outputs = {o.name for o in graph.output}
    doomed = []
    for node in graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Shape", "Gather", "Slice"):
            continue
        if node.output[0] in outputs or (node.op_type != "Shape" and _producer_op(made, node.input[0]) != "Shape"):
            continue
        value = _static_value(graph, made, shapes, node)
        if value is not None:
            graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
            doomed.append(node)
    for node in doomed:
        graph.node.remove(node)
    return len(doomed)


def _producer_op(made: dict[str, onnx.NodeProto], name: str) -> str:
    node = made.get(name)
    return node.op_type if node is not None and node.domain in ("", "ai.onnx") else ""


def _static_value(
    graph: onnx.GraphProto,
    made: dict[str, onnx.NodeProto],
    shapes: dict[str, list[int | str | None]],
    node: onnx.NodeProto,
) -> np.ndarray | None:
    dims = _evaluate(graph, made, shapes, node.output[0], depth=0)
    if dims is None or not all(isinstance(d, int) for d in dims):
        return None
    if node.op_type == "Gather":
        indices = constant_value(graph, node.input[1])
        if indices is None:
            return None
        return np.array(dims, dtype=np.int64).reshape(indices.shape)  # a scalar index gives a scalar
    return np.array(dims, dtype=np.int64)


def _constant_target(dims: list[Dim], data: str, data_dims: list[int | str | None] | None) -> list[int] | None:
    out, free = [], 0
    for axis, d in enumerate(dims):
        if isinstance(d, int):
            out.append(d)
            free += d == -1
        elif d == (data, axis) or (data_dims and axis < len(data_dims) and d == _symbol(data_dims[axis], data, axis)):
            out.append(0)
        else:
            out.append(-1)
            free += 1
    return out if free <= 1 else None


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int | str | None]]:
    """Tensor -> dims from shape inference: sizes, dim names (equal names are equal sizes), or None."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # inference is a hint here; without it dims stay symbolic
        inferred = model
    g = inferred.graph
    out = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            out[vi.name] = [
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in vi.type.tensor_type.shape.dim
            ]
    return out


def _symbol(d: int | str | None, tensor: str, axis: int) -> Dim:
    """A dim as the evaluator writes it: its size, its name, or where it comes from."""
    if isinstance(d, int):
        return d
    return ("sym", d) if d else (tensor, axis)


def _evaluate(
    graph: onnx.GraphProto,
    made: dict[str, onnx.NodeProto],
    shapes: dict[str, list[int | str | None]],
    name: str,
    depth: int,
) -> list[Dim] | None:
    """The elements of a small 1-D (or scalar) int tensor, or None when they cannot be known."""
    value = constant_value(graph, name)
    if value is not None:
        return [int(v) for v in value.reshape(-1)] if value.dtype.kind in "iu" and value.size <= 16 else None
    node = made.get(name)
    if node is None or depth > 16 or node.domain not in ("", "ai.onnx"):
        return None
    args = [_evaluate(graph, made, shapes, i, depth + 1) if i else None for i in node.input[1:]]
    op = node.op_type
    if op == "Shape":
        return _shape_of(node, shapes)
    first = _evaluate(graph, made, shapes, node.input[0], depth + 1)
    if first is None:
        return None
    if op == "Identity" or (op in ("Squeeze", "Unsqueeze") and len(first) == 1):
        return first  # a scalar and a one-element vector hold the same element
    if op == "Cast":
        return first if node_attribute(node, "to") in (onnx.TensorProto.INT64, onnx.TensorProto.INT32) else None
    if op == "Concat":
        rest = [_evaluate(graph, made, shapes, i, depth + 1) for i in node.input[1:]]
        return None if any(r is None for r in rest) else first + [d for r in rest for d in r]  # type: ignore[misc]
    if op == "Gather" and args and args[0] is not None and not node_attribute(node, "axis"):
        try:
            return [first[i] for i in args[0]]
        except IndexError:
            return None
    if op == "Slice":
        return _slice(node, first, args)
    return None


def _shape_of(node: onnx.NodeProto, shapes: dict[str, list[int | str | None]]) -> list[Dim] | None:
    dims = shapes.get(node.input[0])
    if dims is None:
        return None
    full: list[Dim] = [_symbol(d, node.input[0], axis) for axis, d in enumerate(dims)]
    start, end = node_attribute(node, "start") or 0, node_attribute(node, "end")
    return full[start:end] if end is not None else full[start:]


def _slice(node: onnx.NodeProto, data: list[Dim], args: list[Any]) -> list[Dim] | None:
    if len(node.input) >= 3:  # opset 10+: starts, ends, axes, steps are inputs
        starts, ends = args[0], args[1]
        axes = args[2] if len(args) > 2 else [0]
        steps = args[3] if len(args) > 3 else [1]
    else:
        starts, ends, axes, steps = (
            node_attribute(node, "starts"),
            node_attribute(node, "ends"),
            node_attribute(node, "axes") or [0],
            [1],
        )
    if starts is None or ends is None or axes is None or steps is None:
        return None
    if (
        list(axes) not in ([0], [-1])
        or len(starts) != 1
        or not all(isinstance(v, int) for v in (*starts, *ends, *steps))
    ):
        return None
    return data[slice(starts[0], ends[0], steps[0])]
