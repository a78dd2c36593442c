"""What a run returns: per-stage records, the artifacts by role, and the reports they hold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploykit.record.model import RunRecord
from deploykit.store.artifacts import Artifact


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
    record: RunRecord  # every status and verdict of the run: what each view renders
    config: Any = None  # the resolved Config the run used

    @property
    def passed(self) -> bool:
        return self.record.passed

    def report(self, role: str, filename: str) -> dict[str, Any] | None:
        """A JSON file of the artifact in ``role`` (``result.report("model", "precision.json")``), or None."""
        import json

        artifact = self.artifacts.get(role)
        return json.loads(artifact.file(filename).read_text()) if artifact else None

    @property
    def parity(self) -> dict[str, Any] | None:
        """The parity report (``parity.json``, as the record holds it), or None when parity did not run."""
        return self.record.details.get("parity")

    @property
    def gate(self) -> dict[str, Any] | None:
        """The gate report (``gate.json``, as the record holds it), or None when the gate did not run."""
        return self.record.details.get("gate")

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """(stage, status, seconds, digest, note) for tables."""
        return [(r.stage, r.status, f"{r.seconds:.2f}s", r.short_digest, r.error or r.note) for r in self.stages]

    def __repr__(self) -> str:
        width = max((len(r.stage) for r in self.stages), default=5)
        lines = [f"RunResult({self.name!r}, passed={self.passed}, workdir={str(self.workdir)!r})"]
        lines += [f"  {s:<{width}}  {st:<6}  {t:>8}  {d}  {note}".rstrip() for s, st, t, d, note in self.rows()]
        from deploykit.report.terminal import verdict_lines

        return "\n".join(lines + verdict_lines(self.record))

    def _repr_html_(self) -> str:
        """The record's summary (verdicts, stages, lineage, parity and gate tables, platform) for notebooks."""
        from deploykit.report.html import render_fragment

        return render_fragment(self.record, with_plots=False)

    def report_html(self, path: str | Path | None = None, with_plots: bool = True) -> str:
        """The full report with plots as HTML; also written to ``path`` when given.

        In a notebook: ``IPython.display.HTML(result.report_html())``.
        """
        from deploykit.report.html import render_fragment, render_page

        if path is not None:
            Path(path).write_text(render_page(self.record, with_plots), encoding="utf-8")
        return render_fragment(self.record, with_plots)


@dataclass(frozen=True)
class Report:
    """The HTML report of one run record (:func:`deploykit.report`): shown inline in a notebook, the
    standalone page written to ``path`` when one was given."""

    record: RunRecord
    with_plots: bool = True
    path: Path | None = None  # the page written, if any
    note: str = ""  # the other recorded runs a name matched, when it matched several

    @property
    def html(self) -> str:
        """The report as an HTML fragment (what a notebook shows)."""
        from deploykit.report.html import render_fragment

        return render_fragment(self.record, self.with_plots)

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        where = f", written to {str(self.path)!r}" if self.path else ""
        return f"Report({self.record.identity!r}, {self.record.verdict}{where})"
