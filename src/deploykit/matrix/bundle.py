"""A model's files, carried to nodes that do not share the driver's filesystem.

A bundle holds the config's folder (its factory module and whatever sits beside it, minus hidden
entries and caches) and every file the config names outside it (weights, depends, an ONNX source,
calibration and validation data, a gate baseline), keyed by their path under the folder all of them
share. Relative paths in the config therefore resolve the same way on the worker, and since every
recipe key hashes file *contents*, never paths, a cell computes the same keys on any node.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from deploykit.config import Config, DataConfig
from deploykit.errors import ArtifactCorrupt, ConfigError
from deploykit.store.hashing import digest_value

MAX_BYTES = 2 << 30  # Ray's object store holds a bundle in memory: refuse one that would not fit well
_SKIP = {"__pycache__", "node_modules"}
_DONE = ".bundle-complete"


@dataclass(frozen=True)
class Bundle:
    digest: str
    config: str  # the config's path inside the bundle
    files: dict[str, bytes]


def bundle_model(config_path: Path, config: Config) -> Bundle:
    """Collect the files ``config`` (read from ``config_path``) needs on another machine."""
    config_path = config_path.resolve()
    paths = _folder_files(config_path.parent) + _named_files(config)
    root = Path(os.path.commonpath([config_path.parent, *(p.parent for p in paths)]))
    files: dict[str, bytes] = {}
    total = 0
    for p in dict.fromkeys(paths):
        total += p.stat().st_size
        if total > MAX_BYTES:
            raise ConfigError(
                f"{config_path}: the files this model needs exceed {MAX_BYTES >> 30} GiB (at {p})",
                hint="use a store and data reachable from every node (transfer: shared)",
            )
        files[p.relative_to(root).as_posix()] = p.read_bytes()
    rel = config_path.relative_to(root).as_posix()
    files.setdefault(rel, config_path.read_bytes())
    return Bundle(_digest(files, rel), rel, files)


def _digest(files: dict[str, bytes], config: str) -> str:
    import hashlib

    return digest_value({"config": config, "files": {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}})


def _folder_files(folder: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP)
        out += [Path(dirpath, f).resolve() for f in sorted(filenames) if not f.startswith(".")]
    return [p for p in out if p.is_file()]


def _named_files(config: Config) -> list[Path]:
    """Files the config names: weights, depends, the ONNX source and its data, data folders, baseline."""
    names = [config.source.weights, *config.source.depends, config.source.onnx, config.gate.baseline]
    out = []
    for name in filter(None, names):
        p = config.path(name).resolve()
        if p.is_file():
            out.append(p)
            if p.suffix == ".onnx":
                out += _external_data(p)
    for data in (config.calibration, config.validation):
        out += _data_files(config, data)
    return out


def _external_data(path: Path) -> list[Path]:
    from deploykit.graph.files import external_data_files, load_model

    return [p.resolve() for p in external_data_files(load_model(path, load_external=False), path)]


def _data_files(config: Config, data: DataConfig | None) -> list[Path]:
    if data is None or data.function:  # a function's module sits in the config's folder
        return []
    p = config.path(data.folder or data.files).resolve()  # type: ignore[arg-type]
    return [p] if p.is_file() else _folder_files(p) if p.is_dir() else []


def materialize(bundle: Bundle, root: Path) -> Path:
    """Write the bundle under ``root/<digest>`` (once per node) and return the config's path there."""
    final = root / bundle.digest
    if not (final / _DONE).is_file():
        tmp = root / f".{bundle.digest}-{uuid.uuid4().hex[:8]}"
        try:
            for name, data in bundle.files.items():
                target = (tmp / name).resolve()
                if not target.is_relative_to(tmp.resolve()):
                    raise ArtifactCorrupt(f"model bundle {bundle.digest[:12]} names a path outside it: {name!r}")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            if _digest({n: (tmp / n).read_bytes() for n in bundle.files}, bundle.config) != bundle.digest:
                raise ArtifactCorrupt(
                    f"model bundle {bundle.digest[:12]} arrived altered",
                    hint="rerun the matrix; the transfer changed the files",
                )
            (tmp / _DONE).write_text(bundle.digest)
            try:
                os.rename(tmp, final)
            except OSError:  # another worker on this node finished first: its copy is the same
                if not (final / _DONE).is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final / bundle.config
