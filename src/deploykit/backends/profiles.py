"""Optimization profiles: min/opt/max shapes per input, checked before TensorRT sees them.

TensorRT silently ignores a profile entry whose name matches no input, and reports a bad
min/opt/max only deep inside the build; so every profile is validated here first, against the
ONNX graph's inputs (before TensorRT is involved) and again against the parsed network's inputs.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path

from deploykit.backends.base import Profile, Profiles
from deploykit.errors import ConfigError


def onnx_input_shapes(onnx_path: Path) -> dict[str, list[int | str]]:
    """The ONNX graph's real inputs with their dims (a positive int is fixed; anything else is dynamic)."""
    from deploykit.graph.files import load_model
    from deploykit.graph.proto import graph_input_shapes

    return graph_input_shapes(load_model(onnx_path, load_external=False))


def is_fixed(dim: int | str | None) -> bool:
    """Whether a model dim is a fixed size (ONNX dim_value > 0; TensorRT uses -1 for dynamic)."""
    return isinstance(dim, int) and dim > 0


def validate_profiles(
    profiles: Mapping[str, Sequence[Sequence[int]]], inputs: Mapping[str, Sequence[int | str | None]], where: str
) -> Profiles:
    """Check ``profiles`` against the model's ``inputs``; return them as tuples.

    Args:
        profiles: input name -> (min, opt, max) shapes.
        inputs: the model's input names -> dims (positive int fixed; -1, 0, "" or a name dynamic).
        where: what the inputs belong to (the ONNX file, or "the TensorRT network"), for messages.

    Raises:
        ConfigError: an unknown input name, a rank mismatch, min > opt or opt > max, a size that
            contradicts a fixed dim, or a dynamic input without a profile.
    """
    out: Profiles = {}
    for name, shapes in profiles.items():
        if name not in inputs:
            raise ConfigError(
                _unknown_input(name, inputs, where),
                hint="fix the input name in the config's 'inputs' (TensorRT would silently ignore it)",
            )
        out[name] = _check_one(name, shapes, list(inputs[name]), where)
    missing = [n for n, dims in inputs.items() if n not in out and not all(is_fixed(d) for d in dims)]
    if missing:
        raise ConfigError(
            f"{where}: input(s) {', '.join(map(repr, missing))} have dynamic dims but no min/opt/max shapes",
            hint="list them under 'inputs' with named dims defined in 'dims'",
        )
    return out


def _unknown_input(name: str, inputs: Mapping[str, object], where: str) -> str:
    close = difflib.get_close_matches(name, list(inputs), n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"{where}: an optimization profile names input {name!r}{guess}, which the model does not have; "
        f"its inputs are: {', '.join(inputs) or '(none)'}"
    )


def _check_one(name: str, shapes: Sequence[Sequence[int]], dims: list[int | str | None], where: str) -> Profile:
    if len(shapes) != 3:
        raise ConfigError(f"{where}: profile of input {name!r} needs exactly (min, opt, max) shapes, got {len(shapes)}")
    lo, opt, hi = (tuple(int(v) for v in s) for s in shapes)
    for label, shape in (("min", lo), ("opt", opt), ("max", hi)):
        if len(shape) != len(dims):
            raise ConfigError(
                f"{where}: input {name!r} has rank {len(dims)} but its {label} shape "
                f"{list(shape)} has rank {len(shape)}",
                hint="fix the input's shape in the config",
            )
        if any(v < 1 for v in shape):
            raise ConfigError(f"{where}: input {name!r} {label} shape {list(shape)} has a dim below 1")
    for axis, dim in enumerate(dims):
        if not lo[axis] <= opt[axis] <= hi[axis]:
            raise ConfigError(
                f"{where}: input {name!r} axis {axis} needs min <= opt <= max, got "
                f"min={lo[axis]} opt={opt[axis]} max={hi[axis]}",
                hint="fix 'dims' in the config",
            )
        if is_fixed(dim) and {lo[axis], opt[axis], hi[axis]} != {dim}:
            raise ConfigError(
                f"{where}: input {name!r} axis {axis} is fixed to {dim} in the model, but the "
                f"profile asks for min={lo[axis]} opt={opt[axis]} max={hi[axis]}",
                hint="fix the input's shape in the config",
            )
    return lo, opt, hi
