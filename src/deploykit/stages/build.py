"""build: ONNX -> an engine for the configured backend.

For TensorRT the timing cache is kept as its own artifact, keyed by TensorRT version and GPU
compute capability (what TensorRT checks), so a rebuild after a graph change reuses tactic timings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deploykit.artifacts import Artifact, Manifest, recipe_key
from deploykit.backends import get_backend
from deploykit.environment import device_fingerprint, tool_versions
from deploykit.stages.base import Stage, StageContext
from deploykit.stages.export import MODEL

TIMING_CACHE = "timing.cache"


class BuildStage(Stage):
    name = "build"
    version = 1
    inputs = {"model": "onnx"}
    output_kind = "engine"
    output_roles = ("engine",)

    def preflight(self, ctx: StageContext) -> None:
        get_backend(ctx.config.build.backend)  # raises BackendUnavailable (exit 3) with the reason

    def key_config(self, ctx: StageContext) -> Any:
        return {"build": ctx.config.build, "dims": ctx.config.dims, "inputs": ctx.config.inputs}

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        return get_backend(ctx.config.build.backend).build_fingerprint(ctx.config.build)

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> dict[str, Any]:
        backend = get_backend(ctx.config.build.backend)
        model = inputs["model"].file(MODEL)
        if backend.name != "tensorrt":
            return {"backend": backend.name, **backend.build(model, ctx.config.build, out)}
        return {"backend": backend.name, **_build_tensorrt(ctx, backend, model, out)}


def _build_tensorrt(ctx: StageContext, backend: Any, model: Path, out: Path) -> dict[str, Any]:
    from deploykit.backends.tensorrt import profiles_from_config, timing_cache_key

    options = ctx.config.build
    cache_recipe = recipe_key("tensorrt-timing-cache", 1, {}, timing_cache_key(backend.build_fingerprint(options)), {})
    cached = ctx.store.lookup(cache_recipe) if options.tensorrt.timing_cache else None
    with ctx.store.staging("timing-cache") as tmp:
        summary = backend.build(model, options, out, profiles=profiles_from_config(ctx.config),
                                timing_cache=cached.file(TIMING_CACHE).read_bytes() if cached else None,
                                timing_cache_out=tmp / TIMING_CACHE if options.tensorrt.timing_cache else None)
        if (tmp / TIMING_CACHE).is_file():
            manifest = Manifest(kind="tensorrt-timing-cache", stage="build", stage_version=BuildStage.version,
                                recipe_key=cache_recipe, config={}, parents={}, files={}, tools=tool_versions(),
                                device=device_fingerprint(), timings={},
                                summary={"from": cached.digest if cached else None})
            summary["timing_cache_artifact"] = ctx.store.publish(tmp, manifest).digest
    return summary


def load_engine(engine: Artifact) -> Any:
    """A Session for a built engine artifact, through the backend that built it."""
    return get_backend(engine.manifest.summary["backend"]).load(engine.path)
