"""matrix.yaml: models x precisions x targets, read and validated before anything runs.

The file is read as a config is (:mod:`deploykit.config.load`: a regular UTF-8 file of at most 1 MiB,
YAML's safe subset without aliases or duplicate keys, at most 64 levels deep); numbers must be finite
and within bounds, names identifiers, and the cells (models x precisions x targets) at most
``MAX_CELLS``. File-level problems (an unknown key, a model config that does not exist, an unknown
backend, two targets with one name) raise ConfigError naming the entry (exit 2). What depends on a model's own
config is checked per cell later (see :mod:`deploykit.matrix.plan`), so one bad cell never stops
the others.
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deploykit.choices import Precision, TensorRTVersion
from deploykit.config.typed import from_value
from deploykit.errors import ConfigError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # cell ids, run names and file names come from it
_RESOURCE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}")  # Ray resource and accelerator names
MAX_CELLS = 10_000  # models x precisions x targets; planning reads every cell's config
MAX_RESOURCE = 1e6  # no node has more of anything
MAX_RETRIES = 100


@dataclass(frozen=True)
class ModelEntry:
    """One model of the matrix: its deploykit.yaml, an optional id, and overrides for its cells."""

    config: str
    name: str | None = None  # the id in the table and reports; default: the config's `name`
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TargetSpec:
    """Where a cell's build, parity and gate run, and what a node must have to run them.

    ``resources`` holds Ray's resource names: ``CPU`` and ``GPU`` counts and any custom resource a
    node advertises (``orin: 1``); ``accelerator_type: H200`` adds Ray's ``accelerator_type:H200``.
    ``tensorrt: "10.13"`` names the TensorRT version a ``tensorrt`` target's nodes run: its cells lint
    the graph for that version only (``lint.versions``), a device-independent step shared by every
    target of that version.
    """

    name: str
    backend: str = "onnxruntime"
    resources: dict[str, float] = field(default_factory=dict)
    accelerator_type: str | None = None
    tensorrt: TensorRTVersion | None = None  # None: the cells lint for every version lint.versions lists
    overrides: dict[str, Any] = field(default_factory=dict)  # dotted config fields for this target's cells

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValueError(f"name {self.name!r} must be letters, digits, '_', '.' or '-' (at most 128)")
        if self.tensorrt is not None and self.backend != "tensorrt":
            raise ValueError(
                f"tensorrt: {self.tensorrt!r} names the TensorRT version of a tensorrt target; this one's "
                f"backend is {self.backend!r} (set lint.versions in its overrides to lint for TensorRT)"
            )
        if self.accelerator_type is not None and not _RESOURCE.fullmatch(self.accelerator_type):
            raise ValueError(f"accelerator_type {self.accelerator_type!r} is not a Ray accelerator name")
        for key, amount in self.resources.items():
            if not _RESOURCE.fullmatch(key):
                raise ValueError(f"resources: {key!r} is not a Ray resource name (letters, digits, '_', '.', ':', '-')")
            if not math.isfinite(amount):
                raise ValueError(f"resources.{key} must be a finite number, got {amount}")
            if not 0 <= amount <= MAX_RESOURCE:
                raise ValueError(f"resources.{key} must be between 0 and {MAX_RESOURCE:g}, got {amount:g}")

    def requests(self) -> dict[str, float]:
        """Every resource one cell of this target holds while it runs (one CPU unless told)."""
        out = {"CPU": 1.0, **{k: float(v) for k, v in self.resources.items()}}
        if self.accelerator_type:
            out.setdefault(f"accelerator_type:{self.accelerator_type}", 0.001)  # Ray's convention
        return {k: v for k, v in out.items() if v > 0}


@dataclass(frozen=True)
class MatrixSpec:
    models: tuple[str | ModelEntry, ...]
    targets: tuple[TargetSpec, ...]
    precisions: tuple[Precision, ...] = ("fp32",)
    store: str | None = None  # the driver's artifact store; default: --workdir (.deploykit)
    overrides: dict[str, Any] = field(default_factory=dict)  # dotted config fields for every cell
    retries: int = 2  # re-runs of a cell whose worker process or node died; deterministic failures never retry
    transfer: Literal["object_store", "shared"] = "object_store"  # how artifacts reach Ray workers
    base_dir: Path = field(default=Path("."), compare=False, metadata={"internal": True})

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("'models' lists no model")
        if not self.targets:
            raise ValueError("'targets' lists no target")
        if not self.precisions:
            raise ValueError("'precisions' lists no precision")
        if not 0 <= self.retries <= MAX_RETRIES:
            raise ValueError(f"retries must be between 0 and {MAX_RETRIES}, got {self.retries}")

    def entries(self) -> list[ModelEntry]:
        return [m if isinstance(m, ModelEntry) else ModelEntry(config=m) for m in self.models]


@dataclass(frozen=True)
class Model:
    """A model entry resolved against the matrix file: its id and config path."""

    id: str
    path: Path
    overrides: dict[str, Any]
    where: str  # "models[1]", for messages


def load_matrix(path: str | Path) -> MatrixSpec:
    """Read and validate ``matrix.yaml`` (read as a config is); ConfigError names the file and the entry."""
    from deploykit.config.load import load_yaml, read_text

    path = Path(path)
    raw = load_yaml(read_text(path, "matrix", "matrix.yaml"), str(path))
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with models, precisions and targets at the top level")
    try:
        spec = from_value(MatrixSpec, raw, "matrix")
    except ConfigError as e:
        raise ConfigError(f"{path}: {e.message}", hint="the README's 'Build matrix' section lists every key") from e
    spec = dataclasses.replace(spec, base_dir=path.parent.resolve())
    _check(spec, path)
    return spec


def _bound_cells(spec: MatrixSpec, path: Path) -> None:
    cells = len(spec.models) * len(spec.precisions) * len(spec.targets)
    if cells > MAX_CELLS:
        raise ConfigError(
            f"{path}: {cells:,} cells ({len(spec.models):,} models x {len(spec.precisions)} "
            f"precisions x {len(spec.targets):,} targets), more than a matrix may hold "
            f"({MAX_CELLS:,})",
            hint="split it into several matrix files (they share the store: what one built, "
            "the others reuse), or drop targets that are one machine renamed",
        )


def _check_names(spec: MatrixSpec, path: Path) -> None:
    for i, entry in enumerate(spec.entries()):
        if entry.name is not None and not _NAME.fullmatch(entry.name):
            raise ConfigError(
                f"{path}: models[{i}]: name {entry.name!r} must be letters, digits, '_', '.' or '-' (at most 128)"
            )
        if any(ch in entry.config for ch in "\n\r\0"):
            raise ConfigError(f"{path}: models[{i}]: config path {entry.config!r} holds a control character")
    for where, overrides in [
        ("overrides", spec.overrides),
        *((f"models[{i}].overrides", e.overrides) for i, e in enumerate(spec.entries())),
        *((f"targets[{i}].overrides", t.overrides) for i, t in enumerate(spec.targets)),
    ]:
        for key in overrides:
            if any(not part.strip() for part in key.split(".")) or any(ord(ch) < 32 for ch in key):
                raise ConfigError(f"{path}: {where}: {key!r} is not a dotted config field (like gate.iterations)")


def _check(spec: MatrixSpec, path: Path) -> None:
    from deploykit.backends import names

    _bound_cells(spec, path)
    _check_names(spec, path)
    seen: dict[str, int] = {}
    for i, t in enumerate(spec.targets):
        if t.backend not in names():
            raise ConfigError(
                f"{path}: targets[{i}] ({t.name}): unknown backend {t.backend!r}; known backends: {', '.join(names())}"
            )
        if t.name in seen:
            raise ConfigError(f"{path}: targets[{seen[t.name]}] and targets[{i}] are both named {t.name!r}")
        seen[t.name] = i
    if len(set(spec.precisions)) != len(spec.precisions):
        raise ConfigError(f"{path}: precisions lists a precision twice: {list(spec.precisions)}")
    resolve_models(spec, path)


def resolve_models(spec: MatrixSpec, path: Path) -> list[Model]:
    """Each model's id and config path; a missing config or two models with one id is a file-level error."""
    out: list[Model] = []
    for i, entry in enumerate(spec.entries()):
        where = f"models[{i}]"
        config = Path(entry.config)
        config = config if config.is_absolute() else spec.base_dir / config
        if not config.is_file():
            raise ConfigError(
                f"{path}: {where}: model config {entry.config} not found (looked at {config})",
                hint="paths are relative to the matrix file's folder",
            )
        model_id = entry.name or _config_name(config) or config.parent.name
        if not _NAME.fullmatch(model_id):
            raise ConfigError(
                f"{path}: {where}: model id {model_id!r} must be letters, digits, '_', '.' or '-'",
                hint="give the entry a `name:`",
            )
        clash = next((m for m in out if m.id == model_id), None)
        if clash is not None:
            raise ConfigError(
                f"{path}: {clash.where} and {where} are both named {model_id!r}",
                hint="give one of them a `name:` ({config: ..., name: ...})",
            )
        out.append(Model(model_id, config.resolve(), dict(entry.overrides), where))
    return out


