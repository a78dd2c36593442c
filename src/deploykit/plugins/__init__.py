"""Plugin ops (``plugins/<op>/``) from the Python side: descriptions, torch ops, ONNX export and bodies.

    descriptions    plugins/<op>/<op>.yaml as dataclasses; the shape/dtype/attribute checks they imply
    torch_ops       torch.ops.deploykit.bev_pool_v2 / .pillar_scatter (imports torch; registers export)
    onnx_export     TorchScript symbolics and dynamo translations: one node per op
    onnx_functions  model-local function bodies so ONNX Runtime runs the nodes natively
    quantize        what a quantizer must know: plugin nodes stay FP32 and keep their bodies
    native          the C++ CPU kernels through ctypes
    build           `deploykit plugins build`: CMake, cached by source digest
    library_check   `deploykit plugins check LIB`: exported symbols and creators vs the descriptions
    cli             the `deploykit plugins` commands

Importing this package imports neither torch nor onnx.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["attach_bodies", "description", "descriptions", "export_code_files", "load_torch_ops", "plugin_nodes"]


def export_code_files() -> list[Path]:
    """The modules whose code decides what a plugin op exports to (they enter the export's cache key)."""
    here = Path(__file__).parent
    return [here / "onnx_export.py", here / "onnx_functions.py", here / "torch_ops.py"]


def load_torch_ops() -> Any:
    """Define ``torch.ops.deploykit.*`` and register their ONNX export; returns the module."""
    import importlib

    return importlib.import_module("deploykit.plugins.torch_ops")


def __getattr__(name: str) -> Any:
    import importlib

    homes = {
        "description": "descriptions",
        "descriptions": "descriptions",
        "attach_bodies": "onnx_functions",
        "plugin_nodes": "onnx_functions",
    }
    if name in homes:
        return getattr(importlib.import_module(f"deploykit.plugins.{homes[name]}"), name)
    raise AttributeError(f"module 'deploykit.plugins' has no attribute {name!r}")
