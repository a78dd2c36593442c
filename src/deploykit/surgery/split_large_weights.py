"""split_large_weights: move large weights to an external data file when the model nears 2 GB.

Protobuf cannot serialize a message of 2 GB or more, so such a model must keep its weights beside it
(``model.onnx`` + ``model.onnx.data``). This pass marks every initializer of at least
``tensor_threshold_bytes`` for external storage once the model reaches ``model_limit_bytes``; the
data stays in memory until the model is saved, which then writes both files. ``model_limit_bytes: 0``
splits any model (for a runtime that memory-maps weights, or to test the path with small models).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from deploykit.graph.proto import copy_model
from deploykit.surgery.base import Pass, PassConfigError, PassResult

PROTOBUF_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class SplitLargeWeightsParams:
    model_limit_bytes: int = PROTOBUF_LIMIT  # split only models at least this large
    tensor_threshold_bytes: int = 1024  # weights at least this large move to the data file
    location: str = "model.onnx.data"  # the data file, beside the model


class SplitLargeWeights(Pass):
    name = "split_large_weights"
    description = "store weights in an external data file when the model reaches 2 GB (threshold configurable)"
    Params = SplitLargeWeightsParams

    def requires(self, model: onnx.ModelProto) -> None:
        loc = self.params.location
        if not loc or "/" in loc or "\\" in loc or loc in (".", ".."):
            raise PassConfigError(
                f"split_large_weights: location {loc!r} must be a plain file name (it lies beside the model)"
            )
        if self.params.model_limit_bytes < 0 or self.params.tensor_threshold_bytes < 0:
            raise PassConfigError("split_large_weights: thresholds must be >= 0")

    def run(self, model: onnx.ModelProto) -> PassResult:
        from onnx.external_data_helper import convert_model_to_external_data, uses_external_data

        size = model.ByteSize()
        if size < self.params.model_limit_bytes:
            return PassResult(
                model,
                False,
                f"the model is {size / 2**20:.1f} MiB, under the {self.params.model_limit_bytes / 2**20:.1f} MiB limit",
            )
        out = copy_model(model)
        convert_model_to_external_data(
            out,
            all_tensors_to_one_file=True,
            location=self.params.location,
            size_threshold=self.params.tensor_threshold_bytes,
            convert_attribute=False,
        )
        moved = [t.name for t in out.graph.initializer if uses_external_data(t)]
        if not moved:
            return PassResult(model, False, f"no weight reaches {self.params.tensor_threshold_bytes} bytes")
        nbytes = sum(len(t.raw_data) for t in out.graph.initializer if uses_external_data(t))
        return PassResult(out, True, details={"tensors": len(moved), "bytes": nbytes, "location": self.params.location})
