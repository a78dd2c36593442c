"""lint: what TensorRT's parser and builder would refuse in the graph the build gets, before any GPU.

Runs :mod:`deploykit.lint` on the model the build stage would hand to TensorRT (after surgery and
quantization), for every version in ``lint.versions``, with the config's optimization profiles and
plugin libraries. It applies to graphs bound for TensorRT (``build.backend: tensorrt`` or a
``tensorrt``-flavour quantization; ``lint.run: always`` lints any graph) and needs no device: its
artifact (``lint.json``) is portable, so a matrix lints once per model, precision and TensorRT
version, on whatever node. Each version is one check of the run record ("TensorRT 10.13: 0 errors,
2 warnings"); an error fails it (exit 1). Without TensorRT, a TensorRT build then stops with exit 3
as before, having said whether the graph would parse.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.backends.base import profiles_from_config
from deploykit.config import Config
from deploykit.errors import LintFailed
from deploykit.record.model import Check
from deploykit.stages.base import Stage, StageContext, Summary
from deploykit.stages.export import MODEL
from deploykit.store.artifacts import Artifact
from deploykit.store.hashing import digest_file

REPORT = "lint.json"
TENSORRT = "tensorrt"  # the flavour and the backend of graphs bound for TensorRT (deploykit.choices)


def bound_for_tensorrt(config: Config) -> bool:
    """Whether the config's graph goes to TensorRT: its build, or a quantization written for it."""
    q = config.quantize
    return config.build.backend == TENSORRT or (q.enabled and q.flavour(config.build.backend) == TENSORRT)


def applies_to(config: Config) -> bool:
    return config.lint.run == "always" or (config.lint.run == "auto" and bound_for_tensorrt(config))


def plugin_libraries(config: Config) -> tuple[Path, ...] | None:
    """The libraries TensorRT would load; None when the run names none, builds no TensorRT engine and
    was not asked to lint (``lint.run: always``): a missing creator is then a warning."""
    paths = tuple(config.path(p) for p in config.build.plugins)
    return paths if paths or config.build.backend == TENSORRT or config.lint.run == "always" else None


@dataclass(frozen=True)
class LintVerdict(Summary):
    version: str = ""
    errors: int = 0
    warnings: int = 0
    line: str = ""  # "TensorRT 10.13: 0 errors, 2 warnings"
    first_error: str = ""  # the first error's line, for the failure message


@dataclass(frozen=True)
class LintSummary(Summary):
    versions: list[LintVerdict] = field(default_factory=list)
    findings: int = 0
    tables: str = ""  # digest of the support tables the lint read

    @classmethod
    def from_dict(cls, data: Any) -> LintSummary:
        return cls(
            [LintVerdict.from_dict(v) for v in data.get("versions", ())],
            data.get("findings", 0),
            data.get("tables", ""),
        )

    def failure(self) -> str:
        failed = [v for v in self.versions if v.errors]
        return "; ".join(f"{v.line} (first: {v.first_error})" for v in failed)


class LintStage(Stage):
    name = "lint"
    version = 1
    inputs = {"model": "onnx"}
    output_kind = "lint-report"
    output_roles = ("lint",)
    summary_type = LintSummary
    report_files = (REPORT,)

    def applies(self, ctx: StageContext) -> bool:
        return applies_to(ctx.config)

    def key_config(self, ctx: StageContext) -> Any:
        from deploykit.lint.tables import digest

        c = ctx.config
        libraries = plugin_libraries(c)
        return {
            "lint": c.lint,
            "inputs": c.inputs,
            "dims": c.dims,
            "tables": digest(),
            "plugins": None if libraries is None else [digest_file(p) if p.is_file() else str(p) for p in libraries],
        }

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> LintSummary:
        from deploykit.lint import LintOptions, lint_file
        from deploykit.lint.tables import digest
        from deploykit.store.jsonio import dumps

        c = ctx.config
        options = LintOptions(
            versions=tuple(c.lint.versions), plugins=plugin_libraries(c), profiles=profiles_from_config(c)
        )
        report = lint_file(inputs["model"].file(MODEL), options)
        (out / REPORT).write_text(dumps(report.to_dict()))
        verdicts = []
        for v in report.verdicts():
            first = next((f.line() for f in report.errors if v.version in f.versions), "")
            verdicts.append(LintVerdict(v.version, v.errors, v.warnings, v.line(), first[:300]))
        return LintSummary(verdicts, len(report.findings), digest())

    @classmethod
    def checks(cls, artifact: Artifact) -> list[Check]:
        """One per TensorRT version: passed when the lint found no error for it."""
        return [
            Check(
                "lint",
                f"TensorRT {v.version}",
                "pass" if not v.errors else "fail",
                not v.errors,
                metric="errors",
                message=v.line,
            )
            for v in LintSummary.of(artifact).versions
        ]

    @classmethod
    def report(cls, artifact: Artifact) -> dict[str, Any] | None:
        return json.loads(artifact.file(REPORT).read_text())

    def verdict(self, artifact: Artifact) -> None:
        s = LintSummary.of(artifact)
        if s.failure():
            raise LintFailed(
                f"TensorRT lint: {s.failure()}",
                hint=f"every finding with its fix is in {artifact.file(REPORT)} (`deploykit lint` prints them)",
            )
