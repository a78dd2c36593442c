"""build: ONNX -> an engine for the configured backend.

Everything a build needs goes through the backend protocol: the build options (with their plugin
libraries), the min/opt/max profiles of the configured inputs, and the backend's timing cache
(:class:`~deploykit.backends.base.SideArtifact`), which is kept as an artifact of its own keyed by
what it is valid for (TensorRT: its version and the GPU's compute capability), so a rebuild after a
graph change reuses tactic timings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.backends import get_backend
from deploykit.backends.base import SideArtifact, profiles_from_config
from deploykit.errors import ConfigError
from deploykit.stages.base import Stage, StageContext, Summary
from deploykit.stages.export import MODEL
from deploykit.stages.lint import applies_to as lint_applies
from deploykit.store.artifacts import Artifact, Manifest, recipe_key
from deploykit.store.environment import device_fingerprint, tool_versions


@dataclass(frozen=True)
class BuildSummary(Summary):
    """The backend that built the engine, its own record of the build, and the side artifacts kept.

    Stored flat, as the manifest always held it: ``{"backend": ..., **engine, **side_artifacts}``.
    """

    backend: str = ""
    engine: dict[str, Any] = field(default_factory=dict)  # the backend's record (onnxruntime: engine.json)
    side_artifacts: dict[str, str] = field(default_factory=dict)  # summary key -> digest ("timing_cache_artifact")

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, **self.engine, **self.side_artifacts}

    @classmethod
    def from_dict(cls, data: Any) -> BuildSummary:
        side = {k: v for k, v in data.items() if k.endswith("_artifact")}
        return cls(data.get("backend", ""), {k: v for k, v in data.items() if k != "backend" and k not in side}, side)


class BuildStage(Stage):
    name = "build"
    version = 1
    inputs = {"model": "onnx"}
    output_kind = "engine"
    output_roles = ("engine",)
    summary_type = BuildSummary

    def preflight(self, ctx: StageContext) -> None:
        """A missing or non-library plugin file, or a timing cache file the backend cannot use, fail
        before any stage runs."""
        from deploykit.plugins.library_check import require_library

        options = ctx.config.build
        for lib in options.plugins:
            path = ctx.config.path(lib)
            if not path.is_file():
                raise ConfigError(
                    f"build.plugins: {path}: {'not a file' if path.exists() else 'no such file'}",
                    hint="build the libraries with `deploykit plugins build` and name the .so it wrote",
                )
            require_library(path, "build.plugins:")  # whichever backend runs: it is what the user asked for
        # raises BackendUnavailable (exit 3) with the reason; when the TensorRT lint runs first, the build
        # raises it only after the lint has said whether the graph would parse (key_env asks again)
        backend = get_backend(options.backend, require_available=not lint_applies(ctx.config))
        if options.tensorrt.timing_cache_file and backend.timing_cache(options) is None:
            raise ConfigError(
                f"build.tensorrt.timing_cache_file: the {backend.name} backend keeps no timing cache",
                hint="a timing cache file is for the tensorrt backend",
            )

    def key_config(self, ctx: StageContext) -> Any:
        return {"build": ctx.config.build, "dims": ctx.config.dims, "inputs": ctx.config.inputs}

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        return get_backend(ctx.config.build.backend).build_fingerprint(ctx.config.build)

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> BuildSummary:
        backend, options = get_backend(ctx.config.build.backend), ctx.config.build
        model, profiles = inputs["model"].file(MODEL), profiles_from_config(ctx.config)
        side = backend.timing_cache(options)
        if side is None:
            return BuildSummary(backend.name, _record(backend.build(model, options, out, profiles=profiles)))
        recipe = recipe_key(side.kind, side.version, {}, side.key, {})
        earlier = ctx.store.lookup(recipe)
        given = Path(options.tensorrt.timing_cache_file) if options.tensorrt.timing_cache_file else None
        start = (
            given.read_bytes()
            if given is not None and given.is_file()
            else (earlier.file(side.file).read_bytes() if earlier else None)
        )
        with ctx.store.staging(side.kind) as tmp:
            record = backend.build(
                model, options, out, profiles=profiles, timing_cache=start, timing_cache_out=tmp / side.file
            )
            if given is not None and (tmp / side.file).is_file():  # trtexec's --timingCacheFile: read, then updated
                given.parent.mkdir(parents=True, exist_ok=True)
                given.write_bytes((tmp / side.file).read_bytes())
            kept = _keep(ctx, side, recipe, earlier, tmp)
        return BuildSummary(backend.name, _record(record), kept)


def _record(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != "backend"}  # the summary names the backend itself


def _keep(ctx: StageContext, side: SideArtifact, recipe: str, earlier: Artifact | None, tmp: Path) -> dict[str, str]:
    """Store the side artifact the build wrote into ``tmp``; its summary key -> digest."""
    if not (tmp / side.file).is_file():
        return {}
    manifest = Manifest(
        kind=side.kind,
        stage=BuildStage.name,
        stage_version=BuildStage.version,
        recipe_key=recipe,
        config={},
        parents={},
        files={},
        tools=tool_versions(),
        device=device_fingerprint(),
        timings={},
        summary={"from": earlier.digest if earlier else None},
    )
    return {side.summary_key: ctx.store.publish(tmp, manifest).digest}


def load_engine(engine: Artifact) -> Any:
    """A Session for a built engine artifact, through the backend that built it."""
    return get_backend(BuildSummary.of(engine).backend).load(engine.path)
