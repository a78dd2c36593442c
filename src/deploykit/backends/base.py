"""The backend protocol: a loader that builds an engine, a session that runs it.

Parity and gate talk only to :class:`Session`; each backend module implements :class:`Backend`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str = ""  # why not, and what to do
    version: str = ""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    shape: tuple[int | str, ...]


class Session(Protocol):
    """A loaded engine, ready to run."""

    evaluator: str  # what computes the numbers, for reports ("onnxruntime 1.24 CPUExecutionProvider")

    @property
    def inputs(self) -> list[TensorSpec]: ...

    @property
    def outputs(self) -> list[TensorSpec]: ...

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run once; outputs by name, as host numpy arrays."""
        ...

    def timed_runner(self, feeds: dict[str, np.ndarray]) -> Any:
        """A zero-argument callable that runs one inference on ``feeds`` with the least overhead."""
        ...


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
