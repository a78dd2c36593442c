"""Building a TensorRT plan from an ONNX file: parse, configure, build, inspect.

Every function takes the ``tensorrt`` module as its first argument, so the whole flow runs against
the real module on a GPU machine and against a recording test double in CI (see
``tests/backends/trt_double.py``). The network is strongly typed: precision comes from the ONNX
graph (casts and Q/DQ), never from builder flags.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.backends import trt_compat
from deploykit.backends.base import Profiles
from deploykit.backends.profiles import validate_profiles
from deploykit.backends.trt_logger import last_lines, mentions_memory
from deploykit.backends.trt_session import engine_io, io_record
from deploykit.config import TensorRTOptions
from deploykit.errors import ConfigError, EnvironmentProblem, InternalError, ModelError

_ONNX_DOMAINS = ("", "ai.onnx")


@dataclass
class BuiltPlan:
    """What one build produced; ``plan`` is TensorRT's serialized engine, never empty."""

    plan: bytes
    inspector_json: str
    io: list[dict[str, Any]]
    settings: dict[str, Any]
    timing_cache: bytes | None = None  # the updated cache, to store as its own artifact
    timing_cache_state: dict[str, Any] = field(default_factory=dict)
    build_seconds: float = 0.0


def build_plan(
    trt: Any,
    onnx_path: Path,
    options: TensorRTOptions,
    profiles: Profiles,
    logger: Any,
    *,
    timing_cache: bytes | None = None,
    plugin_libraries: Sequence[Path] = (),
) -> BuiltPlan:
    """Parse ``onnx_path`` into a strongly typed network and build a serialized plan.

    Args:
        trt: the tensorrt module (or a test double of it).
        onnx_path: the model; external data is read relative to it by TensorRT's parser.
        options: builder settings.
        profiles: validated input name -> (min, opt, max); checked again against the parsed network.
        logger: the process-wide logger from :mod:`trt_logger`.
        timing_cache: a serialized timing cache from an earlier build on the same TensorRT and GPU.
        plugin_libraries: the plugin libraries loaded for the build; a version-compatible plan carries them
            (``plugins_to_serialize``), since its embedded runtime cannot see the host's plugin registry,
            together with the version-compatible plugin libraries the parser itself used
            (``parser.get_used_vc_plugin_libraries()``, e.g. for TensorRT's own plugins), as trtexec does.

    Returns:
        The plan, the engine-inspector JSON, the engine's I/O and the updated timing cache.
    """
    start = time.perf_counter()
    try:
        builder = trt.Builder(logger)
    except (TypeError, RuntimeError) as e:  # "factory function returned nullptr" when CUDA cannot start
        raise EnvironmentProblem(
            f"TensorRT could not create a builder (CUDA initialisation failed: {e})", hint="run `deploykit doctor`"
        ) from e
    network = builder.create_network(trt_compat.network_creation_flags(trt))
    parser = parse_network(trt, builder, network, onnx_path, logger)  # keep alive: it owns the weights
    profiles = validate_profiles(profiles, network_inputs(network, onnx_path), f"{onnx_path} (as parsed by TensorRT)")
    used = parser_plugin_libraries(parser) if options.version_compatible else []
    config, settings = configure(trt, builder, options, profiles, [*plugin_libraries, *used])
    cache_state = attach_timing_cache(config, options, timing_cache)
    plan = serialize(builder, network, config, options, logger, onnx_path)
    new_cache = bytes(memoryview(config.get_timing_cache().serialize())) if options.timing_cache else None
    inspector_json, io = inspect_plan(trt, plan, options.version_compatible, logger)
    del parser
    return BuiltPlan(plan, inspector_json, io, settings, new_cache, cache_state, time.perf_counter() - start)


def network_inputs(network: Any, onnx_path: Path) -> dict[str, list[int]]:
    """The parsed network's inputs and dims (-1 = dynamic); shape-tensor inputs are refused."""
    out = {}
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        if tensor.is_shape_tensor:
            raise ConfigError(
                f"{onnx_path}: input {tensor.name!r} is a shape tensor (its values set other "
                "tensors' shapes); the TensorRT backend supports only execution-tensor inputs",
                hint="make it a constant or derive it from a data input with a surgery pass",
            )
        out[tensor.name] = [int(d) for d in tensor.shape]
    return out


