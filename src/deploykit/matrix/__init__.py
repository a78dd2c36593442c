"""Build matrix: models x precisions x targets, in a local process pool or on a Ray cluster.

    spec.py            matrix.yaml, validated before anything runs
    plan.py            cells, and the shared jobs that build device-independent stages once
    driver.py          runs jobs as their inputs are ready; imports results; the ledger
    local_executor.py  a process pool sized to the machine
    ray_executor.py    one Ray task per job with its target's resources (``deploykit[ray]``)
    worker.py          what a pool process or Ray task runs
    bundle.py          a model's files, carried to nodes without the driver's filesystem
    transfer.py        artifacts packed as bytes, verified on arrival
    results.py         the one adapter from pipeline results to plain records
    result.py          MatrixResult; table.py and report.py render it

``deploykit.matrix("matrix.yaml")`` runs a matrix: this package is callable (below), because
``import deploykit.matrix`` puts the package where the lazy ``deploykit.matrix`` function would be.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from deploykit.matrix.result import CellResult, MatrixResult
from deploykit.matrix.runner import run_matrix
from deploykit.matrix.spec import MatrixSpec, TargetSpec, load_matrix


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> MatrixResult:
        return run_matrix(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["CellResult", "MatrixResult", "MatrixSpec", "TargetSpec", "load_matrix", "run_matrix"]
