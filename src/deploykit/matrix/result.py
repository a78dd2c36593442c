"""What a matrix returns: one row per cell, the shared jobs, and how much work was shared or reused."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deploykit.matrix.results import StageRun

# A cell's status, with the exit code it contributes (errors carry their own).
PASSED, FAILED, ERROR, SKIPPED, INTERRUPTED = "passed", "failed", "error", "skipped", "interrupted"


@dataclass(frozen=True)
class JobResult:
    """A shared job (export/ingest, surgery, quantize up to a branch point) or a cell's own job."""

    id: str
    kind: str
    owns: tuple[str, ...]  # the stages this job is the one place to run
    stages: tuple[StageRun, ...]
    exit_code: int
    error: str
    attempts: int
    node: str
    seconds: float
    cells: int  # how many cells build on it
    wall: float = 0.0  # submit to result, as the driver saw it
    queued: float = 0.0  # submit to the worker's start: waiting for resources, scheduling, start-up
    transfer: dict[str, float] = field(default_factory=dict)

    def ran(self) -> int:
        return sum(s.status == "ran" for s in self.stages)

    def summary(self) -> str:
        """``ingest+surgery ran ×4``: what it owns, whether it ran or was reused, how many cells use it."""
        owned = [s for s in self.stages if s.stage in self.owns]
        status = (
            "failed"
            if self.exit_code not in (0, 1)
            else "ran"
            if any(s.status == "ran" for s in owned)
            else "reused"
            if owned
            else "waiting"
        )
        return f"{'+'.join(self.owns)} {status} ×{self.cells}"


@dataclass(frozen=True)
class CellResult:
    id: str  # model/precision/target
    model: str
    precision: str
    target: str
    status: str  # passed | failed (a gate or parity check) | error | skipped | interrupted
    exit_code: int
    error: str = ""
    attempts: int = 0
    node: str = ""
    seconds: float = 0.0  # measured by the worker
    wall: float = 0.0  # submit to result, as the driver saw it (scheduling and transfers included)
    queued: float = 0.0  # submit to the worker's start: waiting for resources, scheduling, start-up
    stages: tuple[StageRun, ...] = ()
    shared: tuple[str, ...] = ()  # ids of the shared jobs it builds on
    parity: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None
    transfer: dict[str, float] = field(default_factory=dict)

    def stage(self, name: str) -> StageRun | None:
        return next((s for s in self.stages if s.stage == name), None)

    @property
    def fps(self) -> float | None:
        return self.gate.get("fps") if self.gate else None


@dataclass(frozen=True)
class MatrixResult:
    name: str
    executor: str
    store: Path
    seconds: float
    cells: tuple[CellResult, ...]
    jobs: tuple[JobResult, ...]  # the shared jobs
    interrupted: bool = False
    nodes: tuple[str, ...] = ()
    report_files: tuple[Path, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.interrupted and all(c.status == PASSED for c in self.cells)

    @property
    def exit_code(self) -> int:
        """0 all passed; 1 only gate/parity failures; else the first other error's code (in cell order)."""
        codes = [c.exit_code for c in self.cells if c.exit_code]
        if self.interrupted:
            return 130
        others = [c for c in codes if c != 1]
        return others[0] if others else (1 if codes else 0)

    def cell(self, model: str, precision: str, target: str) -> CellResult:
        return next(c for c in self.cells if (c.model, c.precision, c.target) == (model, precision, target))

    def work(self) -> dict[str, int]:
        """Stage runs against what the cells used: ``cell_stages`` is what a loop of ``convert`` would
        run from an empty store; ``ran`` what ran here (shared jobs once); ``reused`` the difference."""
        cell_stages = sum(len(c.stages) for c in self.cells)
        shared_ran = sum(j.ran() for j in self.jobs)
        cell_ran = sum(s.status == "ran" for c in self.cells for s in c.stages)
        ran = shared_ran + cell_ran
        return {
            "cell_stages": cell_stages,
            "ran": ran,
            "shared_ran": shared_ran,
            "cell_ran": cell_ran,
            "reused": max(0, cell_stages - ran),
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "deploykit.matrix/1",
            "name": self.name,
            "executor": self.executor,
            "store": str(self.store),
            "seconds": round(self.seconds, 3),
            "passed": self.passed,
            "exit_code": self.exit_code,
            "interrupted": self.interrupted,
            "nodes": list(self.nodes),
            "work": self.work(),
            "cells": [asdict(c) for c in self.cells],
            "jobs": [asdict(j) for j in self.jobs],
        }

    def __repr__(self) -> str:
        from deploykit.matrix.table import text_table

        return text_table(self)

    def _repr_html_(self) -> str:
        from deploykit.matrix.table import html_table

        return html_table(self)
