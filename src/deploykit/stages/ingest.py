"""ingest: an ONNX file named in the config enters the store, validated (checker + shape inference)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deploykit.artifacts import Artifact
from deploykit.hashing import digest_file
from deploykit.onnxguard import check_io
from deploykit.onnxio import check_inputs, check_model, copy_model, external_data_files, load_model
from deploykit.stages.base import Stage, StageContext
from deploykit.stages.export import MODEL


class IngestStage(Stage):
    name = "ingest"
    version = 1
    inputs: dict[str, str] = {}
    output_kind = "onnx"
    output_roles = ("reference", "model")

    def applies(self, ctx: StageContext) -> bool:
        return ctx.config.source.onnx is not None

    def key_config(self, ctx: StageContext) -> Any:

        path = self._path(ctx)
        model = load_model(path, load_external=False)  # parses the file: a truncated one fails here, not later
        check_io(model, path)
        data = {f.name: digest_file(f) for f in external_data_files(model, path)}
        return {"onnx": digest_file(path), "external_data": data, "inputs": ctx.config.inputs, "dims": ctx.config.dims}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> dict[str, Any]:
        path = self._path(ctx)
        model = check_model(load_model(path), path)
        check_inputs(ctx.config, model, path)
        copy_model(path, out / MODEL)
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        return {"source": str(path), "opset": opset, "nodes": len(model.graph.node),
                "producer": f"{model.producer_name} {model.producer_version}".strip()}

    @staticmethod
    def _path(ctx: StageContext) -> Path:
        return ctx.config.path(ctx.config.source.onnx)  # type: ignore[arg-type]
