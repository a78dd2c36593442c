"""The backend protocol: a loader that builds an engine, a session that runs it.

Parity and gate talk only to :class:`~deploykit.graph.run.Session` (one type for every backend,
feeds validated the same way); each backend module implements :class:`Backend`. A build gets what
it needs through the protocol (the build options with their plugin libraries, min/opt/max profiles,
the timing cache of an earlier build) and names its side artifact (:class:`SideArtifact`: the timing
cache it writes for the next build), so the build stage knows no backend by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from deploykit.graph.run import Session, TensorSpec

if TYPE_CHECKING:
    from deploykit.config import BuildConfig, Config

Shape = tuple[int, ...]
Profile = tuple[Shape, Shape, Shape]  # (min, opt, max)
Profiles = dict[str, Profile]


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str = ""  # why not, and what to do
    version: str = ""


@dataclass(frozen=True)
class SideArtifact:
    """A file one build writes and the next reads, kept as an artifact of its own (TensorRT's timing
    cache): the build stage looks it up by ``key``, passes it in, and stores what the build wrote."""

    kind: str  # the artifact kind ("tensorrt-timing-cache")
    key: dict[str, Any]  # what the file is valid for: it enters the side artifact's recipe key
    file: str  # the file's name inside the artifact
    summary_key: str  # the build summary's key that names the stored artifact ("timing_cache_artifact")
    version: int = 1


def profiles_from_config(cfg: Config) -> Profiles:
    """Min/opt/max shapes of every configured input, from its shape and the config's ``dims``."""
    return {spec.name: (cfg.shape(spec, "min"), cfg.shape(spec, "opt"), cfg.shape(spec, "max")) for spec in cfg.inputs}


class Backend(Protocol):
    name: str
    # Whether a built engine depends on this machine's toolchain and device (then they enter the
    # recipe key, and an engine is never reused across them).
    device_specific: bool

    def availability(self) -> Availability: ...

    def build_fingerprint(self, options: BuildConfig) -> dict[str, Any]:
        """Toolchain/device facts that change the built engine; they enter the build's recipe key."""
        ...

    def timing_cache(self, options: BuildConfig) -> SideArtifact | None:
        """The timing cache a build with ``options`` reads and writes, or None (none kept)."""
        ...

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
        """Write the engine into ``out_dir``; return a summary for the manifest.

        Args:
            onnx_path: the model (its external data beside it).
            options: the build section of the config (builder settings, plugin libraries).
            out_dir: the engine folder to write.
            profiles: input name -> (min, opt, max) shapes (:func:`profiles_from_config`).
            timing_cache: the timing cache an earlier build wrote (see :meth:`timing_cache`).
            timing_cache_out: where to write the updated timing cache.
        """
        ...

    def load(self, engine_dir: Path) -> Session: ...

    def timing_refusals(self, options: BuildConfig) -> dict[str, str]:
        """Why this backend's sessions cannot be timed a way the gate can ask for (trtexec's flags):
        ``{"cuda_graph": why, "no_data_transfers": why}``; a missing key means it can."""
        ...


__all__ = [
    "Availability",
    "Backend",
    "Profile",
    "Profiles",
    "Session",
    "SideArtifact",
    "TensorSpec",
    "profiles_from_config",
]