def parser_plugin_libraries(parser: Any) -> list[Path]:
    """The version-compatible plugin libraries the parser used for this network (paths TensorRT gives)."""
    return [Path(str(p)) for p in parser.get_used_vc_plugin_libraries()]


def parse_network(trt: Any, builder: Any, network: Any, onnx_path: Path, logger: Any) -> Any:
    """Parse the ONNX file into ``network``; on failure raise ONE ModelError listing every bad node."""
    parser = trt.OnnxParser(network, logger)
    with logger.capture() as records:
        parsed = parser.parse_from_file(str(onnx_path))
    if parsed:
        return parser
    issues = parser_issues(parser)
    unsupported, more = unsupported_nodes(trt, builder, onnx_path, logger)
    raise ModelError(
        format_parse_failure(onnx_path, issues + [i for i in more if i not in issues], unsupported, records),
        hint=suggestion(unsupported),
    )


def parser_issues(parser: Any) -> list[dict[str, Any]]:
    """The parser's errors as plain dicts (node index, name, op, code, description)."""
    out = []
    for i in range(parser.num_errors):
        error = parser.get_error(i)
        out.append(
            {
                "node": int(error.node()),
                "name": str(error.node_name()),
                "op": str(error.node_operator()),
                "code": str(error.code()).split(".")[-1],
                "desc": str(error.desc()).strip(),
            }
        )
    return out


