"""The Python API's arguments as a config, as :mod:`deploykit.cli.args` is the command line's.

:func:`deploykit.convert` and each stage function take a source in any of five forms: a
``deploykit.yaml`` path, an ``.onnx`` path, a :class:`~deploykit.config.Config`, a mapping written
as the YAML is, or a model object (a ``torch.nn.Module`` or an ``onnx.ModelProto``, see
:mod:`deploykit.data.memory`). Each becomes a raw mapping (:func:`source_raw`); the named parameters
(``precision=``, ``tasks=``, ``targets=``, ``inputs=``, ``calibration=`` ...) become dotted overrides
of it, validated like the file, and errors name the parameter the user wrote.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploykit.config.surface import spelled
from deploykit.errors import ModelError, UsageError

# parameter -> the config field it sets
FIELDS = {
    "precision": "quantize.precision",
    "tasks": "parity.tasks",
    "targets": "gate.targets",
    "outputs": "outputs",
    "name": "name",
    "inputs": "inputs",
}
DATA = ("calibration", "validation")


@dataclass(frozen=True)
class PythonArgs:
    """The named parameters of :func:`deploykit.convert` beside ``source`` and the run's own options."""

    inputs: Any = None  # {"images": (1, 3, 640, 640)} / {"images": ("batch", 3, 640, 640)} / example tensors
    outputs: Any = None  # names for the exported outputs
    name: str | None = None  # the run's name (default: the config's; a module's class name)
    precision: str | None = None  # quantize.precision
    calibration: Any = None  # samples (iterable, DataLoader, stacked array), a path, or a section mapping
    validation: Any = None  # the same, for parity
    tasks: Any = None  # parity.tasks, as the YAML writes it
    targets: Any = None  # gate.targets, as the YAML writes it, or a number: the default FPS

    def fields(self, model_source: bool) -> tuple[dict[str, Any], dict[str, str]]:
        """The config overrides the parameters give, and how each was spelled (for messages)."""
        out, spelled = {}, {}
        for param, key in FIELDS.items():
            value = getattr(self, param)
            if value is None or (param == "inputs" and model_source):
                continue
            if param == "inputs":
                value = input_specs(value)
            elif param == "targets" and isinstance(value, (int, float)) and not isinstance(value, bool):
                value = {"default": {"fps": float(value)}}
            elif param == "outputs":
                value = [value] if isinstance(value, str) else list(value)
            out[key] = value
            spelled[key] = f"{param}={value!r}"
        return out, spelled


@dataclass(frozen=True)
class Raw:
    """A source as the raw mapping a config is validated from."""

    raw: dict[str, Any]
    base_dir: Path  # where relative paths start
    where: str = ""  # how errors name it ("" for a mapping or an object: the field path alone)
    dims_in_raw: bool = False  # the dims= were used to build it (ONNX sources and modules)
    inputs_in_raw: bool = False  # the inputs= were used to build it (modules)


def source_raw(source: Any, dims: Mapping[str, Any] | None, args: PythonArgs) -> Raw:
    """The raw mapping of any of the API's source forms."""
    from deploykit.config import Config, read_raw
    from deploykit.data.memory import InMemoryModel, is_model_object

    if is_model_object(source):
        model = InMemoryModel.of(source)
        if model.kind == "onnx":
            return Raw(_onnx_raw(source, model, dims, args), Path.cwd(), dims_in_raw=True)
        return Raw(module_raw(model, args, dims or {}), Path.cwd(), dims_in_raw=True, inputs_in_raw=True)
    if isinstance(source, Config):
        return Raw(config_raw(source), source.base_dir)
    if isinstance(source, Mapping):
        return Raw(dict(source), Path.cwd())
    if not isinstance(source, (str, Path)):
        raise UsageError(
            f"source: expected a deploykit.yaml or .onnx path, a Config, a mapping, a torch.nn.Module "
            f"or an onnx.ModelProto; got {type(source).__name__}"
        )
    path = Path(source)
    if path.suffix == ".onnx":
        from deploykit.graph.files import load_model

        _no_inputs_for_onnx(args)
        return Raw(
            onnx_config_dict(load_model(path, load_external=False), path, dict(dims or {})),
            Path.cwd(),
            str(path),
            dims_in_raw=True,
        )
    return Raw(read_raw(path), path.parent.resolve(), str(path))


def _onnx_raw(proto: Any, model: Any, dims: Mapping[str, Any] | None, args: PythonArgs) -> dict[str, Any]:
    from deploykit.config import Source

    _no_inputs_for_onnx(args)
    raw = onnx_config_dict(proto, Path(model.label), dict(dims or {}))
    return {**raw, "name": _identifier(proto.graph.name or "model"), "source": Source(memory=model)}


