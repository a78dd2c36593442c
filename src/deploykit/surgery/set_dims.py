"""set_dims: pin dynamic input dims to sizes (TensorRT builds faster and fuses more with static shapes).

``set_dims: {images: [1, 3, 640, 640]}`` gives an input its full shape (a name keeps that axis
dynamic under the name); ``set_dims: {dims: {batch: 1}}`` pins a named dim wherever inputs use it.
Output and intermediate shapes are inferred again afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from deploykit.graph.proto import copy_model
from deploykit.surgery.base import Pass, PassConfigError, PassResult
from deploykit.surgery.dims import check_shapes, input_dims, refresh_shapes, substitute, write_input_shape


@dataclass(frozen=True)
class SetDimsParams:
    shapes: dict[str, tuple[int | str, ...]] = field(default_factory=dict)  # input -> full shape
    dims: dict[str, int] = field(default_factory=dict)  # named dim -> size, in every input that uses it


class SetDims(Pass):
    name = "set_dims"
    description = "pin dynamic input dims: {input: [1, 3, 640, 640]} or {dims: {batch: 1}}"
    Params = SetDimsParams
    shorthand = "shapes"

    def requires(self, model: onnx.ModelProto) -> None:
        if not self.params.shapes and not self.params.dims:
            raise PassConfigError("set_dims: no shapes or dims given", hint="e.g. set_dims: {images: [1, 3, 640, 640]}")
        check_shapes(self.name, model, self.params.shapes)
        self._symbols(model)

    def _symbols(self, model: onnx.ModelProto) -> dict[str, int]:
        """Named dims -> the size they get; a fixed dim asked to change is an error."""
        known = input_dims(model)
        symbols = dict(self.params.dims)
        used = {d for dims in known.values() for d in dims or () if isinstance(d, str)}
        for name, size in self.params.dims.items():
            if name not in used:
                raise PassConfigError(
                    f"set_dims: no input has a dim named {name!r}; the named dims are: "
                    f"{', '.join(sorted(used)) or 'none'}",
                    hint="name the dim as the model does",
                )
            if size < 1:
                raise PassConfigError(f"set_dims: dim {name!r} must be >= 1, got {size}")
        for name, shape in self.params.shapes.items():
            for axis, (old, new) in enumerate(zip(known[name] or [None] * len(shape), shape, strict=True)):
                if isinstance(old, int) and old > 0 and old != new:
                    raise PassConfigError(
                        f"set_dims: input {name!r} axis {axis} is fixed to {old} in the model; "
                        f"it cannot become {new!r}",
                        hint="re-export with that axis dynamic",
                    )
                if isinstance(old, str) and isinstance(new, int):
                    if symbols.setdefault(old, new) != new:
                        raise PassConfigError(
                            f"set_dims: dim {old!r} would be both {symbols[old]} and {new} "
                            f"(input {name!r} axis {axis})",
                            hint="give one size per named dim",
                        )
        return symbols

    def run(self, model: onnx.ModelProto) -> PassResult:
        symbols = self._symbols(model)
        out = copy_model(model)
        for name, shape in self.params.shapes.items():
            write_input_shape(out, name, shape)
        substitute(out, symbols)
        before = input_dims(model)
        out = refresh_shapes(out, keep_unknown=True)
        after = input_dims(out)
        changed = {k: v for k, v in after.items() if before.get(k) != v}
        if not changed:
            return PassResult(model, False, "the inputs already have these shapes")
        return PassResult(out, True, details={"inputs": changed, "symbols": symbols})
