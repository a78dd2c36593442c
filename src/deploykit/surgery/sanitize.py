"""sanitize: fold constants, turn Constant nodes into initializers, clean up, toposort, infer shapes.

Quantizers only see weights held as initializers; exporters that keep them in ``Constant`` nodes
(paddle2onnx, torch 1.x at opset 11) hide them, so this runs first. Old exporters also list every
initializer among the graph inputs (the IR < 4 convention): a runtime must then treat the weights as
inputs a caller may override, so nothing that depends on them folds. Here the weights leave the
input list and fold like any other constant (as onnxslim and onnx-graphsurgeon do).

Folding reuses onnx-graphsurgeon (ONNX Runtime evaluates the constant subgraphs); duplicate
computations are merged (:mod:`deploykit.surgery.dedupe`); on top of it,
``fold_shapes`` replaces a Reshape's computed target shape (``Shape -> Gather -> Concat``, as traced
``x.view(x.size(0), -1)`` writes it) with a constant (see :mod:`deploykit.surgery.shapefold`).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from deploykit.graph.proto import constants_to_initializers, copy_model, remove_unused, toposort
from deploykit.surgery.base import Pass, PassResult
from deploykit.surgery.dedupe import eliminate_common, merge_equal_constants
from deploykit.surgery.shapefold import fold_reshape_targets, fold_static_shapes


@dataclass(frozen=True)
class SanitizeParams:
    fold_constants: bool = True
    fold_shapes: bool = True  # constant Reshape targets from inferred shapes (see module docstring)
    eliminate_common: bool = True  # merge nodes computing the same thing (repeated shape arithmetic)
    max_iterations: int = 4  # folding can expose more folding; stop when a round changes nothing


class Sanitize(Pass):
    name = "sanitize"
    version = 2  # 2: own shape folding, Reshape targets, merged duplicates, Constant nodes done first
    description = "fold constants, Constant nodes -> initializers, remove dead nodes, toposort, infer shapes"
    Params = SanitizeParams

    def run(self, model: onnx.ModelProto) -> PassResult:
        before = _signature(model)
        out = copy_model(model)
        stats = {
            "initializer_inputs_dropped": _drop_initializer_inputs(out),
            "reshape_targets_folded": 0,
            "duplicates_merged": 0,
        }
        if self.params.fold_constants:
            constants_to_initializers(out.graph)
        fallback = ""
        for _ in range(self.params.max_iterations):
            count = len(out.graph.node)
            shapes = fold_static_shapes(out) if self.params.fold_constants else 0
            try:
                out = _graphsurgeon_round(out, model, self.params.fold_constants)
            except Exception as e:  # types graphsurgeon does not model (optionals, sequences)
                fallback = (
                    f"onnx-graphsurgeon cannot process this graph ({type(e).__name__}: {e}); "
                    "folded Constant nodes and removed dead nodes only"
                )
                _plain_round(out)
            if not self._own_round(out, stats) and len(out.graph.node) == count and not shapes:
                break
        out = onnx.shape_inference.infer_shapes(out)
        modified = _signature(out) != before
        details: dict[str, object] = {**stats, **({"fallback": fallback} if fallback else {})}
        if not modified:
            return PassResult(model, False, "graph already clean: nothing to fold or remove", details)
        return PassResult(out, True, details=details)

    def _own_round(self, model: onnx.ModelProto, stats: dict[str, int]) -> int:
        """Reshape targets and duplicates (what onnx-graphsurgeon does not do); return how many changed."""
        reshapes = fold_reshape_targets(model) if self.params.fold_shapes else 0
        merged = (
            merge_equal_constants(model.graph) + eliminate_common(model.graph) if self.params.eliminate_common else 0
        )
        stats["reshape_targets_folded"] += reshapes
        stats["duplicates_merged"] += merged
        if reshapes or merged:
            remove_unused(model.graph)
        return reshapes + merged


def _graphsurgeon_round(model: onnx.ModelProto, original: onnx.ModelProto, fold: bool) -> onnx.ModelProto:
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(model)
    if fold:
        # Shapes were folded already (fold_static_shapes): graphsurgeon's ignores Shape's start/end.
        # Its If inlining (flatten_subgraphs) loses names a branch reads from outside (ONNX node test
        # affine_grid_2d_expanded), so it stays off.
        graph.fold_constants(fold_shapes=False, flatten_subgraphs=False, error_ok=True)
    graph.cleanup(remove_unused_graph_inputs=False).toposort()
    out = gs.export_onnx(graph, do_type_check=False)
    # onnx-graphsurgeon rebuilds the ModelProto: keep what it does not carry over.
    out.ir_version = original.ir_version  # keep what the runtime accepted
    out.producer_name, out.producer_version = original.producer_name, original.producer_version
    out.doc_string, out.model_version, out.domain = original.doc_string, original.model_version, original.domain
    del out.metadata_props[:]
    out.metadata_props.extend(original.metadata_props)
    return out


def _plain_round(model: onnx.ModelProto) -> None:
    """Constant nodes -> initializers, dead nodes out, toposort: what needs no graphsurgeon."""
    constants_to_initializers(model.graph)
    remove_unused(model.graph)
    toposort(model.graph)


def _drop_initializer_inputs(model: onnx.ModelProto) -> int:
    weights = {t.name for t in model.graph.initializer}
    keep = [vi for vi in model.graph.input if vi.name not in weights]
    dropped = len(model.graph.input) - len(keep)
    if dropped:
        copies = []
        for vi in keep:
            c = onnx.ValueInfoProto()
            c.CopyFrom(vi)
            copies.append(c)
        del model.graph.input[:]
        model.graph.input.extend(copies)
    return dropped


def _signature(model: onnx.ModelProto) -> tuple:
    g = model.graph
    return (
        tuple((n.op_type, tuple(n.input), tuple(n.output)) for n in g.node),
        tuple(sorted(i.name for i in g.initializer)),
        tuple(i.name for i in g.input),
    )
