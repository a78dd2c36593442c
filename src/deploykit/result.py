"""What a run returns: per-stage records, the artifacts by role, and the reports they hold."""

from __future__ import annotations

import html
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
        return self.report("parity", "parity.json")

    @property
    def gate(self) -> dict[str, Any] | None:
        return self.report("gate", "gate.json")

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """(stage, status, seconds, digest, note) for tables."""
        return [(r.stage, r.status, f"{r.seconds:.2f}s", r.short_digest, r.error) for r in self.stages]

    def __repr__(self) -> str:
        width = max((len(r.stage) for r in self.stages), default=5)
        lines = [f"RunResult({self.name!r}, passed={self.passed}, workdir={str(self.workdir)!r})"]
        lines += [f"  {s:<{width}}  {st:<6}  {t:>8}  {d}  {note}".rstrip() for s, st, t, d, note in self.rows()]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        colour = {"ran": "#1a7f37", "reused": "#0969da", "failed": "#cf222e"}
        rows = "".join(
            f"<tr><td>{html.escape(s)}</td><td style='color:{colour.get(st, '#000')}'>{st}</td><td>{t}</td>"
            f"<td><code>{d}</code></td><td>{html.escape(n)}</td></tr>" for s, st, t, d, n in self.rows())
        gate = self.gate
        extra = (f"<p>FPS {gate['fps']:.1f} at batch {gate['batch']}, p99 {gate['latency']['p99_ms']:.2f} ms "
                 f"on <code>{html.escape(gate['platform'])}</code></p>") if gate else ""
        verdict = "<b style='color:#1a7f37'>passed</b>" if self.passed else "<b style='color:#cf222e'>failed</b>"
        return (f"<div><h4>deploykit run <code>{html.escape(self.name)}</code>: {verdict}</h4>"
                "<table><tr><th>stage</th><th>status</th><th>time</th><th>artifact</th><th>note</th></tr>"
                f"{rows}</table>{extra}</div>")
