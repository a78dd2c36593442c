"""What TensorRT's ONNX parser and builder would refuse, checked without TensorRT or a GPU.

A leaf below the stages: it reads ONNX graphs, its own per-version support tables and plugin
libraries (as data), and needs neither TensorRT nor a backend's runtime.

    tables.py      the per-version support tables (tables/tensorrt-<version>.json, with their sources)
    view.py        the graph as the rules read it (types, shapes, constants, producers and consumers)
    operators.py   operators, their static restrictions and documented types, the opset range
    dtypes.py      DOUBLE, UINT8, quantized types outside Q/DQ, INT64 narrowing (types as written)
    qdq.py         explicit quantization: symmetric, INT8/FP8/INT4/FP4, constant scales, axes, placement
    shapes.py      dynamic inputs against the optimization profiles; shape-tensor inputs
    plugins.py     custom nodes against plugin libraries (read without loading), built-in and removed plugins
    findings.py    Finding, LintReport and the rule codes (RULES)
    run.py         lint_model / lint_file: every rule for every version, merged

``lint_file(path, LintOptions(versions=("11",), plugins=(lib,), profiles=...))`` returns a
:class:`LintReport`; ``report.exit_code`` is 4 when any version has an error. The package imports
nothing at load (``import deploykit`` binds it, see :mod:`deploykit`): the names below load lazily,
and ``deploykit.lint(source, ...)`` is :func:`deploykit.api.lint`.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "RULES": "findings",
    "Finding": "findings",
    "LintReport": "findings",
    "Verdict": "findings",
    "LintOptions": "run",
    "lint_file": "run",
    "lint_model": "run",
    "VERSIONS": "tables",
    "parse_for": "tables",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"deploykit.lint.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'deploykit.lint' has no attribute {name!r}")
