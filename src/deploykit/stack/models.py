"""The stack's models, loaded: each entry's engine (built or reused through the pipeline for a config or
an ONNX file; as it is for an engine folder), a session with the entry's thread budget (CPU) or stream
priority (GPU), and the inputs it is fed (random, at the opt shape)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import EnvironmentProblem
from deploykit.stack.spec import StackModel, StackSpec

# cuda: priorities as numbers the TensorRT session clamps into the device's range (lower is more urgent)
PRIORITIES = {"high": -1_000, "normal": None, "low": 1_000}
BACKEND = {"cpu": "onnxruntime", "cuda": "tensorrt"}


@dataclass
class Loaded:
    """One model ready to run: its session, what it is fed, and where it came from."""

    name: str
    session: Any
    feeds: dict[str, np.ndarray]
    source: str  # "deploykit.yaml, engine 1a2b3c4d5e6f (reused)"


def load_all(spec: StackSpec, workdir: Path, reporter: Any = None) -> dict[str, Loaded]:
    """Every model of ``spec``, in file order (configs and ONNX files build or reuse through the store)."""
    _check_device(spec)
    return {name: load_one(spec, name, workdir, reporter) for name in spec.models}


def _check_device(spec: StackSpec) -> None:
    from deploykit.backends import get_backend

    backend = get_backend(BACKEND[spec.device], require_available=False)
    status = backend.availability()
    if not status.available:
        raise EnvironmentProblem(
            f"stack device {spec.device}: the {backend.name} backend is unavailable: {status.reason}",
            hint="run `deploykit doctor`; device: cpu runs ONNX Runtime sessions on threads",
        )


def load_one(spec: StackSpec, name: str, workdir: Path, reporter: Any = None) -> Loaded:
    entry, path = spec.models[name], spec.path(name)
    if path.is_dir():
        return _engine_folder(spec, name, entry, path)
    from deploykit import api
    from deploykit.graph.feeds import random_feeds

    overrides: dict[str, Any] = {"build.backend": BACKEND[spec.device]}
    if spec.device == "cpu":
        overrides["build.provider"] = "cpu"
    if entry.precision is not None:
        overrides["quantize.precision"] = entry.precision
    result = api.build(path, workdir=workdir, overrides=overrides, reporter=reporter)
    engine = result.artifacts["engine"]
    status = next((r.status for r in result.stages if r.stage == "build"), "ran")
    cfg = api.resolve_config(path, overrides)
    session = _load(spec, entry, engine.path, BACKEND[spec.device])
    return Loaded(
        name,
        session,
        random_feeds(cfg, "opt", np.random.default_rng(0)),
        f"{path.name} ({cfg.quantize.precision}), engine {engine.digest[:12]} ({status})",
    )


def _engine_folder(spec: StackSpec, name: str, entry: StackModel, path: Path) -> Loaded:
    from deploykit.graph.feeds import NP_DTYPES, random_input

    backend = json.loads((path / "engine.json").read_text()).get("backend", "tensorrt")
    session = _load(spec, entry, path, backend)
    rng = np.random.default_rng(0)
    feeds = {
        s.name: random_input(
            "tensor", [d if isinstance(d, int) else 1 for d in s.shape], NP_DTYPES.get(s.dtype, np.float32), rng
        )
        for s in session.inputs
    }
    return Loaded(name, session, feeds, f"engine folder {path.name} ({backend})")


def _load(spec: StackSpec, entry: StackModel, engine: Path, backend: str) -> Any:
    from deploykit.backends import get_backend

    if backend != BACKEND[spec.device]:
        from deploykit.errors import ConfigError

        raise ConfigError(
            f"{engine}: a {backend} engine cannot run on stack device {spec.device}",
            hint=f"device: {spec.device} runs {BACKEND[spec.device]} engines",
        )
    if spec.device == "cpu":
        return get_backend(backend).load(engine, threads=entry.threads)  # type: ignore[call-arg]
    return get_backend(backend).load(engine, stream_priority=PRIORITIES[entry.priority])  # type: ignore[call-arg]


__all__ = ["Loaded", "load_all", "load_one"]
