"""The one place the matrix reads pipeline results: a RunResult (or the error a run raised) in, plain
records out. Stage summaries are read here (through the stages' typed summaries) and nowhere else in
the package."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from deploykit.errors import DeployKitError, GateFailed
from deploykit.pipeline.result import RunResult


@dataclass(frozen=True)
class StageRun:
    stage: str
    status: str  # ran | reused | failed
    seconds: float
    digest: str = ""
    error: str = ""


@dataclass(frozen=True)
class RunRecord:
    """What one job (a shared prefix or a whole cell) did, as plain data that crosses processes."""

    stages: tuple[StageRun, ...] = ()
    exit_code: int = 0  # 0 passed; 1 a gate or parity check failed; else the error's exit code
    error: str = ""
    parity: dict[str, Any] | None = None  # passed, status, failures
    gate: dict[str, Any] | None = None  # passed, fps, p99_ms, platform, failures
    digests: dict[str, str] = field(default_factory=dict)  # stage -> artifact digest (every stage that has one)
    roles: dict[str, str] = field(default_factory=dict)  # role -> digest, as runs/<name>.json records them

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


def record_of(result: RunResult | None, error: BaseException | None = None) -> RunRecord:
    """The record of a pipeline run that returned ``result`` or raised ``error`` (carrying ``.result``)."""
    if result is None and isinstance(error, DeployKitError):
        result = getattr(error, "result", None)
    stages = tuple(
        StageRun(r.stage, r.status, round(r.seconds, 4), r.artifact.digest if r.artifact else "", r.error)
        for r in (result.stages if result else ())
    )
    digests = {s.stage: s.digest for s in stages if s.digest}
    if error is None:
        code, message = 0, ""
    elif isinstance(error, DeployKitError):
        code, message = error.exit_code, str(error)
    else:
        code, message = 70, f"internal error: {type(error).__name__}: {error}"
    roles = {role: a.digest for role, a in result.artifacts.items()} if result else {}
    return RunRecord(stages, code, message, _parity(result), _gate(result), digests, roles)


def error_record(error: DeployKitError) -> RunRecord:
    """A job that never reached the pipeline (invalid config, unschedulable target, worker lost)."""
    return RunRecord(exit_code=error.exit_code, error=str(error))


def is_gate_failure(code: int) -> bool:
    return code == GateFailed.exit_code


def _parity(result: RunResult | None) -> dict[str, Any] | None:
    from deploykit.stages.parity import ParitySummary

    artifact = result.artifacts.get("parity") if result else None
    if artifact is None:
        return None
    s = ParitySummary.of(artifact)
    return {"passed": s.passed, "status": s.status, "failures": list(s.failures)}


def _gate(result: RunResult | None) -> dict[str, Any] | None:
    from deploykit.stages.gate import GateSummary

    artifact = result.artifacts.get("gate") if result else None
    if artifact is None:
        return None
    s = GateSummary.of(artifact)
    return {"passed": s.passed, "fps": s.fps, "p99_ms": s.p99_ms, "platform": s.platform, "failures": list(s.failures)}


def artifact_digests(result: RunResult | None) -> list[str]:
    """Every artifact a run holds (its stages' outputs), in pipeline order, without repeats."""
    if result is None:
        return []
    out = [r.artifact.digest for r in result.stages if r.artifact]
    out += [a.digest for a in result.artifacts.values()]
    return list(dict.fromkeys(out))
