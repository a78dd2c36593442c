"""sanitize: fold constants, turn Constant nodes into initializers, clean up, toposort, infer shapes.

Quantizers only see weights held as initializers; exporters that keep them in ``Constant`` nodes
(paddle2onnx, old torch) hide them, so this runs first.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from deploykit.surgery.base import Pass, PassResult


@dataclass(frozen=True)
class SanitizeParams:
    fold_constants: bool = True
    max_iterations: int = 4  # folding can expose more folding; stop when a round changes nothing


class Sanitize(Pass):
    name = "sanitize"
    description = "fold constants, Constant nodes -> initializers, remove dead nodes, toposort, infer shapes"
    Params = SanitizeParams

    def run(self, model: onnx.ModelProto) -> PassResult:
        import onnx_graphsurgeon as gs

        before = _signature(model)
        graph = gs.import_onnx(model)
        for _ in range(self.params.max_iterations):
            count = len(graph.nodes)
            if self.params.fold_constants:
                graph.fold_constants(error_ok=True)
            graph.cleanup(remove_unused_graph_inputs=False).toposort()
            if len(graph.nodes) == count:
                break
        out = gs.export_onnx(graph, do_type_check=False)
        out.ir_version = model.ir_version  # keep what the runtime accepted
        out = onnx.shape_inference.infer_shapes(out)
        modified = _signature(out) != before
        return PassResult(out, modified, "" if modified else "graph already clean: nothing to fold or remove")


def _signature(model: onnx.ModelProto) -> tuple:
    g = model.graph
    return (tuple((n.op_type, tuple(n.input), tuple(n.output)) for n in g.node),
            tuple(sorted(i.name for i in g.initializer)))
