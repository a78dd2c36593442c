"""The stages, in pipeline order: the one list of them (names, reports and summaries come from here).

Quantize slots in between surgery and build, the TensorRT lint between quantize and build; ``applies``
decides per config which stages run
(export for torch sources, ingest for ONNX files, quantize below fp32).
"""

from __future__ import annotations

from deploykit.stages.base import Stage, StageContext, Summary


def default_stages() -> list[Stage]:
    from deploykit.stages.build import BuildStage
    from deploykit.stages.export import ExportStage
    from deploykit.stages.gate import GateStage
    from deploykit.stages.ingest import IngestStage
    from deploykit.stages.lint import LintStage
    from deploykit.stages.parity import ParityStage
    from deploykit.stages.quantize import QuantizeStage
    from deploykit.stages.surgery import SurgeryStage

    return [
        ExportStage(),
        IngestStage(),
        SurgeryStage(),
        QuantizeStage(),
        LintStage(),
        BuildStage(),
        ParityStage(),
        GateStage(),
    ]


def stage_names() -> list[str]:
    """Every stage's name, in pipeline order."""
    return [s.name for s in default_stages()]


def report_files() -> dict[str, tuple[str, ...]]:
    """Stage name -> the report files its artifact holds for CI (stages without reports left out)."""
    return {s.name: s.report_files for s in default_stages() if s.report_files}


__all__ = ["Stage", "StageContext", "Summary", "default_stages", "report_files", "stage_names"]
