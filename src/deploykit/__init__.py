"""deploykit: PyTorch or ONNX -> verified, benchmarked engine.

Heavy libraries (torch, onnxruntime, TensorRT) load only when a stage needs them.
"""

from __future__ import annotations

import types
from typing import Any

__version__ = "0.1.0"
__all__ = ["Config", "DeployKitError", "MatrixResult", "Report", "RunResult", "build", "compare", "convert", "export",
           "gate", "load_config", "matrix", "parity", "profile", "quantize", "report", "save_tensors", "surgery"]

_LAZY = {
    "convert": "deploykit.api", "export": "deploykit.api", "build": "deploykit.api",
    "parity": "deploykit.api", "gate": "deploykit.api", "quantize": "deploykit.api", "profile": "deploykit.api",
    "Config": "deploykit.config",
    "load_config": "deploykit.config", "DeployKitError": "deploykit.errors", "RunResult": "deploykit.result",
    "Report": "deploykit.result", "report": "deploykit.api", "compare": "deploykit.api", "save_tensors": "deploykit.api",
    # Once deploykit.matrix (the package) is imported it replaces this attribute; the package is callable alike.
    "matrix": "deploykit.api", "MatrixResult": "deploykit.matrix.result",
}


class _CallablePackage(types.ModuleType):
    """``deploykit.surgery`` and ``deploykit.report`` are both a subpackage and an API function
    (:func:`deploykit.api.surgery`, :func:`deploykit.api.report`): importing ``deploykit.report.<module>``
    binds the package as the attribute, so the package itself forwards a call to the function, whatever
    was imported first."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from deploykit import api

        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


def _bind_callable_packages() -> None:
    import importlib

    for name in ("surgery", "report"):  # cheap: neither package imports anything heavy at load
        importlib.import_module(f"deploykit.{name}").__class__ = _CallablePackage


_bind_callable_packages()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'deploykit' has no attribute {name!r}")