def _no_inputs_for_onnx(args: PythonArgs) -> None:
    if args.inputs is not None:
        raise UsageError("inputs=: an ONNX model declares its inputs", hint="set its dynamic dims with dims=")


def module_raw(model: Any, args: PythonArgs, dims: Mapping[str, Any]) -> dict[str, Any]:
    """The config of a ``torch.nn.Module`` in memory: its inputs and dims from ``inputs=`` and ``dims=``."""
    from deploykit.config import Source

    if args.inputs is None:
        raise UsageError(
            "inputs=: a torch.nn.Module needs its inputs",
            hint="e.g. inputs={'images': (1, 3, 640, 640)}, {'images': ('batch', 3, 640, 640)} with "
            "dims={'batch': (1, 1, 8)}, or example tensors {'images': torch.randn(1, 3, 640, 640)}",
        )
    specs = input_specs(args.inputs)
    used = [d for s in specs for d in s.get("shape", ()) if isinstance(d, str)]
    missing = sorted(set(used) - set(dims))
    if missing:
        raise UsageError(
            f"inputs=: dim {missing[0]!r} needs its range in dims=",
            hint=f"e.g. dims={{{missing[0]!r}: (1, 1, 8)}} (min, opt, max)",
        )
    unknown = sorted(set(dims) - set(used))
    if unknown:
        raise UsageError(
            f"dims=: no input uses a dim named {unknown[0]!r}{_guess(unknown[0], used)}; the inputs' "
            f"named dims are: {', '.join(dict.fromkeys(used)) or 'none'}"
        )
    name = args.name or _identifier(type(model.object).__name__)
    return {
        "name": name,
        "source": Source(memory=model),
        "inputs": specs,
        "dims": {d: dim_range(v, d) for d, v in dims.items()},
        "gate": {"allow_missing_target": True},
    }


def input_specs(inputs: Any) -> list[dict[str, Any]]:
    """``inputs=`` as the YAML's list: a mapping name -> shape (ints, dim names) / example tensor or
    array / ``{shape, dtype, kind}``; one tensor or array (named ``input``); or the YAML's list itself."""
    if isinstance(inputs, Mapping):
        items = list(inputs.items())
    elif _is_array(inputs) or _is_shape(inputs):
        items = [("input", inputs)]
    elif isinstance(inputs, (list, tuple)) and inputs and all(isinstance(i, Mapping) for i in inputs):
        return [dict(i) for i in inputs]
    elif isinstance(inputs, (list, tuple)) and inputs and all(_is_array(i) for i in inputs):
        items = [(f"input_{i}", v) for i, v in enumerate(inputs)]
    else:
        raise UsageError(
            f"inputs=: expected a mapping of input name -> shape or example tensor, got {type(inputs).__name__}",
            hint="e.g. inputs={'images': (1, 3, 640, 640)}",
        )
    out = []
    for name, spec in items:
        if _is_array(spec):
            dtype = str(spec.dtype).removeprefix("torch.")
            out.append({"name": str(name), "shape": [int(d) for d in spec.shape], "dtype": dtype})
        elif isinstance(spec, Mapping):
            out.append({"name": str(name), **spec})
        elif _is_shape(spec):
            out.append({"name": str(name), "shape": list(spec)})
        else:
            raise UsageError(
                f"inputs={{{name!r}: ...}}: expected a shape (ints and dim names), an example tensor "
                f"or {{'shape': ..., 'dtype': ..., 'kind': ...}}, got {type(spec).__name__}"
            )
    return out


