"""The backend protocol: a loader that builds an engine, a session that runs it.

Parity and gate talk only to :class:`~deploykit.graph.run.Session` (one type for every backend,
feeds validated the same way); each backend module implements :class:`Backend`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from deploykit.graph.run import Session, TensorSpec


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str = ""  # why not, and what to do
    version: str = ""


class Backend(Protocol):
    name: str
    # Whether a built engine depends on this machine's toolchain and device (then they enter the
    # recipe key, and an engine is never reused across them).
    device_specific: bool

    def availability(self) -> Availability: ...

    def build_fingerprint(self, options: Any) -> dict[str, Any]:
        """Toolchain/device facts that change the built engine; they enter the build's recipe key."""
        ...

    def build(self, onnx_path: Path, options: Any, out_dir: Path) -> dict[str, Any]:
        """Write the engine into ``out_dir``; return a summary for the manifest."""
        ...

    def load(self, engine_dir: Path) -> Session: ...


__all__ = ["Availability", "Backend", "Session", "TensorSpec"]
