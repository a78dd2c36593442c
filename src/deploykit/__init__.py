"""deploykit: PyTorch or ONNX -> verified, benchmarked engine.

Heavy libraries (torch, onnxruntime, TensorRT) load only when a stage needs them.
"""

from __future__ import annotations

import types
from typing import Any

__version__ = "0.1.0"
__all__ = [
    "Config",
    "DeployKitError",
    "MatrixResult",
    "Report",
    "RunResult",
    "build",
    "compare",
    "convert",
    "export",
    "gate",
    "lint",
    "load_config",
    "matrix",
    "parity",
    "profile",
    "quantize",
    "report",
    "save_tensors",
    "stack",
    "surgery",
    "tracing",
]

_LAZY = {
    "convert": "deploykit.api",
    "export": "deploykit.api",
    "build": "deploykit.api",
    "parity": "deploykit.api",
    "gate": "deploykit.api",
    "quantize": "deploykit.api",
    "profile": "deploykit.api",
    "Config": "deploykit.config",
    "load_config": "deploykit.config",
    "DeployKitError": "deploykit.errors",
    "RunResult": "deploykit.pipeline.result",
    "Report": "deploykit.pipeline.result",
    "report": "deploykit.api",
    "compare": "deploykit.api",
    "save_tensors": "deploykit.api",
    # Once deploykit.matrix (the package) is imported it replaces this attribute; the package is callable alike.
    "matrix": "deploykit.api",
    "MatrixResult": "deploykit.matrix.result",
    # a callable package (deploykit.stack(...)) and a module, each its own attribute
    "stack": "deploykit.stack",
    "StackResult": "deploykit.stack",
    "tracing": "deploykit.tracing",
}


class _CallablePackage(types.ModuleType):
    """``deploykit.surgery``, ``deploykit.lint`` and ``deploykit.report`` are each both a subpackage and an
    API function (:func:`deploykit.api.surgery`, ...): importing ``deploykit.<package>.<module>``
    binds the package as the attribute, so the package itself forwards a call to the function, whatever
    was imported first."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from deploykit import api

        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


def _bind_callable_packages() -> None:
    import importlib

    for name in ("surgery", "lint", "report"):  # cheap: none of them imports anything heavy at load
        importlib.import_module(f"deploykit.{name}").__class__ = _CallablePackage


_bind_callable_packages()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(_LAZY[name])
        return module if module.__name__ == f"{__name__}.{name}" else getattr(module, name)
    raise AttributeError(f"module 'deploykit' has no attribute {name!r}")
