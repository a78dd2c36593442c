"""Fixtures for the hostile cases: a small valid ONNX model with its config, and a store that
already holds one complete run of it (each test gets a private copy)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from tests.hostile import models

CONFIG = """
name: conv
source: {onnx: model.onnx}
inputs:
  - {name: x, shape: [batch, 3, 8, 8]}
dims: {batch: {min: 1, opt: 1, max: 2}}
parity: {samples: 1}
gate:
  warmup: 1
  warmup_s: 0
  iterations: 5
  trials: 2
  targets: {default: {fps: 1}}
"""


def write_project(folder: Path, extra: str = "") -> Path:
    """model.onnx + deploykit.yaml in ``folder``; ``extra`` is YAML appended to the config."""
    models.save(models.conv(), folder / "model.onnx")
    cfg = folder / "deploykit.yaml"
    cfg.write_text(textwrap.dedent(CONFIG) + textwrap.dedent(extra))
    return cfg


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(config, store) after one full convert, made once per session."""
    import deploykit

    root = tmp_path_factory.mktemp("hostile")
    cfg = write_project(root / "project")
    deploykit.convert(cfg, workdir=root / "store")
    return cfg, root / "store"


@pytest.fixture
def project(built: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of the built project and its store."""
    cfg, store = built
    shutil.copytree(cfg.parent, tmp_path / "project")
    shutil.copytree(store, tmp_path / "store", symlinks=True)
    return tmp_path / "project" / "deploykit.yaml", tmp_path / "store"
