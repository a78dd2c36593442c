"""The per-version support tables: what TensorRT's ONNX parser imports, for each version deploykit supports.

Each ``tables/tensorrt-<version>.json`` is deploykit's own table, derived from onnx-tensorrt's
``docs/operators.md`` at the parser commit the TensorRT tag pins (the file records the tag, the
commit, the date and how it was derived) and from that tag's ``plugin/README.md``. Per operator it
holds whether it is supported, its documented types, and the ids of the static restrictions that
apply to it (implemented once, in :mod:`deploykit.lint.operators`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from deploykit.choices import TensorRTVersion, values
from deploykit.errors import UsageError

VERSIONS: tuple[str, ...] = values(TensorRTVersion)
# ONNX TensorProto element type -> the support matrix's type names
TYPE_NAMES = {
    1: "FP32",
    10: "FP16",
    16: "BF16",
    6: "INT32",
    7: "INT64",
    3: "INT8",
    2: "UINT8",
    9: "BOOL",
    17: "FP8",
    22: "INT4",
    23: "FP4",
    11: "DOUBLE",
    4: "UINT16",
    5: "INT16",
    12: "UINT32",
    13: "UINT64",
    8: "STRING",
    18: "FP8E4M3FNUZ",
    19: "FP8E5M2",
    20: "FP8E5M2FNUZ",
    21: "UINT4",
}


@dataclass(frozen=True)
class OpSupport:
    supported: bool
    types: frozenset[str] | None = None  # None: the table lists none (not checked)
    checks: tuple[str, ...] = ()


@dataclass(frozen=True)
class SupportTable:
    version: str  # "10.13", "11"
    tensorrt: str  # the releases it stands for ("10.12-10.13", "11.x")
    source: dict[str, Any]
    opset_min: int
    opset_max: int
    ops: dict[str, OpSupport]
    builtin_plugins: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # name -> versions, deprecated
    removed_plugins: dict[str, list[str]] = field(default_factory=dict)  # name -> versions gone in this release

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


def _text(version: str) -> str:
    return resources.files("deploykit.lint").joinpath("tables", f"tensorrt-{version}.json").read_text("utf-8")


@functools.cache
def table(version: str) -> SupportTable:
    """The support table of ``version`` (one of :data:`VERSIONS`)."""
    if version not in VERSIONS:
        raise UsageError(f"no TensorRT support table for {version!r}; deploykit has {', '.join(VERSIONS)}")
    raw = json.loads(_text(version))
    ops = {
        name: OpSupport(
            bool(e["supported"]),
            frozenset(e["types"]) if e.get("types") else None,
            tuple(e.get("checks", ())),
        )
        for name, e in raw["ops"].items()
    }
    plugins = raw.get("plugins", {})
    return SupportTable(
        raw["version"],
        raw["tensorrt"],
        raw["source"],
        raw["opset"]["min"],
        raw["opset"]["max"],
        ops,
        plugins.get("builtin", {}),
        plugins.get("removed", {}),
    )


@functools.cache
def digest() -> str:
    """sha256 over every table: a lint's recipe changes when a table does."""
    h = hashlib.sha256()
    for version in VERSIONS:
        h.update(_text(version).encode())
    return h.hexdigest()


def parse_for(specs: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``--for tensorrt``, ``--for tensorrt=11``, ``--for tensorrt=10.13`` (repeatable) -> table versions.

    Raises:
        UsageError: a target that is not TensorRT, or a version without a table.
    """
    out: list[str] = []
    for spec in specs or ("tensorrt",):
        backend, _, version = spec.partition("=")
        if backend.strip().lower() != "tensorrt":
            raise UsageError(
                f"--for {spec!r}: the lint checks TensorRT targets only",
                hint=f"--for tensorrt (every version: {', '.join(VERSIONS)}) or --for tensorrt=11",
            )
        for v in (nearest(version.strip()),) if version.strip() else VERSIONS:
            if v not in out:
                out.append(v)
    return tuple(out)


def nearest(version: str) -> str:
    """The table for a TensorRT version: ``11``, ``11.4.0`` -> ``11``; ``10.13``, ``10.16.1`` -> ``10.13``.

    A 10.x release has the 10.13 table (newer 10.x parsers import more, never less); a version
    before 10.12, which deploykit does not support, or a major without a table is a usage error.
    """
    parts = version.removesuffix(".x").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else None
    except ValueError:
        raise UsageError(
            f"TensorRT version {version!r} is not a version number", hint=f"give one of {', '.join(VERSIONS)}"
        ) from None
    candidates = [v for v in VERSIONS if int(v.split(".")[0]) == major]
    if not candidates or (major == 10 and minor is not None and minor < 12):
        raise UsageError(
            f"no TensorRT support table for {version!r}: deploykit supports TensorRT 10.12+ and 11.x",
            hint=f"give one of {', '.join(VERSIONS)}",
        )
    return candidates[-1]
