"""What the example tests share: converting an example, and proving its output depends on its input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import deploykit
from deploykit.config import load_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def convert(config: Path, store: Path, precision: str = "fp32", target: str = "auto", **overrides: Any) -> Any:
    """One conversion with a short gate. The gate still measures, against a 1 FPS target: on a shared
    2-core VM the examples' camera-rate targets flaked (tensorrt-flavour graphs, FP16 emulated on the
    CPU, measured 6-50 FPS); each README shows the gate failing on a too-tight target instead."""
    return deploykit.convert(config, workdir=store, quantize__precision=precision, quantize__target=target,
                             gate__iterations=5, gate__trials=1, gate__warmup=2, gate__targets__default__fps=1,
                             **overrides)


def torch_outputs(config: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The trained torch model's outputs (weights loaded as deploykit loads them)."""
    from deploykit.source.factory import build_model, run_torch

    cfg = load_config(config)
    return run_torch(build_model(cfg), feeds, [s.name for s in cfg.inputs])


def validation_samples(config: Path, count: int = 2) -> list[dict[str, np.ndarray]]:
    from deploykit.data.sources import DataSource, inputs_from_config

    cfg = load_config(config)
    source = DataSource(cfg.validation, cfg.base_dir, inputs_from_config(cfg), what="validation")
    return [s for s, _ in zip(source, range(count), strict=False)]


def rel_change(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / ||a||: how much an output moves between two inputs (parity tolerates 1e-4 at FP32, 0.1 at INT8)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))
