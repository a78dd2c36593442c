"""The engine folder: what a TensorRT build writes, and reading it back safely.

Layout::

    engine.plan              TensorRT's serialized engine
    engine.json              what it was built with and for (TensorRT, CUDA, GPU, options, I/O, digests)
    engine_inspector.json    IEngineInspector output (DETAILED), 10.x or 11.x layout
    plugins/<lib>.so         the plugin libraries it needs, copied so the folder is self-contained

``engine.json`` holds no timestamps, so two identical builds describe themselves identically.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

from deploykit.backends.trt_build import BuiltPlan
from deploykit.backends.trt_compat import EngineIncompatible
from deploykit.backends.trt_inspect import parse_inspector, summarize
from deploykit.backends.trt_logger import last_lines
from deploykit.backends.trt_plugins import LoadedLibrary
from deploykit.errors import ArtifactCorrupt, EnvironmentProblem, ModelError
from deploykit.store.hashing import canonical, digest_file

PLAN = "engine.plan"
ENGINE_JSON = "engine.json"
INSPECTOR_JSON = "engine_inspector.json"
PLUGINS_DIR = "plugins"
FORMAT = 1


def write_engine_dir(
    out_dir: Path, built: BuiltPlan, meta: dict[str, Any], libraries: list[LoadedLibrary]
) -> dict[str, Any]:
    """Write plan, inspector JSON, plugin copies and ``engine.json``; return ``engine.json``'s content.

    Args:
        out_dir: the (empty) folder the build stage gave the backend.
        built: the build's result; its plan is non-empty and was deserialized once already.
        meta: environment and options to record (see ``TensorRTBackend.build``).
        libraries: the plugin libraries loaded for the build.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / PLAN).write_bytes(built.plan)
    (out_dir / INSPECTOR_JSON).write_text(built.inspector_json)
    plugins = []
    for lib in libraries:
        target = out_dir / PLUGINS_DIR / lib.path.name
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(lib.path, target)
        plugins.append(
            {
                "file": f"{PLUGINS_DIR}/{lib.path.name}",
                "sha256": lib.sha256,
                "creators": [list(c) for c in lib.creators],
            }
        )
    record = {
        "backend": "tensorrt",
        "format": FORMAT,
        **meta,
        "plan": PLAN,
        "plan_bytes": len(built.plan),
        "plan_sha256": hashlib.sha256(built.plan).hexdigest(),
        "settings": built.settings,
        "io": built.io,
        "plugins": plugins,
        "inspector": summarize(parse_inspector(built.inspector_json, str(out_dir / INSPECTOR_JSON))),
    }
    (out_dir / ENGINE_JSON).write_text(json.dumps(canonical(record), indent=2, sort_keys=True))
    return record


def read_engine_meta(engine_dir: Path) -> dict[str, Any]:
    """``engine.json`` of an engine folder; errors say what the folder is missing."""
    path = engine_dir / ENGINE_JSON
    if not path.is_file():
        raise ModelError(
            f"{engine_dir}: no {ENGINE_JSON}; not an engine folder written by deploykit's TensorRT backend",
            hint="pass the folder `deploykit build --backend tensorrt` wrote",
        )
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ArtifactCorrupt(f"{path}: not valid JSON ({e})", hint="rebuild the engine") from e
    if meta.get("backend") != "tensorrt":
        raise ModelError(
            f"{engine_dir}: built by backend {meta.get('backend')!r}, not 'tensorrt'",
            hint="load it with the backend that built it",
        )
    if meta.get("format") != FORMAT:
        raise ArtifactCorrupt(
            f"{path}: engine folder format {meta.get('format')} is not {FORMAT}",
            hint="rebuild the engine with this deploykit",
        )
    return meta


def read_plan(engine_dir: Path, meta: dict[str, Any]) -> bytes:
    """The plan bytes, after checking size and digest against ``engine.json`` (a truncated copy is caught here)."""
    path = engine_dir / meta["plan"]
    if not path.is_file():
        raise ArtifactCorrupt(f"{path}: the plan file is missing", hint="rebuild the engine")
    plan = path.read_bytes()
    if len(plan) != meta["plan_bytes"]:
        raise ArtifactCorrupt(
            f"{path}: the plan is {len(plan)} bytes but was written with {meta['plan_bytes']} "
            f"({'truncated' if len(plan) < meta['plan_bytes'] else 'changed'})",
            hint="copy the engine folder again or rebuild it",
        )
    if hashlib.sha256(plan).hexdigest() != meta["plan_sha256"]:
        raise ArtifactCorrupt(
            f"{path}: the plan's content changed since it was built (digest mismatch)", hint="rebuild the engine"
        )
    return plan


