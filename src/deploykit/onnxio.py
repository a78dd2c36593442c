"""Reading and writing ONNX files safely, and making inputs for them."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploykit.errors import ConfigError, ModelError, first_line

if TYPE_CHECKING:
    import onnx

    from deploykit.config import Config

_2GB = 2**31 - 1
NP_DTYPES = {"float32": np.float32, "float16": np.float16, "int64": np.int64, "int32": np.int32,
             "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}


def load_model(path: Path, *, load_external: bool = True) -> onnx.ModelProto:
    """Parse an ONNX file; refuse what would crash native code (see :mod:`deploykit.onnxguard`) and
    external data that points outside the model's folder or beyond its file."""
    import onnx
    from google.protobuf.message import DecodeError

    from deploykit.onnxguard import check_structure

    if not path.is_file():
        raise ModelError(f"{path}: no such ONNX file", hint="check the path in the config or on the command line")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError, RecursionError) as e:
        raise ModelError(f"{path}: not a readable ONNX model ({first_line(e)})",
                         hint="the file may be truncated or not ONNX; re-export it") from e
    except OSError as e:
        raise ModelError(f"{path}: cannot read the ONNX file ({e.strerror or type(e).__name__})") from e
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"{path}: parsed as ONNX but holds no graph (truncated or not an ONNX file?)",
                         hint="re-export the model")
    check_structure(model, path)
    external_data_files(model, path)  # every reference checked before anything reads one
    if load_external:
        try:
            onnx.load_external_data_for_model(model, str(path.parent))
        except (onnx.checker.ValidationError, OSError, ValueError) as e:
            raise ModelError(f"{path}: cannot load its external data ({first_line(e)})",
                             hint="copy the model together with its .data file") from e
    return model


def external_data_files(model: onnx.ModelProto, path: Path) -> list[Path]:
    """The external-data files a model refers to, each checked (inside the folder, not a link,
    offsets within the file)."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    from deploykit.onnxguard import check_external_data

    folder = path.parent.resolve()
    files = {check_external_data(path, t, folder) for t in _get_all_tensors(model) if uses_external_data(t)}
    return sorted(files)


def check_model(model: onnx.ModelProto, path: Path) -> onnx.ModelProto:
    """Run the ONNX checker and strict shape inference; return the model with inferred shapes."""
    import onnx

    from deploykit.surgery.graph import graph_problems

    problems = graph_problems(model.graph)  # the checker's own message for these loses the node name
    if problems:
        raise ModelError(f"{path}: invalid ONNX graph: {problems[0]}", hint="fix the exporter or the graph; "
                         "`deploykit inspect` shows the graph")
    from deploykit.nativeprobe import probe

    probe(model, path)  # a crash in onnx's C++ is refused here, not suffered
    try:
        if model.ByteSize() < _2GB:
            onnx.checker.check_model(model, full_check=False)
            return onnx.shape_inference.infer_shapes(model, strict_mode=True)
        onnx.checker.check_model(str(path))
        return model
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        first = first_line(e)
        raise ModelError(f"{path}: invalid ONNX model: {first}", hint="fix the exporter or the graph; "
                         "`deploykit inspect` shows the graph") from e


def save_model(model: onnx.ModelProto, path: Path) -> list[Path]:
    """Write one self-contained file, or file + ``.data`` beside it when over 2 GB; return what was written."""
    import onnx

    if model.ByteSize() < _2GB:
        onnx.save_model(model, str(path))
        return [path]
    data = path.with_suffix(".onnx.data")
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name, size_threshold=1024)
    return [path, data]


def copy_model(src: Path, dst: Path) -> None:
    """Copy a model with its external data files, keeping their relative names."""
    import onnx

    model = onnx.load(str(src), load_external_data=False)
    shutil.copyfile(src, dst)
    for f in external_data_files(model, src):
        target = dst.parent / f.relative_to(src.parent.resolve())
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)


def check_inputs(config: Config, model: onnx.ModelProto, path: Path) -> None:
    """Every configured input exists in the model with the same rank and compatible fixed dims."""
    graph_inputs = graph_input_shapes(model)
    for spec in config.inputs:
        if spec.name not in graph_inputs:
            raise ConfigError(f"{path}: the model has no input {spec.name!r} (config 'inputs'); "
                              f"its inputs are: {', '.join(graph_inputs)}", hint="fix the input name in the config")
        dims = graph_inputs[spec.name]
        if len(dims) != len(spec.shape):
            raise ConfigError(f"{path}: input {spec.name!r} has rank {len(dims)} in the model but "
                              f"{len(spec.shape)} in the config", hint="fix the shape in the config")
        for axis, (model_dim, cfg_dim) in enumerate(zip(dims, spec.shape, strict=True)):
            if isinstance(model_dim, int) and model_dim > 0:
                sizes = {config.shape(spec, w)[axis] for w in ("min", "opt", "max")}
                if sizes != {model_dim}:
                    raise ConfigError(f"{path}: input {spec.name!r} axis {axis} is fixed to {model_dim} in the "
                                      f"model, but the config asks for {cfg_dim!r}", hint="fix the shape in the config")


def graph_input_shapes(model: onnx.ModelProto) -> dict[str, list[int | str]]:
    """Real graph inputs (not initializers) with their dims; unknown dims are ''."""
    initializers = {i.name for i in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
    return out


def random_feeds(config: Config, which: str, rng: np.random.Generator, batch: int | None = None) -> dict[str, np.ndarray]:
    """Random inputs at the min/opt/max shape; ``batch`` replaces a named leading dim."""
    feeds = {}
    for spec in config.inputs:
        shape = list(config.shape(spec, which))  # type: ignore[arg-type]
        if batch is not None and spec.shape and isinstance(spec.shape[0], str):
            shape[0] = batch
        dtype = NP_DTYPES[spec.dtype]
        if np.issubdtype(dtype, np.floating):
            feeds[spec.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[spec.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            feeds[spec.name] = rng.integers(0, 16, shape).astype(dtype)
    return feeds


def distinct_shapes(config: Config) -> list[str]:
    """'opt' first, then 'min' and 'max' when they give other shapes."""
    out, seen = [], set()
    for which in ("opt", "min", "max"):
        key = tuple(config.shape(s, which) for s in config.inputs)  # type: ignore[arg-type]
        if key not in seen:
            seen.add(key)
            out.append(which)
    return out
