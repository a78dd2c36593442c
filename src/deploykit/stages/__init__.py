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


STAGE_NAMES = ("export", "ingest", "surgery", "quantize", "build", "parity", "gate")

__all__ = ["STAGE_NAMES", "Stage", "StageContext", "default_stages"]
