"""free_dims: make fixed input dims dynamic, under a name (``free_dims: {images: [batch, 3, H, W]}``).

An exporter run without dynamic axes bakes sizes into the graph (a Reshape to ``[1, -1]``); freeing
the input dim does not fix those. So, when ``verify`` is on, the pass runs the graph under ONNX
Runtime with every freed dim at ``verify_size`` and fails, naming the node, if the graph cannot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from deploykit.errors import first_line
from deploykit.graph.proto import copy_model, real_inputs
from deploykit.surgery.base import Pass, PassConfigError, PassError, PassResult
from deploykit.surgery.dims import check_shapes, input_dims, refresh_shapes, write_input_shape


@dataclass(frozen=True)
class FreeDimsParams:
    shapes: dict[str, tuple[int | str, ...]] = field(default_factory=dict)  # input -> shape; names free axes
    batch: str = ""  # also name axis 0 of every input so (e.g. "batch")
    verify: bool = True  # run the graph with freed dims at verify_size
    verify_size: int = 2


class FreeDims(Pass):
    name = "free_dims"
    description = "make fixed input dims dynamic: {input: [batch, 3, H, W]} or {batch: batch}"
    Params = FreeDimsParams
    shorthand = "shapes"

    def requires(self, model: onnx.ModelProto) -> None:
        if not self.params.shapes and not self.params.batch:
            raise PassConfigError("free_dims: no shapes or batch name given", hint="e.g. free_dims: {batch: batch}")
        check_shapes(self.name, model, self.params.shapes)
        known = input_dims(model)
        for name, shape in self.params.shapes.items():
            for axis, (old, new) in enumerate(zip(known[name] or [None] * len(shape), shape, strict=True)):
                if isinstance(new, int) and old is not None and old != new:
                    raise PassConfigError(
                        f"free_dims: input {name!r} axis {axis} is {old!r}; free_dims keeps sizes "
                        f"as they are (got {new})",
                        hint="give the current size, or a name to free it",
                    )
        if self.params.verify_size < 1:
            raise PassConfigError("free_dims: verify_size must be >= 1")

    def run(self, model: onnx.ModelProto) -> PassResult:
        shapes = self._requested(model)
        out = copy_model(model)
        for name, shape in shapes.items():
            write_input_shape(out, name, shape)
        before = input_dims(model)
        out = refresh_shapes(out, keep_unknown=False)
        after = input_dims(out)
        changed = {k: v for k, v in after.items() if before.get(k) != v}
        if not changed:
            return PassResult(model, False, "those dims are already dynamic under those names")
        if self.params.verify:
            self._verify(out, changed)
        return PassResult(out, True, details={"inputs": changed})

    def _requested(self, model: onnx.ModelProto) -> dict[str, list[int | str]]:
        shapes = {k: list(v) for k, v in self.params.shapes.items()}
        if self.params.batch:
            for name, dims in input_dims(model).items():
                if dims:
                    shapes.setdefault(name, [d if d is not None else f"{name}_dim{i}" for i, d in enumerate(dims)])
                    shapes[name][0] = self.params.batch
        return shapes

    def _verify(self, model: onnx.ModelProto, changed: dict[str, list]) -> None:
        """Run with freed dims at verify_size; a graph that bakes in the old size fails here."""
        from deploykit.surgery import ortcheck

        rng = np.random.default_rng(0)
        feeds = {}
        for vi in real_inputs(model.graph):
            value = ortcheck.random_value(vi, rng)
            if value is None:
                return  # an input we cannot make up (strings, sequences): nothing to verify with
            if vi.name in changed:
                dims = [
                    self.params.verify_size if isinstance(d, str) else s
                    for d, s in zip(changed[vi.name], value.shape, strict=True)
                ]
                value = ortcheck.random_value(vi, rng, np.zeros(dims))
            feeds[vi.name] = value
        try:
            ortcheck.run(model, feeds)
        except ortcheck.Unrunnable:
            return  # plugin nodes: the runtime that has them must tell
        except Exception as e:
            first = first_line(e)
            raise PassError(
                f"the graph does not run with the freed dims at {self.params.verify_size}: {first}",
                hint="the exporter baked the old size into the graph (a Reshape or Expand constant); "
                "re-export with dynamic axes",
            ) from e