def _config_name(config: Path) -> str | None:
    """The config's own `name`, read leniently: a config that does not parse fails in its cells."""
    try:
        raw = read_model_config(config)
    except ConfigError:
        return None
    name = raw.get("name")
    return name if isinstance(name, str) else None


def read_model_config(path: Path) -> dict[str, Any]:
    """A model config's mapping as parsed (what :func:`deploykit.config.read_raw` gives), each distinct text
    parsed once: resolving ids, checking the file and planning each read every model's config, and the
    YAML parse is most of the time a matrix of thousands of models takes to plan. The file is read each
    time (the cache is keyed by its text, so an edited file is parsed again); callers copy before
    changing (``apply_overrides`` does)."""
    from deploykit.config.load import load_yaml, read_text

    text, where = read_text(path), str(path)
    raw = _PARSED.get((where, text))
    if raw is None:
        raw = load_yaml(text, where)
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
        _PARSED.put((where, text), raw, len(text))
    return raw


class _TextCache:
    """Parsed files by (path, text), the oldest dropped past ``budget`` characters of text in all."""

    def __init__(self, budget: int) -> None:
        self.budget, self.used = budget, 0
        self.entries: dict[tuple[str, str], tuple[Any, int]] = {}  # insertion order: oldest first
        self.lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> Any:
        hit = self.entries.get(key)
        return hit[0] if hit else None

    def put(self, key: tuple[str, str], value: Any, size: int) -> None:
        with self.lock:
            if size > self.budget or key in self.entries:
                return
            while self.used + size > self.budget:
                self.used -= self.entries.pop(next(iter(self.entries)))[1]
            self.entries[key] = (value, size)
            self.used += size


_PARSED = _TextCache(32 << 20)  # 10,000 configs of ~3 KB: a whole matrix at the cell limit
