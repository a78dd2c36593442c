"""convert_opset: move the model to another ONNX opset with ONNX's version converter.

TensorRT's parser and the quantizers support a range of opsets; old exports (opset 9-11) often need
lifting, and a few runtimes need lowering. The runner checks the converted graph's outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from deploykit.errors import first_line
from deploykit.graph.proto import opset_version
from deploykit.surgery.base import Pass, PassConfigError, PassError, PassResult


@dataclass(frozen=True)
class ConvertOpsetParams:
    opset: int = 17  # the target ONNX (ai.onnx) opset


class ConvertOpset(Pass):
    name = "convert_opset"
    description = "convert the model to another ai.onnx opset (ONNX version converter)"
    Params = ConvertOpsetParams
    shorthand = "opset"

    def requires(self, model: onnx.ModelProto) -> None:
        newest = onnx.defs.onnx_opset_version()
        if not 7 <= self.params.opset <= newest:
            raise PassConfigError(
                f"convert_opset: opset {self.params.opset} is outside what onnx "
                f"{onnx.__version__} converts (7..{newest})"
            )
        if not opset_version(model):
            raise PassError("convert_opset: the model imports no ai.onnx opset", hint="re-export the model")

    def run(self, model: onnx.ModelProto) -> PassResult:
        from onnx import helper, version_converter

        current = opset_version(model)
        if current == self.params.opset:
            return PassResult(model, False, f"the model already uses opset {current}")
        try:
            out = version_converter.convert_version(model, self.params.opset)
        except Exception as e:  # the converter raises RuntimeError/ValueError naming the op it lacks
            text = first_line(e)
            raise PassError(
                f"ONNX's version converter cannot take this model from opset {current} to {self.params.opset}: {text}",
                hint="try an opset closer to the model's, or re-export at the target opset",
            ) from e
        needed = helper.find_min_ir_version_for([helper.make_opsetid("", self.params.opset)], True)
        out.ir_version = max(model.ir_version, needed)
        return PassResult(out, True, details={"from": current, "to": self.params.opset})
