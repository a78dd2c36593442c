"""build: ONNX -> an engine for the configured backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deploykit.artifacts import Artifact
from deploykit.backends import get_backend
from deploykit.stages.base import Stage, StageContext
from deploykit.stages.export import MODEL


class BuildStage(Stage):
    name = "build"
    version = 1
    inputs = {"model": "onnx"}
    output_kind = "engine"
    output_roles = ("engine",)

    def key_config(self, ctx: StageContext) -> Any:
        return {"build": ctx.config.build, "dims": ctx.config.dims, "inputs": ctx.config.inputs}

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        return get_backend(ctx.config.build.backend).build_fingerprint(ctx.config.build)

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> dict[str, Any]:
        backend = get_backend(ctx.config.build.backend)
        summary = backend.build(inputs["model"].file(MODEL), ctx.config.build, out)
        return {"backend": backend.name, **summary}


def load_engine(engine: Artifact) -> Any:
    """A Session for a built engine artifact, through the backend that built it."""
    return get_backend(engine.manifest.summary["backend"]).load(engine.path)
