"""ingest: an ONNX file named in the config enters the store, validated (checker + shape inference)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploykit.graph.feeds import check_inputs
from deploykit.graph.files import check_model, copy_model_files, external_data_files, load_model
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


class IngestStage(Stage):
    name = "ingest"
    version = 1
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
            return IngestSummary(memory.label, opset_version(model), len(model.graph.node),
                                 f"{model.producer_name} {model.producer_version}".strip())
        path = self._path(ctx)
        model = check_model(load_model(path), path)
        check_inputs(ctx.config, model, path)
        copy_model_files(path, out / MODEL)
        return IngestSummary(str(path), opset_version(model), len(model.graph.node),
                             f"{model.producer_name} {model.producer_version}".strip())

    @staticmethod
    def _path(ctx: StageContext) -> Path:
        return ctx.config.path(ctx.config.source.onnx)  # type: ignore[arg-type]
