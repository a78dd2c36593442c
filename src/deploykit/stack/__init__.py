"""Several models on one device: ``deploykit stack stack.yaml`` (and ``deploykit.stack(...)``).

    spec.py     stack.yaml, validated before anything runs (one line naming the entry, exit 2)
    models.py   each entry's engine (built or reused through the store) and session, with its thread
                budget (CPU) or stream priority (GPU)
    pacing.py   the frame arithmetic: releases, the frame after a slow one, dropped frames
    runner.py   the threads: each model alone, then all together; the best-case check of deadlines
    record.py   StackResult: per model, per chain, the checks that decide the exit code
    views.py    terminal lines, JSON, JUnit (model x check), Markdown, HTML (+ the notebook)

``deploykit.stack("stack.yaml")`` runs a stack: this package is callable (below), because
``import deploykit.stack`` puts the package where the lazy ``deploykit.stack`` function would be.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

# Loaded on first use: `deploykit --help` registers the stack command without numpy or the runner.
_LAZY = {
    "run_stack": "deploykit.stack.run",
    "write_reports": "deploykit.stack.run",
    "REPORT_FILES": "deploykit.stack.run",
    "StackResult": "deploykit.stack.record",
    "StackModel": "deploykit.stack.spec",
    "StackSpec": "deploykit.stack.spec",
    "load_stack": "deploykit.stack.spec",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'deploykit.stack' has no attribute {name!r}")


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from deploykit.stack.run import run_stack

        return run_stack(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["REPORT_FILES", "StackModel", "StackResult", "StackSpec", "load_stack", "run_stack", "write_reports"]
