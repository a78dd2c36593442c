"""Shared fixtures: a tiny torch model defined in code, its config, and a store that already holds
its export (dynamo export takes seconds; tests copy that store instead of exporting again)."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest

TINY_MODEL = """
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.head(y), y.mean(dim=(2, 3))


def build():
    torch.manual_seed(0)
    return Tiny().eval()
"""

TINY_CONFIG = """
name: tiny
source: {factory: "tiny_model:build"}
inputs:
  - {name: x, shape: [batch, 3, 16, 16]}
dims: {batch: {min: 1, opt: 1, max: 3}}
outputs: [features, pooled]
export: {exporter: EXPORTER}
parity: {samples: 1}
gate:
  warmup: 2
  iterations: 10
  targets:
    default: {fps: 1}
"""


def write_tiny(folder: Path, exporter: str = "dynamo") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny_model.py").write_text(textwrap.dedent(TINY_MODEL))
    cfg = folder / "deploykit.yaml"
    cfg.write_text(TINY_CONFIG.replace("EXPORTER", exporter))
    return cfg


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(config, workdir) after one full convert of the tiny model."""
    import deploykit

    root = tmp_path_factory.mktemp("tiny")
    cfg = write_tiny(root / "model")
    deploykit.convert(cfg, workdir=root / "store")
    sys.modules.pop("tiny_model", None)  # each test imports the factory afresh
    return cfg, root / "store"


@pytest.fixture
def tiny(tiny_store: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of the tiny model's folder and its populated store."""
    cfg, store = tiny_store
    shutil.copytree(cfg.parent, tmp_path / "model")
    shutil.copytree(store, tmp_path / "store")
    return tmp_path / "model" / "deploykit.yaml", tmp_path / "store"


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker gets one core's worth of threads (torch, and every ONNX Runtime
    session deploykit makes, subprocesses included): two workers with a thread per core each spent a
    third of the suite's time fighting over the cores."""
    import os

    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        os.environ.setdefault("DEPLOYKIT_ORT_THREADS", "1")
        import torch

        torch.set_num_threads(1)


def pytest_itemcollected(item: pytest.Item) -> None:
    """A heavy end-to-end run (marked e2e) is slow: out of the default suite, run by `make test-e2e`
    in CI. The tests of a module that share a module-scoped fixture go to one xdist worker
    (`--dist loadgroup`), so the fixture (a trained example, a hostile module's concurrent runs of
    all its cases) is made once, not once per worker. Marked as each item is collected: before `-m`
    deselects and before xdist reads the groups."""
    if item.get_closest_marker("e2e"):
        item.add_marker(pytest.mark.slow)
    info = getattr(item, "_fixtureinfo", None)
    if info and any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values()):
        item.add_marker(pytest.mark.xdist_group(item.module.__name__))
        if getattr(item.config.option, "loadgroup", False):  # set on xdist workers
            # xdist 3.8 names the group by setting item._nodeid, which pytest 9 no longer reads.
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(f"{item.nodeid}@{item.module.__name__}")


def run_cli(*args: str) -> tuple[int, str, str]:
    """Run ``deploykit`` in-process; return (exit code, stdout, stderr)."""
    import contextlib
    import io

    from deploykit.cli import app as cli

    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["deploykit", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as e:
        code = int(e.code or 0)
    finally:
        sys.argv = old
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def standin_clock(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """A stand-in clock (tests/standins.py) as the one clock deploykit's timings read: timing logic
    is tested on scripted numbers, never on this machine's speed."""
    from tests.standins import install_clock

    return install_clock(monkeypatch)