def dim_range(value: Any, name: str) -> Any:
    """``dims={name: value}``: (min, opt, max), one size, or the YAML's ``{min, opt, max}``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"min": value, "opt": value, "max": value}
    if isinstance(value, (list, tuple)) and len(value) == 3:
        return dict(zip(("min", "opt", "max"), value, strict=True))
    if isinstance(value, Mapping) or dataclasses.is_dataclass(value):
        return value
    raise UsageError(f"dims={{{name!r}: {value!r}}}: expected (min, opt, max) or one size")


def dim_fields(dims: Mapping[str, Any], known: Any) -> dict[str, Any]:
    """``dims=`` for a source that declares its dims (a file, a mapping, a Config): overrides of them."""
    unknown = sorted(set(dims) - set(known))
    if unknown:
        raise UsageError(
            f"dims=: the config has no dim {unknown[0]!r}{_guess(unknown[0], list(known))}; its dims "
            f"are: {', '.join(known) or 'none'}"
        )
    return {f"dims.{d}": dim_range(v, d) for d, v in dims.items()}


def data_fields(config: Any, fields: dict[str, Any], args: PythonArgs) -> dict[str, Any]:
    """``calibration=`` / ``validation=`` as config sections: samples in memory, a path, or a mapping.

    ``{what}.samples`` among ``fields`` caps how many samples an iterable is read for (64 by default);
    the other ``{what}.*`` fields apply to a path or a mapping only.
    """
    from deploykit.config import apply_overrides
    from deploykit.data.feedfile import is_tensor_file, load_inputs
    from deploykit.data.sources import DataConfig, inputs_from_config

    out = {}
    for what in DATA:
        value = getattr(args, what)
        if value is None:
            continue
        sub = {k: v for k, v in fields.items() if k.startswith(f"{what}.")}
        if isinstance(value, (str, Path)) and is_tensor_file(Path(value)):  # what --save-inputs wrote
            value = load_inputs(Path(value))
        if isinstance(value, (str, Path)):
            from deploykit.quant.calib_source import calibration_section

            section: Any = calibration_section(
                Path(value), dataclasses.replace(config, calibration=getattr(config, what))
            )
        else:
            limit = sub.pop(f"{what}.samples", DataConfig.samples)
            section = data_section(value, inputs_from_config(config), what, limit)
            if isinstance(section, DataConfig) and sub:
                raise UsageError(
                    f"{next(iter(sub))}: does not apply to samples passed as {what}=",
                    hint=f"only {what}.samples (how many to read) does",
                )
        if isinstance(section, Mapping):
            section = apply_overrides({what: dict(section)}, sub)[what]
        for k in sub:
            fields.pop(k, None)
        out[what] = section
    return out


def config_raw(config: Any) -> dict[str, Any]:
    """A Config as the raw mapping it validates from, so overrides apply to it as to a file; values
    holding objects in memory (a module, samples) stay as they are."""

    def unfold(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = dataclasses.fields(value)
            if any(
                f.metadata.get("internal") and getattr(value, f.name) is not None
                for f in fields
                if f.name != "base_dir"
            ):
                return value
            return {f.name: unfold(getattr(value, f.name)) for f in fields if not f.metadata.get("internal")}
        if isinstance(value, dict):
            return {k: unfold(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [unfold(v) for v in value]
        return value

    return unfold(config)  # type: ignore[no-any-return]


def _is_array(value: Any) -> bool:
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, type)


def _is_shape(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple))
        and bool(value)
        and all(isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool)) for d in value)
    )


def _identifier(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:128].lstrip(".-") or "model"


def _guess(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def data_section(value: Any, inputs: list[Any], what: str, limit: int) -> Any:
    """A ``calibration=`` / ``validation=`` argument as what the config's section takes: a mapping is
    the YAML section as written (``{"folder": "images/"}``), a :class:`deploykit.data.sources.DataConfig`
    stays, anything else is read as samples (:func:`deploykit.data.memory.samples_from`)."""
    from deploykit.data.memory import samples_from
    from deploykit.data.sources import DataConfig

    if value is None or isinstance(value, DataConfig):
        return value
    if isinstance(value, Mapping) and not any(n in value for n in (i.name for i in inputs)):
        return dict(value)
    held = samples_from(value, inputs, what, limit)
    return DataConfig(memory=held, samples=held.count)


def onnx_config_dict(model: Any, path: Path, dims: dict[str, tuple[int, int, int]]) -> dict[str, Any]:
    """A config for a bare ONNX file: inputs as the model declares them; unnamed dynamic dims get names."""
    from onnx import helper

    from deploykit.config.load import MAX_DIM
    from deploykit.graph.feeds import NP_DTYPES
    from deploykit.safety.onnxguard import check_io

    check_io(model, path)
    inputs, used = [], {}
    initializers = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        shape = []
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                if d.dim_value > MAX_DIM:
                    raise ModelError(
                        f"{path}: input {vi.name!r} axis {axis} is fixed to {d.dim_value}, above {MAX_DIM}",
                        hint="re-export the model with sane dims",
                    )
                shape.append(d.dim_value)
                continue
            name = d.dim_param or f"{vi.name}_dim{axis}"
            lo, opt, hi = dims.get(name, (1, 1, 1))
            used[name] = {"min": lo, "opt": opt, "max": hi}
            shape.append(name)
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name
        if dtype not in NP_DTYPES:
            raise ModelError(
                f"{path}: input {vi.name!r} is a {dtype} tensor; deploykit feeds {', '.join(NP_DTYPES)}",
                hint="export the model with an input of one of those types",
            )
        inputs.append({"name": vi.name, "shape": shape, "dtype": dtype})
    unknown = set(dims) - set(used)
    if unknown:
        raise UsageError(
            f"{path}: {spelled('dims=', '--dim')} names {', '.join(sorted(unknown))}, which the model "
            f"does not have; its dynamic dims are: {', '.join(used) or 'none'}"
        )
    return {
        "name": path.stem,
        "source": {"onnx": str(path.resolve())},
        "inputs": inputs,
        "dims": used,
        "gate": {"allow_missing_target": True},
    }
