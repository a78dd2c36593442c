"""A graph cut into consecutive parts, each a model of its own, that compute the whole run in turn.

The screening graph (:mod:`deploykit.quant.screen`) runs once per patch, and a patch that changes
nothing before some node computes up to there what the run with no change computed: from the last
cut before its first change it can start on that run's values instead of computing them again.

A cut is made only where every tensor crossing it is read after it by nodes the caller names (the
screen's If switches), which ONNX Runtime fuses with nothing: the parts then keep the whole graph's
fusions and compute its outputs bit for bit (ViT-S's screening graph in 16 parts, 12 random patches).
A cut between a residual Add and the LayerNorm it feeds would not (SkipLayerNormalization).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deploykit.graph.proto import node_reads

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class Part:
    """One part: its model, where it starts in the whole graph's node order, the tensors it takes
    (the graph's inputs and what earlier parts make) and those it makes for later parts or as the
    graph's outputs."""

    model: onnx.ModelProto
    start: int
    reads: tuple[str, ...]
    makes: tuple[str, ...]


def split(model: onnx.ModelProto, parts: int, reader_ok: Callable[[onnx.NodeProto], bool]) -> list[Part]:
    """``model`` (its nodes in topological order, as ONNX requires) in at most ``parts`` parts of about
    equal node counts, cut only where every tensor crossing the cut is read after it by nodes
    ``reader_ok`` accepts and has a declared type; the model as one part where no cut qualifies."""
    nodes = list(model.graph.node)
    cuts = _eligible(model, nodes, reader_ok)
    wanted = {min(cuts, key=lambda c: (abs(c - k * len(nodes) / parts), c)) for k in range(1, parts)} if cuts else set()
    bounds = [0, *sorted(wanted), len(nodes)]
    reads = [node_reads(n) for n in nodes]
    outputs = [o.name for o in model.graph.output]
    inits = {t.name: t for t in model.graph.initializer}
    declared = _declared(model)
    out = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        made = {o for n in nodes[a:b] for o in n.output}
        taken = list(dict.fromkeys(t for k in range(a, b) for t in reads[k] if t not in made))
        later = {t for k in range(b, len(nodes)) for t in reads[k]} | set(outputs)
        makes = [o for n in nodes[a:b] for o in n.output if o in later]
        takes = [t for t in taken if t not in inits]
        out.append(
            Part(_part_model(model, nodes[a:b], takes, makes, taken, inits, declared), a, tuple(takes), tuple(makes))
        )
    return out


def _eligible(
    model: onnx.ModelProto, nodes: list[onnx.NodeProto], reader_ok: Callable[[onnx.NodeProto], bool]
) -> list[int]:
    """Node indices a cut may go before (see :func:`split`)."""
    inits = {t.name for t in model.graph.initializer}
    inputs = {i.name for i in model.graph.input}
    declared = _declared(model)
    readers: dict[str, list[int]] = {}
    for k, node in enumerate(nodes):
        for t in dict.fromkeys(node_reads(node)):
            readers.setdefault(t, []).append(k)
    last = {t: ks[-1] for t, ks in readers.items()}
    live: set[str] = set()  # activations made before the cut and read after it
    found = []
    for c in range(1, len(nodes)):
        live = {t for t in live if last.get(t, -1) >= c}
        live |= {o for o in nodes[c - 1].output if last.get(o, -1) >= c and o not in inits and o not in inputs}
        if all(t in declared and all(reader_ok(nodes[k]) for k in readers[t] if k >= c) for t in live):
            found.append(c)
    return found


def _declared(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    g = model.graph
    return {v.name: v for v in (*g.value_info, *g.input, *g.output) if v.type.HasField("tensor_type")}


def _part_model(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    takes: list[str],
    makes: list[str],
    taken: list[str],
    inits: dict[str, onnx.TensorProto],
    declared: dict[str, onnx.ValueInfoProto],
) -> onnx.ModelProto:
    import onnx

    part = onnx.ModelProto(ir_version=model.ir_version)
    part.opset_import.extend(model.opset_import)
    part.functions.extend(model.functions)
    g = part.graph
    g.name = model.graph.name
    g.node.extend(nodes)
    g.input.extend(declared.get(t) or onnx.helper.make_empty_tensor_value_info(t) for t in takes)
    g.output.extend(declared.get(t) or onnx.helper.make_empty_tensor_value_info(t) for t in makes)
    g.initializer.extend(inits[t] for t in taken if t in inits)
    return part
