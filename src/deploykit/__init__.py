"""deploykit: PyTorch or ONNX -> verified, benchmarked engine.

Heavy libraries (torch, onnxruntime, TensorRT) load only when a stage needs them.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Config", "DeployKitError", "RunResult", "build", "convert", "export", "gate", "load_config",
           "parity", "profile", "quantize", "surgery"]

_LAZY = {
    "convert": "deploykit.api", "export": "deploykit.api", "surgery": "deploykit.api", "build": "deploykit.api",
    "parity": "deploykit.api", "gate": "deploykit.api", "quantize": "deploykit.api", "profile": "deploykit.api",
    "Config": "deploykit.config",
    "load_config": "deploykit.config", "DeployKitError": "deploykit.errors", "RunResult": "deploykit.result",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'deploykit' has no attribute {name!r}")
