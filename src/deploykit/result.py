"""What a run returns: per-stage records, the artifacts by role, and the reports they hold."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploykit.artifacts import Artifact


@dataclass(frozen=True)
class StageRecord:
    stage: str
    status: str  # ran | reused | failed
    seconds: float
    artifact: Artifact | None
    error: str = ""
    note: str = ""  # e.g. why a reused artifact may not be what a fresh run would give

    @property
    def short_digest(self) -> str:
        return self.artifact.digest[:12] if self.artifact else ""


@dataclass(frozen=True)
class RunResult:
    name: str
    stages: list[StageRecord]
    artifacts: dict[str, Artifact]  # role -> artifact (model, reference, engine, parity, gate)
    workdir: Path

    @property
    def passed(self) -> bool:
        return all(r.status != "failed" and not r.error for r in self.stages)

    def report(self, role: str, filename: str) -> dict[str, Any] | None:
        artifact = self.artifacts.get(role)
        return json.loads(artifact.file(filename).read_text()) if artifact else None

    @property
    def parity(self) -> dict[str, Any] | None:
        """The parity report (``parity.json``), or None when parity did not run."""
        from deploykit.stages.parity import ParityStage

        return self.report(ParityStage.output_roles[0], ParityStage.report_files[0])

    @property
    def gate(self) -> dict[str, Any] | None:
        """The gate report (``gate.json``), or None when the gate did not run."""
        from deploykit.stages.gate import GateStage

        return self.report(GateStage.output_roles[0], GateStage.report_files[0])

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """(stage, status, seconds, digest, note) for tables."""
        return [(r.stage, r.status, f"{r.seconds:.2f}s", r.short_digest, r.error or r.note) for r in self.stages]

    def __repr__(self) -> str:
        width = max((len(r.stage) for r in self.stages), default=5)
        lines = [f"RunResult({self.name!r}, passed={self.passed}, workdir={str(self.workdir)!r})"]
        lines += [f"  {s:<{width}}  {st:<6}  {t:>8}  {d}  {note}".rstrip() for s, st, t, d, note in self.rows()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The report's summary (stages, lineage, parity and gate tables, platform) for notebooks."""
        from deploykit.report.collect import from_result
        from deploykit.report.html import render_fragment
        from deploykit.stages import default_stages

        return render_fragment(from_result(self, default_stages()), with_plots=False)

    def report_html(self, path: str | Path | None = None, with_plots: bool = True) -> str:
        """The full report with plots as HTML; also written to ``path`` when given.

        In a notebook: ``IPython.display.HTML(result.report_html())``.
        """
        from deploykit.report.collect import from_result
        from deploykit.report.html import render_fragment, render_page
        from deploykit.stages import default_stages

        data = from_result(self, default_stages())
        if path is not None:
            Path(path).write_text(render_page(data, with_plots), encoding="utf-8")
        return render_fragment(data, with_plots)