def plugin_paths(engine_dir: Path, meta: dict[str, Any]) -> list[Path]:
    """The engine's plugin library copies, each checked against its recorded digest."""
    out = []
    for rec in meta.get("plugins", []):
        path = engine_dir / rec["file"]
        if not path.is_file() or digest_file(path) != rec["sha256"]:
            raise ArtifactCorrupt(
                f"{path}: plugin library missing or changed since the engine was built", hint="rebuild the engine"
            )
        out.append(path)
    return out


def deserialize(trt: Any, plan: bytes, meta: dict[str, Any], logger: Any, where: Path) -> tuple[Any, Any]:
    """``(runtime, engine)``; TensorRT's refusal is turned into a message naming the cause."""
    try:
        runtime = trt.Runtime(logger)
    except (TypeError, RuntimeError) as e:  # "factory function returned nullptr" when CUDA cannot start
        raise EnvironmentProblem(
            f"TensorRT could not create a runtime (CUDA initialisation failed: {e})", hint="run `deploykit doctor`"
        ) from e
    if meta.get("version_compatible"):
        runtime.engine_host_code_allowed = True  # version-compatible plans carry their own runtime code
    with logger.capture() as records:
        engine = runtime.deserialize_cuda_engine(plan)
    if engine is not None:
        return runtime, engine
    raise deserialize_failure(records, meta, str(trt.__version__), where)


# TensorRT's registry, when the plan names a plugin no loaded library registers:
# "Cannot find plugin: BEVPoolV2, version: 1, namespace: deploykit" (the namespace may be empty).
_MISSING_PLUGIN = re.compile(
    r"cannot find plugin:?\s*([^,\s]+)\s*,\s*version:?\s*([^,\s]+)"
    r"(?:\s*,\s*namespace:?\s*([^,\s)]*))?",
    re.IGNORECASE,
)
# What TensorRT says when a plan comes from another version (its header's magic tag or version fields).
_INCOMPATIBLE = re.compile(
    r"magic ?tag|kplan_magic|version tag|serialization version|not compatible with this "
    r"version|incompatible (?:version|plan)",
    re.IGNORECASE,
)


def deserialize_failure(records: list[tuple[int, str]], meta: dict[str, Any], version: str, where: Path) -> Exception:
    """The error for a plan TensorRT refused, from what TensorRT logged while refusing it.

    A missing plugin is named as such: its message also says "version" (the plugin's), which must not
    read as a plan from another TensorRT.
    """
    text = " ".join(m for _, m in records)
    missing = _MISSING_PLUGIN.search(text)
    if missing:
        name, plugin_version, namespace = missing.group(1), missing.group(2), (missing.group(3) or "").rstrip(".")
        return EnvironmentProblem(
            f"{where}: plugin {name} (version {plugin_version}, namespace {namespace!r}) not loaded: pass --plugins "
            f"LIB with the library that registers it",
            hint="build it with `deploykit plugins build`, or rebuild "
            "the engine with build.plugins set so the engine folder carries the library",
        )
    if _INCOMPATIBLE.search(text):
        return EngineIncompatible(
            f"{where}: TensorRT {version} refuses the plan (built with TensorRT "
            f"{meta.get('tensorrt', '?')}):\n{last_lines(records)}",
            hint="rebuild the engine on this machine (or pass --rebuild-incompatible)",
        )
    return ArtifactCorrupt(
        f"{where}: TensorRT cannot deserialize the plan:\n{last_lines(records)}",
        hint="rebuild the engine; if it persists, check the plugin libraries it needs",
    )


def refit_stripped(trt: Any, engine: Any, meta: dict[str, Any], logger: Any, onnx_path: Path | None) -> None:
    """Put the weights back into a weight-stripped plan from the ONNX it was built from."""
    source = meta["refit_source"]
    path = Path(onnx_path or source["onnx"])
    if not path.is_file():
        raise ModelError(
            f"the engine was built weight-stripped and needs its ONNX to refit, but {path} is missing",
            hint="pass refit_onnx= the model it was built from",
        )
    if digest_file(path) != source["sha256"]:
        raise ModelError(
            f"{path} is not the ONNX the stripped engine was built from (digest differs)",
            hint="refit needs the identical model; rebuild the engine otherwise",
        )
    refitter = trt.Refitter(engine, logger)
    parser_refitter = trt.OnnxParserRefitter(refitter, logger)
    with logger.capture() as records:
        ok = parser_refitter.refit_from_file(str(path)) and refitter.refit_cuda_engine()
    if not ok:
        raise ModelError(
            f"refitting the stripped engine from {path} failed:\n{last_lines(records)}",
            hint="rebuild the engine without strip_plan",
        )
