"""Shared by ``set_dims`` and ``free_dims``: validate a requested input shape, write it, refresh shapes."""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from deploykit.graph.proto import real_inputs
from deploykit.surgery.base import PassConfigError


def input_dims(model: onnx.ModelProto) -> dict[str, list[int | str | None] | None]:
    """Real inputs -> their dims (None for an input without a declared shape)."""
    out: dict[str, list[int | str | None] | None] = {}
    for vi in real_inputs(model.graph):
        tt = vi.type.tensor_type
        out[vi.name] = (
            [_dim(d) for d in tt.shape.dim] if vi.type.HasField("tensor_type") and tt.HasField("shape") else None
        )
    return out


def _dim(d: onnx.TensorShapeProto.Dimension) -> int | str | None:
    if d.HasField("dim_value"):
        return d.dim_value
    return d.dim_param or None


def check_shapes(pass_name: str, model: onnx.ModelProto, shapes: dict[str, tuple[int | str, ...]]) -> None:
    """Every named input exists, and the given shape has its rank and only sizes >= 1 or names."""
    known = input_dims(model)
    for name, shape in shapes.items():
        if name not in known:
            raise PassConfigError(
                f"{pass_name}: the model has no input {name!r}; its inputs are: {', '.join(known) or 'none'}",
                hint=f"fix the input name in {pass_name}'s parameters",
            )
        dims = known[name]
        if dims is not None and len(dims) != len(shape):
            raise PassConfigError(
                f"{pass_name}: input {name!r} has rank {len(dims)} {_show(dims)}, but "
                f"{len(shape)} dims were given {list(shape)}",
                hint="give one entry per axis",
            )
        for axis, d in enumerate(shape):
            if isinstance(d, int) and d < 1 or isinstance(d, str) and not d:
                raise PassConfigError(
                    f"{pass_name}: input {name!r} axis {axis}: {d!r} is neither a size >= 1 nor a dim name",
                    hint="use a positive size or a name such as 'batch'",
                )


def _show(dims: Iterable[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def write_input_shape(model: onnx.ModelProto, name: str, shape: Iterable[int | str]) -> None:
    for vi in model.graph.input:
        if vi.name == name:
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d in shape:
                entry = dims.add()
                if isinstance(d, int):
                    entry.dim_value = d
                else:
                    entry.dim_param = d


def substitute(model: onnx.ModelProto, symbols: dict[str, int]) -> None:
    """Replace named dims by sizes in inputs, outputs and value_info."""
    g = model.graph
    for vi in [*g.input, *g.output, *g.value_info]:
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in symbols:
                d.dim_value = symbols[d.dim_param]  # setting the value clears the oneof's name


def refresh_shapes(model: onnx.ModelProto, *, keep_unknown: bool) -> onnx.ModelProto:
    """Re-infer intermediate and output shapes after the inputs changed.

    Stale value_info would conflict with the new input shapes, so it is dropped. An output gets the
    inferred shape; where inference cannot tell (a plugin op), it keeps its old shape when
    ``keep_unknown`` (pinned dims stay true), else it gets none (freed dims made the old one wrong).
    """
    g = model.graph
    old = {o.name: onnx.TypeProto.FromString(o.type.SerializeToString()) for o in g.output}
    old_outputs = {o.name: o.type.tensor_type.elem_type for o in g.output if o.type.HasField("tensor_type")}
    del g.value_info[:]
    for o in g.output:
        if o.type.HasField("tensor_type"):
            o.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # keep the cleared shapes: still valid, only less informative
        return model
    for o in inferred.graph.output:
        if o.name not in old_outputs:
            continue
        if keep_unknown and not o.type.tensor_type.HasField("shape"):
            o.type.CopyFrom(old[o.name])
        elif o.type.tensor_type.elem_type == 0:
            o.type.tensor_type.elem_type = old_outputs[o.name]
    return inferred
