"""Shapes: every dynamic input needs an optimization profile, and the profiles must fit the model
(checked by the TensorRT backend's own :func:`~deploykit.backends.profiles.validate_profiles`,
run here without TensorRT); a network input that feeds a shape operand is a shape tensor, whose
*values* TensorRT needs in the profile, which deploykit's build does not set.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import onnx

from deploykit.backends.profiles import is_fixed, validate_profiles
from deploykit.errors import ConfigError
from deploykit.lint.findings import Issue
from deploykit.lint.tables import SupportTable
from deploykit.lint.view import GraphView

Profiles = Mapping[str, Sequence[Sequence[int]]]
# operator -> the input positions TensorRT reads as shape tensors
SHAPE_OPERANDS = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "ConstantOfShape": (0,),
    "Range": (0, 1, 2),
    "Resize": (3,),
    "Upsample": (1,),
    "Slice": (1, 2, 3, 4),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "TopK": (1,),
    "OneHot": (1,),
    "Pad": (1,),
    "CumSum": (1,),
    "ReduceSum": (1,),
    "ReduceMean": (1,),
    "ReduceMax": (1,),
    "ReduceMin": (1,),
    "ReduceProd": (1,),
    "EyeLike": (),
    "Trilu": (1,),
}
PASS_THROUGH = {
    "Cast",
    "Concat",
    "Unsqueeze",
    "Squeeze",
    "Gather",
    "Slice",
    "Identity",
    "Add",
    "Sub",
    "Mul",
    "Div",
}
INTEGER = {onnx.TensorProto.INT32, onnx.TensorProto.INT64}


def check(view: GraphView, table: SupportTable, profiles: Profiles | None) -> Iterator[Issue]:
    yield from _profiles(view, profiles)
    yield from _shape_tensors(view)


def _profiles(view: GraphView, profiles: Profiles | None) -> Iterator[Issue]:
    dims = {name: view.shapes.get(name, []) for name in view.inputs}
    given = dict(profiles or {})
    for name, shapes in given.items():
        try:
            validate_profiles({name: shapes}, {name: dims[name]} if name in dims else dims, "the model")
        except ConfigError as e:
            yield Issue("shape.profile", "error", name, "", e.message, e.hint or "fix the input's min/opt/max shapes")
    for name, shape in dims.items():
        if name not in given and not all(is_fixed(d) for d in shape):
            yield Issue(
                "shape.profile",
                "error",
                name,
                "",
                f"input {name!r} has dynamic dims {shape} and no "
                "min/opt/max shapes: TensorRT needs an optimization profile for it",
                f"give its shapes: --shapes {name}:1x... (or --min-shapes/--opt-shapes/--max-shapes), "
                "or name its dims under 'dims' in the config",
            )


def _shape_tensors(view: GraphView) -> Iterator[Issue]:
    for name in view.inputs:
        if view.dtype(name) not in INTEGER or (view.rank(name) or 0) > 1:
            continue
        use = _shape_use(view, name, depth=0)
        if use:
            yield Issue(
                "shape.tensor",
                "error",
                name,
                "",
                f"input {name!r} reaches {use}: TensorRT treats it as a "
                "shape tensor and needs its values in the optimization profile, which deploykit's build "
                "does not set",
                "make it a constant (surgery `set_dims`, then `sanitize` folds it), or "
                "derive it from the Shape of a tensor input",
            )


def _shape_use(view: GraphView, name: str, depth: int) -> str:
    """The first shape operand ``name`` reaches, directly or through integer arithmetic ('' if none)."""
    if depth > 8:
        return ""
    for reader in view.readers(name):
        positions = SHAPE_OPERANDS.get(reader.op_type, ())
        for i in positions:
            if i < len(reader.input) and reader.input[i] == name:
                return f"input {i} of {reader.op_type} {view.name_of(reader)!r}"
        if reader.op_type in PASS_THROUGH:
            for out in reader.output:
                found = _shape_use(view, out, depth + 1)
                if found:
                    return found
    return ""
