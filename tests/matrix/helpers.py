"""Small matrices built in code: ONNX models from tests.quant.models, each with its own calibration and
validation arrays and a deploykit.yaml, and a matrix.yaml naming them."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from tests.quant import models

MODEL_CONFIG = """
name: {name}
source: {{onnx: model.onnx}}
inputs: [{{name: x, shape: [1, 3, 16, 16]}}]
calibration: {{files: calib, samples: 12}}
validation: {{files: calib, samples: 2}}
quantize: {{method: max, check_samples: 4}}
parity: {{samples: 2}}
gate: {{warmup: 2, warmup_s: 0.0, iterations: 10, trials: 2, targets: {{default: {{fps: 1}}}}}}
"""


def write_model(folder: Path, name: str, seed: int, channels: tuple[int, ...] = (8, 16)) -> Path:
    """A CNN with seeded weights and 12 calibration images; returns its deploykit.yaml."""
    folder.mkdir(parents=True, exist_ok=True)
    models.save(models.cnn(channels, seed=seed), folder / "model.onnx")
    calib = folder / "calib"
    calib.mkdir(exist_ok=True)
    for i, sample in enumerate(models.images(12, seed=seed + 100)):
        np.save(calib / f"s{i:02d}.npy", sample["x"])
    config = folder / "deploykit.yaml"
    config.write_text(textwrap.dedent(MODEL_CONFIG.format(name=name)))
    return config


def write_matrix(
    path: Path, configs: list[Path], precisions: list[str], targets: list[dict[str, Any]] | None = None, **extra: Any
) -> Path:
    targets = targets or [{"name": "cpu", "backend": "onnxruntime"}]
    body = {
        "models": [str(c.relative_to(path.parent)) for c in configs],
        "precisions": precisions,
        "targets": targets,
        **extra,
    }
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def two_by_two(root: Path, targets: list[dict[str, Any]] | None = None, **extra: Any) -> Path:
    """2 models x (fp32, int8) x the targets (one CPU target by default)."""
    configs = [write_model(root / "a", "net_a", seed=1), write_model(root / "b", "net_b", seed=2, channels=(8, 8))]
    return write_matrix(root / "matrix.yaml", configs, ["fp32", "int8"], targets, **extra)
