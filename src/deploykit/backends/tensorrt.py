"""The TensorRT backend: a strongly typed engine built from the ONNX graph, run through cuda-python.

Supports TensorRT 10.12+ and 11.x. Precision is whatever the ONNX says (casts, Q/DQ); the builder
only gets the settings in ``TensorRTOptions``. The work lives in small modules::

    trt_compat    import TensorRT, supported versions, plan compatibility (TensorRT version, GPU)
    trt_cuda      driver/GPU probe (ctypes, no cuda-python needed) and cuda-python helpers
    profiles      min/opt/max profiles from the config, validated before TensorRT sees them
    trt_plugins   plugin libraries: load, check what they register
    trt_build     parse -> configure -> build -> inspect (takes the tensorrt module as an argument)
    trt_files     the engine folder: write it, read it back with checks
    trt_session   the runtime Session (device buffers, stream, CUDA graphs)
    trt_inspect   engine-inspector JSON, both layouts
    trt_logger    the one TensorRT logger, capturing messages for error reports

Polygraphy is not used: the TensorRT surface here is a few dozen names that exist unchanged in
10.12+ and 11.x (one version check: the strongly typed creation flag), and direct calls keep the
errors ours. ``import deploykit.backends.tensorrt`` never imports tensorrt or cuda-python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deploykit.backends import trt_compat, trt_cuda
from deploykit.backends.base import Availability, Profiles, SideArtifact
from deploykit.backends.profiles import onnx_input_shapes, validate_profiles
from deploykit.config import BuildConfig
from deploykit.errors import BackendUnavailable, ConfigError
from deploykit.store.hashing import digest_file

TIMING_CACHE = "timing.cache"
__all__ = ["TensorRTBackend", "build_fingerprint_from", "current_environment", "timing_cache_key"]


def current_environment(trt: Any, probe: trt_cuda.DriverProbe | None = None) -> dict[str, Any]:
    """TensorRT, CUDA and GPU facts of this machine (GPU 0, as CUDA orders them)."""
    probe = probe or trt_cuda.probe_driver()
    if probe.problem:
        raise BackendUnavailable(f"backend 'tensorrt' is unavailable: {probe.problem}", hint="run `deploykit doctor`")
    cudart, _ = trt_cuda.import_cudart()
    gpu = probe.gpus[0]
    # Two CUDA versions, recorded apart: TensorRT's (its wheel flavour; what the plan is built with) and
    # cuda-python's runtime (only copies memory and drives streams; it does not change the plan).
    return {
        "tensorrt": str(trt.__version__),
        "tensorrt_cuda": trt_compat.tensorrt_cuda_flavour(),
        "cuda_python_runtime": trt_cuda.runtime_version(cudart) if cudart is not None else "",
        "cuda_driver": probe.driver_version,
        "gpu": gpu.name,
        "compute_capability": gpu.compute_capability,
    }


def build_fingerprint_from(env: dict[str, Any], plugin_digests: dict[str, str]) -> dict[str, Any]:
    """The toolchain/device facts that change a plan: they enter the build's recipe key.

    Left out on purpose: the driver version (a driver update does not invalidate a plan) and
    cuda-python's runtime version (it moves memory; TensorRT's own CUDA, ``tensorrt_cuda``, builds).

    Args:
        env: :func:`current_environment`'s result.
        plugin_digests: plugin library file name -> sha256.
    """
    return {
        "backend": "tensorrt",
        "tensorrt": env["tensorrt"],
        "tensorrt_cuda": env.get("tensorrt_cuda", ""),
        "gpu": env["gpu"],
        "compute_capability": env["compute_capability"],
        "plugins": dict(sorted(plugin_digests.items())),
    }


def timing_cache_key(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """What a timing cache is valid for: TensorRT rejects a cache from another version or GPU architecture.

    Args:
        fingerprint: :meth:`TensorRTBackend.build_fingerprint`'s result (or :func:`current_environment`'s).
    """
    return {
        "kind": "tensorrt-timing-cache",
        "tensorrt": fingerprint["tensorrt"],
        "compute_capability": fingerprint["compute_capability"],
    }


def plugin_digests(paths: tuple[str, ...]) -> dict[str, str]:
    """Plugin library file name -> sha256; a missing library is a ConfigError."""
    from deploykit.backends.trt_plugins import check_paths

    return {p.name: digest_file(p) for p in check_paths(paths)}


class TensorRTBackend:
    """Builds TensorRT plans and loads them into :class:`~deploykit.backends.trt_session.TensorRTSession`."""

    name = "tensorrt"
    device_specific = True

    def availability(self) -> Availability:
        """Available, or the precise reason: TensorRT missing or too old, no CUDA driver or GPU, no cuda-python,
        or a driver too old for the CUDA major of the TensorRT wheel or of cuda-python."""
        trt, problem = trt_compat.import_tensorrt()
        if trt is None:
            return Availability(False, problem)
        version = str(trt.__version__)
        too_old = trt_compat.version_problem(version)
        if too_old:
            return Availability(False, too_old, version)
        probe = trt_cuda.probe_driver()
        if probe.problem:
            return Availability(False, probe.problem, version)
        _, cuda_problem = trt_cuda.import_cudart()
        if cuda_problem:
            return Availability(False, cuda_problem, version)
        mismatch = trt_compat.cuda_version_problem(
            probe.driver_version, trt_compat.tensorrt_cuda_flavour(), trt_compat.cuda_python_version()
        )
        if mismatch:
            return Availability(False, mismatch, version)
        return Availability(True, version=version)

    def _require(self) -> Any:
        status = self.availability()
        if not status.available:
            raise BackendUnavailable(
                f"backend 'tensorrt' is unavailable: {status.reason}",
                hint="run `deploykit doctor`, or use --backend onnxruntime",
            )
        trt, _ = trt_compat.import_tensorrt()
        return trt

    def build_fingerprint(self, options: BuildConfig) -> dict[str, Any]:
        """TensorRT/CUDA versions, GPU name and compute capability, plugin library digests."""
        trt = self._require()
        return build_fingerprint_from(current_environment(trt), plugin_digests(options.plugins))

    def timing_cache(self, options: BuildConfig) -> SideArtifact | None:
        """The timing cache, kept as its own artifact per TensorRT version and compute capability
        (what TensorRT checks), so a rebuild after a graph change reuses tactic timings."""
        if not options.tensorrt.timing_cache:
            return None
        return SideArtifact(
            "tensorrt-timing-cache",
            timing_cache_key(self.build_fingerprint(options)),
            TIMING_CACHE,
            "timing_cache_artifact",
        )

    def build(
        self,
        onnx_path: Path,
        options: BuildConfig,
        out_dir: Path,
        *,
        profiles: Profiles | None = None,
        timing_cache: bytes | None = None,
        timing_cache_out: Path | None = None,
    ) -> dict[str, Any]:
        """Build a plan from ``onnx_path`` into ``out_dir``; return ``engine.json``'s content plus timings.

        Args:
            onnx_path: the model (its external data beside it).
            options: the build section of the config; ``options.tensorrt`` holds the builder settings.
            out_dir: the folder to write (see :mod:`trt_files` for the layout).
            profiles: input name -> (min, opt, max), e.g. ``profiles_from_config(cfg)``; required when
                the model has dynamic dims.
            timing_cache: a serialized timing cache from an earlier build with the same TensorRT and GPU.
            timing_cache_out: where to write the updated timing cache (kept out of ``out_dir`` so it can
                be stored as its own artifact).
        """
        from deploykit.backends import trt_build, trt_files, trt_plugins
        from deploykit.backends.trt_logger import get_logger

        trt = self._require()  # exit 3 at once on a machine that cannot build
        onnx_path = Path(onnx_path)
        library_paths = trt_plugins.check_paths(options.plugins)
        # Checked before any TensorRT call: TensorRT ignores a misspelled name and reports min > max mid-build.
        checked = validate_profiles(profiles or {}, onnx_input_shapes(onnx_path), str(onnx_path))
        env = current_environment(trt)
        _check_hardware_level(options.tensorrt.hardware_compatibility, env)
        logger = get_logger(trt)
        trt_plugins.init_builtin_plugins(trt, logger)
        libraries = trt_plugins.load_libraries(trt, library_paths)
        trt_plugins.check_plugin_nodes(trt, trt_plugins.plugin_nodes(onnx_path), libraries)
        built = trt_build.build_plan(
            trt, onnx_path, options.tensorrt, checked, logger, timing_cache=timing_cache, plugin_libraries=library_paths
        )
        meta = _engine_meta(env, options, onnx_path, built)
        record = trt_files.write_engine_dir(Path(out_dir), built, meta, libraries)
        if timing_cache_out is not None and built.timing_cache is not None:
            Path(timing_cache_out).write_bytes(built.timing_cache)
        return {**record, "build_seconds": round(built.build_seconds, 3)}

    def timing_refusals(self, options: BuildConfig) -> dict[str, str]:
        """A TensorRT session replays CUDA graphs and can time the engine alone: nothing is refused."""
        return {}

    def load(self, engine_dir: Path, *, refit_onnx: Path | None = None, stream_priority: int | None = None) -> Any:
        """Load an engine folder into a session, after checking it can run on this machine.

        Args:
            engine_dir: a folder written by :meth:`build`.
            refit_onnx: for a weight-stripped plan, the ONNX it was built from (default: the recorded path).
            stream_priority: the CUDA stream's priority (lower is more urgent; ``deploykit stack``);
                None: the default priority.

        Raises:
            EngineIncompatible: built for another TensorRT version or GPU compute capability.
            ArtifactCorrupt: the plan is truncated or changed, or a plugin copy is missing.
        """
        from deploykit.backends import trt_files, trt_plugins
        from deploykit.backends.trt_logger import get_logger
        from deploykit.backends.trt_session import TensorRTSession

        engine_dir = Path(engine_dir)
        trt = self._require()
        meta = trt_files.read_engine_meta(engine_dir)
        trt_compat.check_engine_compatible(meta, current_environment(trt), str(engine_dir))
        plan = trt_files.read_plan(engine_dir, meta)
        logger = get_logger(trt)
        trt_plugins.init_builtin_plugins(trt, logger)
        libraries = trt_files.plugin_paths(engine_dir, meta)  # checked against their digests either way
        if not (meta.get("settings") or {}).get("plugins_serialized"):
            # A version-compatible plan carries its plugins and runs them in its own runtime: loading the
            # copies into this TensorRT's registry would be wrong (they may be built for the older major).
            trt_plugins.load_libraries(trt, libraries)
        runtime, engine = trt_files.deserialize(trt, plan, meta, logger, engine_dir)
        if meta.get("stripped"):
            trt_files.refit_stripped(trt, engine, meta, logger, refit_onnx)
        return TensorRTSession(trt, engine, meta, logger, runtime=runtime, stream_priority=stream_priority)


def _check_hardware_level(level: str, env: dict[str, Any]) -> None:
    if level == "ampere_plus" and trt_compat.parse_compute_capability(env["compute_capability"]) < (8, 0):
        raise ConfigError(
            f"build.tensorrt.hardware_compatibility 'ampere_plus' needs an Ampere or newer GPU; this "
            f"is {env['gpu']} (compute capability {env['compute_capability']})",
            hint="use hardware_compatibility: none on this GPU",
        )


def _engine_meta(env: dict[str, Any], options: BuildConfig, onnx_path: Path, built: Any) -> dict[str, Any]:
    """What ``engine.json`` records besides the plan itself."""
    from dataclasses import asdict

    trt_options = options.tensorrt
    meta: dict[str, Any] = {
        **env,
        "options": asdict(trt_options),
        "version_compatible": trt_options.version_compatible,
        "hardware_compatibility": trt_options.hardware_compatibility,
        "cuda_graphs": trt_options.cuda_graphs,
        "stripped": trt_options.strip_plan,
        "timing_cache": built.timing_cache_state,
        "onnx_dims": _onnx_dims(onnx_path),
    }
    if trt_options.strip_plan:
        meta["refit_source"] = {"onnx": str(onnx_path.resolve()), "sha256": digest_file(onnx_path)}
    return meta


def _onnx_dims(onnx_path: Path) -> dict[str, list[int | str]]:
    """Symbolic dims of the ONNX graph's inputs and outputs, so sessions report ``batch`` rather than -1."""
    from deploykit.graph.files import load_model
    from deploykit.graph.proto import graph_input_shapes

    model = load_model(onnx_path, load_external=False)
    out: dict[str, list[int | str]] = dict(graph_input_shapes(model))
    for vi in model.graph.output:
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
    return out
