"""Backends by name. A backend whose library is missing is still listed, with the reason."""

from __future__ import annotations

import importlib

from deploykit.backends.base import Availability, Backend, Session, TensorSpec
from deploykit.errors import BackendUnavailable, ConfigError

# name (deploykit.choices.BackendName) -> "module:class"; modules load lazily so a missing library
# never breaks `import deploykit`.
_BACKENDS = {
    "onnxruntime": "deploykit.backends.onnxruntime:OnnxRuntimeBackend",
    "tensorrt": "deploykit.backends.tensorrt:TensorRTBackend",
}


def names() -> list[str]:
    return sorted(_BACKENDS)


def get_backend(name: str, *, require_available: bool = True) -> Backend:
    """The backend called ``name``; raise BackendUnavailable (exit 3) with the reason if it cannot run here."""
    if name not in _BACKENDS:
        raise ConfigError(f"unknown backend {name!r}; known backends: {', '.join(names())}")
    module, cls = _BACKENDS[name].split(":")
    backend = getattr(importlib.import_module(module), cls)()
    if require_available:
        status = backend.availability()
        if not status.available:
            raise BackendUnavailable(
                f"backend {name!r} is unavailable: {status.reason}",
                hint="run `deploykit doctor`, or use --backend onnxruntime",
            )
    return backend


__all__ = ["Availability", "Backend", "Session", "TensorSpec", "get_backend", "names"]
