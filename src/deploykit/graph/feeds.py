"""A configured model's inputs: the config checked against the graph, random feeds at min/opt/max."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploykit.choices import InputDtype, values
from deploykit.errors import ConfigError
from deploykit.graph.proto import graph_input_shapes

if TYPE_CHECKING:
    import onnx

    from deploykit.config import Config

NP_DTYPES = {name: np.dtype(name).type for name in values(InputDtype)}


def check_inputs(config: Config, model: onnx.ModelProto, path: Path) -> None:
    """Every configured input exists in the model with the same rank and compatible fixed dims."""
    graph_inputs = graph_input_shapes(model)
    for spec in config.inputs:
        if spec.name not in graph_inputs:
            raise ConfigError(
                f"{path}: the model has no input {spec.name!r} (config 'inputs'); "
                f"its inputs are: {', '.join(graph_inputs)}",
                hint="fix the input name in the config",
            )
        dims = graph_inputs[spec.name]
        if len(dims) != len(spec.shape):
            raise ConfigError(
                f"{path}: input {spec.name!r} has rank {len(dims)} in the model but {len(spec.shape)} in the config",
                hint="fix the shape in the config",
            )
        for axis, (model_dim, cfg_dim) in enumerate(zip(dims, spec.shape, strict=True)):
            if isinstance(model_dim, int) and model_dim > 0:
                sizes = {config.shape(spec, w)[axis] for w in ("min", "opt", "max")}
                if sizes != {model_dim}:
                    raise ConfigError(
                        f"{path}: input {spec.name!r} axis {axis} is fixed to {model_dim} in the "
                        f"model, but the config asks for {cfg_dim!r}",
                        hint="fix the shape in the config",
                    )


def random_feeds(
    config: Config, which: str, rng: np.random.Generator, batch: int | None = None
) -> dict[str, np.ndarray]:
    """Random inputs at the min/opt/max shape; ``batch`` replaces a named leading dim."""
    feeds = {}
    for spec in config.inputs:
        shape = list(config.shape(spec, which))  # type: ignore[arg-type]
        if batch is not None and spec.shape and isinstance(spec.shape[0], str):
            shape[0] = batch
        feeds[spec.name] = random_input(spec.kind, shape, NP_DTYPES[spec.dtype], rng)
    return feeds


def random_input(kind: str, shape: list[int], dtype: type, rng: np.random.Generator) -> np.ndarray:
    """Random values for one input of ``kind`` (see ``deploykit.config.InputSpec``)."""
    if kind in ("mask", "padding_mask"):
        valid = rng.random(shape) < 0.7
        if valid.size:
            rows = valid.reshape(-1, shape[-1])  # a view: setting it sets ``valid``
            rows[np.arange(rows.shape[0]), rng.integers(0, shape[-1], rows.shape[0])] = True  # >= 1 valid per row
        return (valid if kind == "mask" else ~valid).astype(dtype)
    if kind == "image":
        if np.issubdtype(dtype, np.floating):
            return rng.random(shape).astype(dtype)
        return rng.integers(0, 256 if dtype == np.uint8 else 128, shape).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(0, 16, shape).astype(dtype)


def distinct_shapes(config: Config) -> list[str]:
    """'opt' first, then 'min' and 'max' when they give other shapes."""
    out, seen = [], set()
    for which in ("opt", "min", "max"):
        key = tuple(config.shape(s, which) for s in config.inputs)  # type: ignore[arg-type]
        if key not in seen:
            seen.add(key)
            out.append(which)
    return out
