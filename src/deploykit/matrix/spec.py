"""matrix.yaml: models x precisions x targets, read and validated before anything runs.

File-level problems (an unknown key, a model config that does not exist, an unknown backend, two
targets with one name) raise ConfigError naming the entry (exit 2). What depends on a model's own
config is checked per cell later (see :mod:`deploykit.matrix.plan`), so one bad cell never stops
the others.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deploykit.choices import Precision
from deploykit.config.typed import from_value
from deploykit.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # cell ids, run names and file names are built from it


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
    """

    name: str
    backend: str = "onnxruntime"
    resources: dict[str, float] = field(default_factory=dict)
    accelerator_type: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)  # dotted config fields for this target's cells

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"name {self.name!r} must be letters, digits, '_', '.' or '-'")
        for key, amount in self.resources.items():
            if amount < 0:
                raise ValueError(f"resources.{key} must be >= 0, got {amount:g}")

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
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")

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
    """Read and validate ``matrix.yaml``; raise ConfigError naming the file and the entry."""
    import yaml

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: matrix file not found", hint="pass the path to a matrix.yaml") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read matrix file: {e.strerror}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(f"{path}:{f' line {mark.line + 1}:' if mark else ''} not valid YAML "
                          f"({getattr(e, 'problem', e)})") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with models, precisions and targets at the top level")
    try:
        spec = from_value(MatrixSpec, raw, "matrix")
    except ConfigError as e:
        raise ConfigError(f"{path}: {e.message}", hint="the README's 'Build matrix' section lists every key") from e
    spec = dataclasses.replace(spec, base_dir=path.parent.resolve())
    _check(spec, path)
    return spec


def _check(spec: MatrixSpec, path: Path) -> None:
    from deploykit.backends import names

    seen: dict[str, int] = {}
    for i, t in enumerate(spec.targets):
        if t.backend not in names():
            raise ConfigError(f"{path}: targets[{i}] ({t.name}): unknown backend {t.backend!r}; "
                              f"known backends: {', '.join(names())}")
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
            raise ConfigError(f"{path}: {where}: model config {entry.config} not found (looked at {config})",
                              hint="paths are relative to the matrix file's folder")
        model_id = entry.name or _config_name(config) or config.parent.name
        if not _NAME.match(model_id):
            raise ConfigError(f"{path}: {where}: model id {model_id!r} must be letters, digits, '_', '.' or '-'",
                              hint="give the entry a `name:`")
        clash = next((m for m in out if m.id == model_id), None)
        if clash is not None:
            raise ConfigError(f"{path}: {clash.where} and {where} are both named {model_id!r}",
                              hint="give one of them a `name:` ({config: ..., name: ...})")
        out.append(Model(model_id, config.resolve(), dict(entry.overrides), where))
    return out


def _config_name(config: Path) -> str | None:
    """The config's own `name`, read leniently: a config that does not parse fails in its cells."""
    import yaml

    try:
        raw = yaml.safe_load(config.read_text())
    except (OSError, yaml.YAMLError):
        return None
    name = raw.get("name") if isinstance(raw, dict) else None
    return name if isinstance(name, str) else None
