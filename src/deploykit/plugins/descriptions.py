"""Op descriptions: ``plugins/<op>/<op>.yaml`` read into frozen dataclasses, and the checks they imply.

The yaml files are the single source of truth for an op's interface (schema in ``plugins/README.md``,
"Op description files"): the torch op, both exporters, the ONNX function bodies, ``plugins check``
and the TensorRT creators all take names, dtypes, attributes and shape rules from here. Shapes are
lists of symbols and literal ints; a symbol bound twice (by input dims or an attribute's ``binds``)
must take the same value both times, which is how "the three rank tensors share P" is stated.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploykit.errors import ConfigError, DataError, ModelError

SOURCE_ENV = "DEPLOYKIT_PLUGINS_SOURCE"  # where plugins/ lives when deploykit is not run from its checkout
ONNX_DOMAIN = "deploykit"  # the domain of the exported nodes (TensorRT's parser ignores it)


@dataclass(frozen=True)
class TensorDesc:
    name: str
    dtype: str  # a type variable of the op (``T``) or a concrete dtype (``int32``)
    shape: tuple[str | int, ...]
    doc: str = ""


@dataclass(frozen=True)
class AttributeDesc:
    name: str
    type: str  # ONNX attribute type, lower case: ``ints``
    length: int
    required: bool
    default: Any
    binds: tuple[str, ...]  # shape symbols the values set, in order
    constraint: str  # ``positive`` or ``""``
    doc: str = ""

    def describe(self) -> str:
        """``3 positive ints: Z, Y, X``: what a node must give, for error messages."""
        kind = f"{self.length} {self.constraint + ' ' if self.constraint else ''}{self.type}"
        return f"{kind}: {', '.join(self.binds)}" if self.binds else kind


@dataclass(frozen=True)
class OpDescription:
    """One plugin op as its yaml describes it."""

    name: str  # the op name, equal to the plugin name and the ONNX op_type
    folder: str  # plugins/<folder>/
    summary: str
    plugin_name: str
    plugin_version: str
    plugin_namespace: str
    types: Mapping[str, Mapping[str, tuple[str, ...]]]  # type variable -> backend -> dtypes
    inputs: tuple[TensorDesc, ...]
    outputs: tuple[TensorDesc, ...]
    attributes: tuple[AttributeDesc, ...]
    shape_rule: str
    semantics: Mapping[str, Any]

    @property
    def torch_name(self) -> str:
        """The torch.library name, ``deploykit::bev_pool_v2``."""
        return f"deploykit::{self.torch_op}"

    @property
    def torch_op(self) -> str:
        """The op name in snake case (``BEVPoolV2`` -> ``bev_pool_v2``, BEVDet's name for it)."""
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", self.name).lower()

    def attribute(self, name: str) -> AttributeDesc:
        return next(a for a in self.attributes if a.name == name)

    def dtypes(self, dtype: str, backend: str | None = None) -> tuple[str, ...]:
        """Concrete dtypes a tensor of ``dtype`` may have on ``backend`` (any backend when None)."""
        if dtype not in self.types:
            return (dtype,)
        per_backend = self.types[dtype]
        if backend is not None:
            return tuple(per_backend.get(backend, ()))
        return tuple(dict.fromkeys(d for ds in per_backend.values() for d in ds))


PACKAGED = Path(__file__).resolve().parents[1] / "_plugin_sources"  # what an installed wheel carries (setup.py)


def plugins_source() -> Path:
    """The ``plugins/`` folder: ``$DEPLOYKIT_PLUGINS_SOURCE``, else the one beside ``src/`` in a checkout,
    else the copy an installed package carries (``deploykit/_plugin_sources``)."""
    env = os.environ.get(SOURCE_ENV)
    if env:
        candidates = [Path(env)]
    else:
        candidates = [Path(__file__).resolve().parents[3] / "plugins", PACKAGED]
    for folder in candidates:
        if (folder / "CMakeLists.txt").is_file():
            return folder
    raise ConfigError(
        f"plugin sources not found in {' or '.join(map(str, candidates))}",
        hint=f"reinstall deploykit (the package carries them), or set {SOURCE_ENV} to a checkout's plugins/",
    )


@functools.cache
def _load_all(source: Path) -> dict[str, OpDescription]:
    import yaml

    ops = {}
    for path in sorted(source.glob("*/*.yaml")):
        try:
            op = _from_yaml(yaml.safe_load(path.read_text()), path.parent.name)
        except (KeyError, TypeError, ValueError, yaml.YAMLError) as e:
            raise ConfigError(
                f"{path}: not a valid op description ({type(e).__name__}: {e})",
                hint="see plugins/README.md, 'Op description files'",
            ) from e
        ops[op.name] = op
    return ops


def descriptions(source: Path | None = None) -> dict[str, OpDescription]:
    """Every op description under ``source`` (default :func:`plugins_source`), by op name."""
    return dict(_load_all((source or plugins_source()).resolve()))


def description(name: str, source: Path | None = None) -> OpDescription:
    """One op by name (``BEVPoolV2``) or folder (``bev_pool``)."""
    ops = descriptions(source)
    found = ops.get(name) or next((op for op in ops.values() if name in (op.folder, op.torch_op)), None)
    if found is None:
        raise ConfigError(f"no plugin op named {name!r}", hint=f"known ops: {', '.join(sorted(ops))}")
    return found


def _from_yaml(raw: dict[str, Any], folder: str) -> OpDescription:
    def tensors(items: list[dict[str, Any]]) -> tuple[TensorDesc, ...]:
        return tuple(TensorDesc(t["name"], t["dtype"], tuple(t["shape"]), t.get("doc", "")) for t in items)

    attributes = tuple(
        AttributeDesc(
            a["name"],
            a["type"],
            int(a["length"]),
            bool(a["required"]),
            a.get("default"),
            tuple(a.get("binds") or ()),
            a.get("constraint") or "",
            a.get("doc", ""),
        )
        for a in raw.get("attributes") or ()
    )
    types = {var: {backend: tuple(ds) for backend, ds in per.items()} for var, per in (raw.get("types") or {}).items()}
    plugin = raw["plugin"]
    return OpDescription(
        raw["name"],
        folder,
        " ".join(str(raw.get("summary", "")).split()),
        plugin["name"],
        str(plugin["version"]),
        plugin["namespace"],
        types,
        tensors(raw["inputs"]),
        tensors(raw["outputs"]),
        attributes,
        raw.get("shape_rule", ""),
        raw.get("semantics") or {},
    )


# ---------------------------------------------------------------------------------------------
# Checks every path (torch op, CPU kernel binding, ONNX node) shares, so they fail alike.


def check_attributes(op: OpDescription, values: Mapping[str, Any], where: str) -> dict[str, tuple[int, ...]]:
    """Validate attribute values against the description; return them as int tuples.

    Raises:
        ModelError: a required attribute is missing, or one has the wrong length or a non-positive value;
            the message names the attribute and ``where`` (a node).
    """
    out = {}
    for attr in op.attributes:
        value = values.get(attr.name, attr.default)
        if value is None:
            raise ModelError(
                f"{op.name} {where}: missing required attribute {attr.name!r} ({attr.describe()})",
                hint=f"give the node an INTS attribute {attr.name!r}; see plugins/{op.folder}/README.md",
            )
        ints = tuple(int(v) for v in value)
        if len(ints) != attr.length or (attr.constraint == "positive" and min(ints, default=1) < 1):
            raise ModelError(
                f"{op.name} {where}: attribute {attr.name!r} = {list(ints)} must be {attr.describe()}",
                hint=f"see plugins/{op.folder}/README.md",
            )
        out[attr.name] = ints
    return out


def bind_shapes(
    op: OpDescription, shapes: Sequence[Sequence[int]], attrs: Mapping[str, Sequence[int]], *, where: str = ""
) -> dict[str, int]:
    """Bind the description's shape symbols to concrete dims; raise DataError where two disagree.

    ``shapes`` are the input shapes in order. The message names both places a symbol was bound,
    e.g. ``ranks_feat has P = 9 (dim 0) but ranks_depth has P = 10``.
    """
    prefix = f"{op.name}{' ' + where if where else ''}"
    if len(shapes) != len(op.inputs):
        raise DataError(
            f"{prefix}: expected {len(op.inputs)} inputs ({', '.join(t.name for t in op.inputs)}), got {len(shapes)}"
        )
    bound: dict[str, tuple[int, str]] = {}
    for attr in op.attributes:
        for symbol, value in zip(attr.binds, attrs.get(attr.name, ()), strict=False):
            bound[symbol] = (int(value), f"attribute {attr.name}")
    for tensor, shape in zip(op.inputs, shapes, strict=True):
        if len(shape) != len(tensor.shape):
            raise DataError(
                f"{prefix}: {tensor.name} must have rank {len(tensor.shape)} "
                f"({', '.join(map(str, tensor.shape))}), got shape {tuple(shape)}"
            )
        for axis, (symbol, dim) in enumerate(zip(tensor.shape, shape, strict=True)):
            if isinstance(symbol, int):
                if dim != symbol:
                    raise DataError(f"{prefix}: {tensor.name} dim {axis} must be {symbol}, got shape {tuple(shape)}")
            elif symbol in bound and bound[symbol][0] != dim:
                value, source = bound[symbol]
                raise DataError(
                    f"{prefix}: {tensor.name} has {symbol} = {dim} (dim {axis}) but {source} has {symbol} = {value}",
                    hint=f"see the shape table in plugins/{op.folder}/README.md",
                )
            else:
                bound.setdefault(symbol, (dim, tensor.name))  # no int(): a symbolic dim must stay symbolic
    return {symbol: value for symbol, (value, _) in bound.items()}


def output_shape(op: OpDescription, symbols: Mapping[str, int], index: int = 0) -> tuple[int, ...]:
    """The output's shape from bound symbols (every output symbol is bound: the yaml test checks it)."""
    return tuple(d if isinstance(d, int) else symbols[d] for d in op.outputs[index].shape)


def check_dtypes(op: OpDescription, dtypes: Sequence[str], backend: str | None, *, where: str = "") -> None:
    """Raise DataError unless each input's dtype is allowed and every tensor of one type variable agrees."""
    prefix = f"{op.name}{' ' + where if where else ''}"
    seen: dict[str, tuple[str, str]] = {}
    for tensor, dtype in zip(op.inputs, dtypes, strict=True):
        allowed = op.dtypes(tensor.dtype, backend)
        if dtype not in allowed:
            on = f" on {backend}" if backend else ""
            raise DataError(
                f"{prefix}: {tensor.name} must be {' or '.join(allowed)}{on}, got {dtype}",
                hint=f"see the dtype column in plugins/{op.folder}/README.md",
            )
        if tensor.dtype in op.types:
            first = seen.setdefault(tensor.dtype, (dtype, tensor.name))
            if first[0] != dtype:
                raise DataError(
                    f"{prefix}: {tensor.name} is {dtype} but {first[1]} is {first[0]}; "
                    f"all {tensor.dtype} tensors must share one dtype"
                )