def unsupported_nodes(
    trt: Any, builder: Any, onnx_path: Path, logger: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Ask the parser which nodes TensorRT cannot import (``supports_model_v2``), on a scratch network.

    Returns:
        (the unsupported nodes with name, op type and domain; the parser errors the check produced).
    """
    import onnx

    scratch = builder.create_network(trt_compat.network_creation_flags(trt))
    parser = trt.OnnxParser(scratch, logger)
    with logger.capture():
        supported = parser.supports_model_v2(onnx_path.read_bytes(), str(onnx_path))
    if supported:
        return [], parser_issues(parser)
    indices = sorted(
        {
            int(n)
            for s in range(parser.num_subgraphs)
            if not parser.is_subgraph_supported(s)
            for n in parser.get_subgraph_nodes(s)
        }
    )
    nodes = onnx.load(str(onnx_path), load_external_data=False).graph.node
    found = [
        {"node": i, "name": nodes[i].name or f"#{i}", "op": nodes[i].op_type, "domain": nodes[i].domain}
        for i in indices
        if i < len(nodes)
    ]
    return found, parser_issues(parser)


def format_parse_failure(
    onnx_path: Path, issues: list[dict[str, Any]], unsupported: list[dict[str, Any]], records: list[tuple[int, str]]
) -> str:
    """One message for the user: every parser error and every unsupported node."""
    lines = [f"TensorRT's ONNX parser cannot import {onnx_path}:"]
    for e in issues:
        where = f"node {e['name']!r} ({e['op']})" if e["name"] or e["op"] else f"node #{e['node']}"
        lines.append(f"  - {where}: {e['code']}: {e['desc']}")
    if unsupported:
        lines.append(f"nodes TensorRT does not support ({len(unsupported)}):")
        lines += [f"  - {n['name']!r} ({(n['domain'] + '::') if n['domain'] else ''}{n['op']})" for n in unsupported]
    if not issues and not unsupported:
        lines.append(last_lines(records))
    return "\n".join(lines)


def suggestion(unsupported: list[dict[str, Any]]) -> str:
    """What to do about nodes TensorRT cannot import: a plugin for custom ops, surgery for standard ones."""
    custom = sorted({n["op"] for n in unsupported if n["domain"] not in _ONNX_DOMAINS})
    standard = sorted({n["op"] for n in unsupported if n["domain"] in _ONNX_DOMAINS})
    parts = []
    if custom:
        parts.append(
            f"build a TensorRT plugin for custom op(s) {', '.join(custom)} (plugins/<op>/, `deploykit "
            "plugins build`) and pass its library with --plugins, or replace those nodes with a surgery pass"
        )
    if standard or not custom:
        ops = f" using {', '.join(standard)}" if standard else ""
        parts.append(
            f"rewrite or remove the nodes{ops} with a surgery pass (`deploykit surgery`, e.g. exclude "
            "post-processing from the graph), or implement them as a TensorRT plugin"
        )
    return "; ".join(parts)


def configure(
    trt: Any, builder: Any, options: TensorRTOptions, profiles: Profiles, plugin_libraries: Sequence[Path] = ()
) -> tuple[Any, dict[str, Any]]:
    """A builder config carrying ``options`` and one optimization profile; also what was set, for the record."""
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, options.workspace_mib << 20)
    config.builder_optimization_level = options.builder_optimization_level
    config.hardware_compatibility_level = hardware_level(trt, options.hardware_compatibility)
    # DETAILED keeps layer names, tactics and formats in the plan for the engine inspector.
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    flags = builder_flags(trt, options)
    for _, flag in flags:
        config.set_flag(flag)
    if not options.tf32:
        config.clear_flag(trt.BuilderFlag.TF32)  # on by default in TensorRT
    serialized = list(dict.fromkeys(str(Path(p).resolve()) for p in plugin_libraries))
    serialized = serialized if options.version_compatible else []
    if serialized:
        config.plugins_to_serialize = serialized  # trtexec's --setPluginsToSerialize
    if profiles:
        profile = builder.create_optimization_profile()
        for name, (lo, opt, hi) in profiles.items():
            profile.set_shape(name, lo, opt, hi)
        if config.add_optimization_profile(profile) < 0:
            raise ConfigError(
                f"TensorRT rejected the optimization profile {format_profiles(profiles)}",
                hint="check 'dims' min/opt/max against the model",
            )
    settings = {
        "workspace_mib": options.workspace_mib,
        "builder_optimization_level": options.builder_optimization_level,
        "hardware_compatibility": options.hardware_compatibility,
        "flags": [n for n, _ in flags],
        "tf32": bool(config.get_flag(trt.BuilderFlag.TF32)),
        "strongly_typed": True,
        "profiling_verbosity": "DETAILED",
        "profiles": format_profiles(profiles),
        "lean_runtime": "embedded" if options.version_compatible else "none",
        "plugins_serialized": [Path(p).name for p in serialized],
    }
    return config, settings


def hardware_level(trt: Any, name: str) -> Any:
    """The ``HardwareCompatibilityLevel`` member for a config value."""
    levels = trt.HardwareCompatibilityLevel
    return {
        "none": levels.NONE,
        "ampere_plus": levels.AMPERE_PLUS,
        "same_compute_capability": levels.SAME_COMPUTE_CAPABILITY,
    }[name]


def builder_flags(trt: Any, options: TensorRTOptions) -> list[tuple[str, Any]]:
    """The builder flags ``options`` ask for, as (name, member) pairs."""
    flag = trt.BuilderFlag
    out = []
    if options.version_compatible:
        # The plan embeds its lean runtime (a few MB more per plan), so a later TensorRT runs it as built.
        # EXCLUDE_LEAN_RUNTIME would need that exact version's lean runtime loaded at run time
        # (runtime.load_runtime), which an engine folder cannot promise: it is not set.
        out.append(("VERSION_COMPATIBLE", flag.VERSION_COMPATIBLE))
    if options.sparse_weights:
        out.append(("SPARSE_WEIGHTS", flag.SPARSE_WEIGHTS))
    if options.refit:
        out.append(("REFIT", flag.REFIT))
    if options.strip_plan:
        out.append(("STRIP_PLAN", flag.STRIP_PLAN))
        if not options.refit:
            # A stripped plan is refit at load from the same ONNX: REFIT_IDENTICAL keeps every optimization
            # (plain REFIT may drop a GEMM bias that the refit API does not expose, per 11.3's notes).
            out.append(("REFIT_IDENTICAL", flag.REFIT_IDENTICAL))
    if options.error_on_timing_cache_miss:
        out.append(("ERROR_ON_TIMING_CACHE_MISS", flag.ERROR_ON_TIMING_CACHE_MISS))
    return out


def format_profiles(profiles: Profiles) -> dict[str, dict[str, list[int]]]:
    """Profiles as plain JSON: name -> {"min": [...], "opt": [...], "max": [...]}."""
    return {n: {"min": list(lo), "opt": list(opt), "max": list(hi)} for n, (lo, opt, hi) in sorted(profiles.items())}


def attach_timing_cache(config: Any, options: TensorRTOptions, existing: bytes | None) -> dict[str, Any]:
    """Give the builder a timing cache seeded with ``existing``; return what happened, for the record.

    A cache from another TensorRT version or GPU is rejected by TensorRT; the build then starts from an
    empty cache, unless ``error_on_timing_cache_miss`` demands a full one.
    """
    if not options.timing_cache:
        if options.error_on_timing_cache_miss:
            raise ConfigError("build.tensorrt.error_on_timing_cache_miss needs build.tensorrt.timing_cache: true")
        return {"used": False}
    if options.error_on_timing_cache_miss and not existing:
        raise ConfigError(
            "build.tensorrt.error_on_timing_cache_miss is set but there is no timing cache from an "
            "earlier build on this TensorRT version and GPU",
            hint="build once with error_on_timing_cache_miss: false to create the cache",
        )
    state: dict[str, Any] = {"used": True, "seeded_bytes": len(existing or b""), "reused": bool(existing)}
    timing_cache = _create_cache(config, existing or b"")
    if timing_cache is None or not config.set_timing_cache(timing_cache, ignore_mismatch=False):
        if options.error_on_timing_cache_miss:
            raise ConfigError(
                "the timing cache was made by another TensorRT version or GPU; TensorRT rejects it",
                hint="rebuild once with error_on_timing_cache_miss: false to refresh it",
            )
        state.update(reused=False, note="the given timing cache was rejected (other TensorRT or GPU); started empty")
        config.set_timing_cache(config.create_timing_cache(b""), ignore_mismatch=False)
    return state


def _create_cache(config: Any, data: bytes) -> Any:
    try:
        return config.create_timing_cache(data)
    except (RuntimeError, TypeError, ValueError):  # corrupt bytes
        return None


def serialize(builder: Any, network: Any, config: Any, options: TensorRTOptions, logger: Any, onnx_path: Path) -> bytes:
    """Run the build; on failure raise an error that says why (memory, timing cache, or TensorRT's own words)."""
    with logger.capture() as records:
        try:
            serialized = builder.build_serialized_network(network, config)
        except RuntimeError as e:  # some failures surface as exceptions from the bindings
            records.append((1, str(e)))
            serialized = None
    plan = bytes(memoryview(serialized)) if serialized is not None else b""
    if plan:
        return plan
    if mentions_memory(records):
        raise EnvironmentProblem(
            f"TensorRT ran out of GPU memory building {onnx_path} with a workspace limit of "
            f"{options.workspace_mib} MiB (build.tensorrt.workspace_mib):\n{last_lines(records)}",
            hint="lower build.tensorrt.workspace_mib if the GPU is shared, free GPU memory, or narrow the "
            "profile max shapes in 'dims'",
        )
    if options.error_on_timing_cache_miss and any("cache" in m.lower() for _, m in records):
        raise ConfigError(
            f"the build missed the timing cache (error_on_timing_cache_miss is set):\n{last_lines(records)}",
            hint="rebuild once with error_on_timing_cache_miss: false",
        )
    raise ModelError(
        f"TensorRT failed to build an engine from {onnx_path}:\n{last_lines(records)}",
        hint="see TensorRT's messages; `deploykit inspect` shows the graph (unsupported precision "
        "mixes and plugin errors are the usual causes)",
    )


def inspect_plan(trt: Any, plan: bytes, version_compatible: bool, logger: Any) -> tuple[str, list[dict[str, Any]]]:
    """Deserialize the new plan (proving it loads) and read its inspector JSON and I/O tensors."""
    runtime = trt.Runtime(logger)
    if version_compatible:
        runtime.engine_host_code_allowed = True
    with logger.capture() as records:
        engine = runtime.deserialize_cuda_engine(plan)
    if engine is None:
        raise InternalError(
            f"TensorRT built a plan it cannot deserialize:\n{last_lines(records)}",
            hint="report this with the TensorRT version and the model",
        )
    inspector = engine.create_engine_inspector()
    text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    return str(text), [io_record(info) for info in engine_io(trt, engine)]
