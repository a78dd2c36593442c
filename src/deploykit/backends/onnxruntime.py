"""ONNX Runtime on the CPU: the embedded default backend that runs everywhere.

The engine is the offline-optimized model plus ``engine.json`` holding the session options it was
optimized for; loading it runs that graph as saved, with no further graph rewrites. Sessions are
made by :mod:`deploykit.graph.run`; this module is the backend's build and load on top of it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from deploykit.backends.base import Availability, Profiles, SideArtifact
from deploykit.config import BuildConfig
from deploykit.errors import BackendUnavailable
from deploykit.graph.run import PROVIDERS, OrtSession, optimize_offline, provider_problem, session_from_engine
from deploykit.store.environment import device_fingerprint, onnxruntime_version

ENGINE_MODEL = "model.onnx"
ENGINE_JSON = "engine.json"


@functools.cache
def provider_status(provider: str) -> Availability:
    """Whether an execution provider really starts here (see :func:`deploykit.graph.run.provider_problem`)."""
    import onnxruntime as ort

    problem = provider_problem(provider)
    return Availability(not problem, problem, "" if problem else ort.__version__)


class OnnxRuntimeBackend:
    name = "onnxruntime"
    device_specific = False  # except at level "all": see build_fingerprint

    def availability(self) -> Availability:
        try:
            import onnxruntime as ort
        except ImportError as e:
            return Availability(False, f"onnxruntime is not importable ({e}); reinstall deploykit")
        return Availability(True, version=ort.__version__)

    def build_fingerprint(self, options: BuildConfig) -> dict[str, Any]:
        status = provider_status(options.provider)
        if not status.available:
            raise BackendUnavailable(
                f"onnxruntime provider {options.provider!r}: {status.reason}",
                hint="use build.provider: cpu, or run `deploykit doctor`",
            )
        env: dict[str, Any] = {"onnxruntime": onnxruntime_version(), "provider": options.provider}
        if options.optimization_level == "all":
            # ORT_ENABLE_ALL writes layout (NCHWc) nodes chosen for this CPU: not portable.
            env["device"] = device_fingerprint()
        return env

    def timing_cache(self, options: BuildConfig) -> SideArtifact | None:
        return None  # ONNX Runtime times nothing at build time

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
        """Optimize ``onnx_path`` offline into ``out_dir`` (profiles and timing caches do not apply:
        the saved graph takes any input shape its dims allow)."""
        import onnxruntime as ort

        # GPU providers rewrite the graph for themselves at load time: save only portable rewrites.
        level = options.optimization_level if options.provider == "cpu" else "basic"
        disabled = optimize_offline(onnx_path, out_dir / ENGINE_MODEL, level=level, threads=options.intra_op_threads)
        engine = {
            "backend": self.name,
            "onnxruntime": ort.__version__,
            "provider": options.provider,
            "optimization_level": level,
            "intra_op_threads": options.intra_op_threads,
            "disabled_optimizers": list(disabled),
        }
        (out_dir / ENGINE_JSON).write_text(json.dumps(engine, indent=2, sort_keys=True))
        return engine

    def timing_refusals(self, options: BuildConfig) -> dict[str, str]:
        """No CUDA graphs here; without a device there are no transfers to leave out (on the CPU)."""
        out = {
            "cuda_graph": f"ONNX Runtime sessions ({options.provider} provider) are not captured into CUDA graphs here"
        }
        if options.provider != "cpu":
            out["no_data_transfers"] = (
                f"the {options.provider} provider copies inputs to the device on every run (no I/O binding here)"
            )
        return out

    def load(self, engine_dir: Path, *, profile_prefix: str | None = None, threads: int | None = None) -> OrtSession:
        """A session for an engine folder; with ``profile_prefix``, ONNX Runtime profiles every run;
        ``threads``: intra-op threads (a thread budget, ``deploykit stack``), else the build's."""
        engine = json.loads((engine_dir / ENGINE_JSON).read_text())
        provider = engine["provider"]
        if provider != "cpu":
            status = provider_status(provider)
            if not status.available:
                raise BackendUnavailable(
                    f"{engine_dir}: engine needs onnxruntime provider {provider!r}: {status.reason}"
                )
        evaluator = (
            f"onnxruntime {engine['onnxruntime']} {PROVIDERS[provider]} "
            f"(optimized offline at {engine['optimization_level']})"
        )
        # The CPU graph is already optimized: run it as saved. GPU providers rewrite it for themselves.
        return session_from_engine(
            engine_dir / ENGINE_MODEL,
            evaluator,
            provider=provider,
            level="disabled" if provider == "cpu" else "all",
            threads=engine["intra_op_threads"] if threads is None else threads,
            profile_prefix=profile_prefix,
        )
