"""ingest: an ONNX file named in the config enters the store, validated (checker + shape inference).

Output declarations that inference contradicts (a ``[]`` shape on a Softmax output, a wrong element
type) are repaired to the inferred ones and said once, as a warning of the run: the artifact's
summary lists each repair (``repaired``), and ``model.onnx`` holds the repaired graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.graph.declared import Disagreement
from deploykit.graph.feeds import check_inputs
from deploykit.graph.files import check_model, copy_model_files, external_data_files, load_model, save_model
from deploykit.graph.proto import opset_version
from deploykit.safety.onnxguard import check_io
from deploykit.stages.base import Stage, StageContext, Summary
from deploykit.stages.export import MODEL
from deploykit.store.artifacts import Artifact
from deploykit.store.hashing import digest_file


@dataclass(frozen=True)
class IngestSummary(Summary):
    source: str = ""  # the ONNX file as the config names it, resolved
    opset: int = 0
    nodes: int = 0
    producer: str = ""  # the exporter the file names (producer_name producer_version)
    repaired: list[str] = field(default_factory=list)  # declarations inference contradicted, now inferred


class IngestStage(Stage):
    name = "ingest"
    version = 2  # 2: output declarations that inference contradicts are repaired (summary.repaired)
    inputs: dict[str, str] = {}
    output_kind = "onnx"
    output_roles = ("reference", "model")
    summary_type = IngestSummary
    # where the file sat is provenance, not content: the same bytes from another folder or node (a
    # matrix cell on a worker without the driver's filesystem) are the same artifact
    measured = ("source",)

    def applies(self, ctx: StageContext) -> bool:
        return ctx.config.source.is_onnx

    def key_config(self, ctx: StageContext) -> Any:
        memory = ctx.config.source.memory
        if memory is not None:  # a ModelProto passed as an object: its bytes are its identity
            check_io(memory.object, Path(memory.label))
            return {"onnx": memory.weights, "external_data": {}, "inputs": ctx.config.inputs, "dims": ctx.config.dims}
        path = self._path(ctx)
        model = load_model(path, load_external=False)  # parses the file: a truncated one fails here, not later
        check_io(model, path)
        data = {f.name: digest_file(f) for f in external_data_files(model, path)}
        return {"onnx": digest_file(path), "external_data": data, "inputs": ctx.config.inputs, "dims": ctx.config.dims}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> IngestSummary:
        memory = ctx.config.source.memory
        if memory is not None:
            (out / MODEL).write_bytes(memory.onnx_bytes)  # then read back through the same guards as a file
            model = check_model(load_model(out / MODEL), Path(memory.label))
            check_inputs(ctx.config, model, Path(memory.label))
            return IngestSummary(
                memory.label,
                opset_version(model),
                len(model.graph.node),
                f"{model.producer_name} {model.producer_version}".strip(),
            )
        path = self._path(ctx)
        repairs: list[Disagreement] = []
        model = check_model(load_model(path), path, repairs)
        check_inputs(ctx.config, model, path)
        if repairs:
            save_model(model, out / MODEL)
        else:
            copy_model_files(path, out / MODEL)
        return IngestSummary(
            str(path),
            opset_version(model),
            len(model.graph.node),
            f"{model.producer_name} {model.producer_version}".strip(),
            [r.sentence() for r in repairs],
        )

    @classmethod
    def report(cls, artifact: Artifact) -> dict[str, Any] | None:
        """The repaired declarations as warnings (the run record shows them), or None."""
        repaired = IngestSummary.of(artifact).repaired
        if not repaired:
            return None
        source = artifact.manifest.summary.get("source") or "the model"
        return {
            "warnings": [
                f"{source}: {len(repaired)} declared output shape(s) or type(s) disagree with "
                "shape inference; the inferred ones are used: " + "; ".join(repaired)
            ]
        }

    @staticmethod
    def _path(ctx: StageContext) -> Path:
        return ctx.config.path(ctx.config.source.onnx)  # type: ignore[arg-type]
