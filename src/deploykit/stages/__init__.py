"""The default stage list. Quantize slots in between surgery and build."""

from __future__ import annotations

from deploykit.stages.base import Stage, StageContext


def default_stages() -> list[Stage]:
    from deploykit.stages.build import BuildStage
    from deploykit.stages.export import ExportStage
    from deploykit.stages.gate import GateStage
    from deploykit.stages.ingest import IngestStage
    from deploykit.stages.parity import ParityStage
    from deploykit.stages.quantize import QuantizeStage
    from deploykit.stages.surgery import SurgeryStage

    return [ExportStage(), IngestStage(), SurgeryStage(), QuantizeStage(), BuildStage(), ParityStage(), GateStage()]


__all__ = ["Stage", "StageContext", "default_stages"]
