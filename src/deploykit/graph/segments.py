"""A graph cut into consecutive parts, each a model of its own, that compute the whole run in turn.

The screening graph (:mod:`deploykit.quant.screen`) runs once per patch, and a patch that changes
nothing before some node computes up to there what the run with no change computed: from the last
cut before its first change it can start on that run's values instead of computing them again.

A cut is made only where every tensor crossing it is read after it by nodes the caller names (the
screen's If switches), which ONNX Runtime fuses with nothing: the parts then keep the whole graph's
fusions and compute its outputs bit for bit (ViT-S's screening graph in 16 parts, 12 random patches).
A cut between a residual Add and the LayerNorm it feeds would not (SkipLayerNormalization).
Constants computed from weights alone (a weight's DequantizeLinear) never cross a cut: each part
computes those it reads, so a fusion with its reader stays inside the part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deploykit.graph.proto import node_reads, subgraphs

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class Part:
    """One part: its model, where its first node is in the whole graph's node order, the tensors it
    takes (the graph's inputs and what earlier parts make) and those it makes for later parts or as the
    graph's outputs."""

    model: onnx.ModelProto
    start: int
    reads: tuple[str, ...]
    makes: tuple[str, ...]


def split(model: onnx.ModelProto, parts: int, reader_ok: Callable[[onnx.NodeProto], bool]) -> list[Part]:
    """``model`` (its nodes in topological order, as ONNX requires) in at most ``parts`` parts of about
    equal node counts, cut only where every tensor crossing the cut is read after it by nodes
    ``reader_ok`` accepts and has a declared type; the model as one part where no cut qualifies.
    Nodes computing from weights alone go with their readers: each part computes those it reads. A
    model with a weight a caller may feed (an initializer that is also an input) stays whole: what is
    computed from it is no constant."""
    nodes = list(model.graph.node)
    inits = {t.name: t for t in model.graph.initializer}
    inputs = [i.name for i in model.graph.input]
    if any(i in inits for i in inputs):
        outputs = tuple(o.name for o in model.graph.output)
        return [Part(model, 0, tuple(i for i in inputs if i not in inits), outputs)]
    reads = [node_reads(n) for n in nodes]
    constant = _constant(nodes, reads, set(inits))
    body = [k for k in range(len(nodes)) if k not in constant]
    made_by = {o: k for k in constant for o in nodes[k].output}
    declared = _declared(model)
    cuts = _eligible(model, nodes, reads, body, made_by, declared, reader_ok)
    chosen = {min(cuts, key=lambda c: (abs(c - k * len(body) / parts), c)) for k in range(1, parts)} if cuts else set()
    bounds = [0, *sorted(chosen), len(body)]  # positions in ``body``
    outputs = [o.name for o in model.graph.output]
    spans = list(zip(bounds, bounds[1:], strict=False))
    groups = []  # per part: its nodes and the constant nodes they read (the last: the constant outputs too)
    for a, b in spans:
        read = [t for k in body[a:b] for t in reads[k]] + (outputs if b == len(body) else [])
        groups.append(sorted({*body[a:b], *_closure(read, made_by, reads)}))
    out = []
    for i, ((a, b), members) in enumerate(zip(spans, groups, strict=True)):
        last = b == len(body)
        own = set(members) if last else set(body[a:b])
        made = {o for k in members for o in nodes[k].output}
        weights = [o for o in outputs if o in inits] if last else []  # a weight the graph gives out as it is
        taken = list(dict.fromkeys([*(t for k in members for t in reads[k] if t not in made), *weights]))
        later = {t for rest in groups[i + 1 :] for k in rest for t in reads[k]} | set(outputs)
        makes = [o for k in members if k in own for o in nodes[k].output if o in later] + weights
        takes = [t for t in taken if t not in inits]
        part = _part_model(model, [nodes[k] for k in members], takes, makes, taken, inits, declared)
        out.append(Part(part, body[a] if b > a else 0, tuple(takes), tuple(makes)))
    return out


def _constant(nodes: list[onnx.NodeProto], reads: list[list[str]], inits: set[str]) -> set[int]:
    """Indices of the nodes that compute from weights alone (no subgraph, no graph input upstream)."""
    known, found = set(inits), set()
    for k, node in enumerate(nodes):
        if reads[k] and all(t in known for t in reads[k]) and not any(True for _ in subgraphs(node)):
            found.add(k)
            known.update(node.output)
    return found


def _closure(tensors: list[str], made_by: dict[str, int], reads: list[list[str]]) -> set[int]:
    """The constant nodes that compute ``tensors``, and those their inputs need."""
    found: set[int] = set()
    todo = [made_by[t] for t in tensors if t in made_by]
    while todo:
        k = todo.pop()
        if k not in found:
            found.add(k)
            todo += [made_by[t] for t in reads[k] if t in made_by]
    return found


def _eligible(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    reads: list[list[str]],
    body: list[int],
    made_by: dict[str, int],
    declared: dict[str, onnx.ValueInfoProto],
    reader_ok: Callable[[onnx.NodeProto], bool],
) -> list[int]:
    """Positions in ``body`` a cut may go before (see :func:`split`); ``made_by``: the constant nodes by
    what they make. A node reads through the constant nodes it needs: the node that reads a crossing
    tensor may be one of those."""
    inputs = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    readers: dict[str, list[tuple[int, bool]]] = {}  # tensor -> (body position, whether its reader is accepted)
    for pos, k in enumerate(body):
        for j in (k, *_closure(reads[k], made_by, reads)):
            for t in dict.fromkeys(reads[j]):
                if t not in made_by and t not in inputs:
                    readers.setdefault(t, []).append((pos, reader_ok(nodes[j])))
    last = {t: max(p for p, _ in found) for t, found in readers.items()}
    live: set[str] = set()  # activations made before the cut and read after it
    cuts = []
    for c in range(1, len(body)):
        live = {t for t in live if last.get(t, -1) >= c}
        live |= {o for o in nodes[body[c - 1]].output if last.get(o, -1) >= c}
        if all(t in declared and all(ok for p, ok in readers[t] if p >= c) for t in live):
            cuts.append(c)
    return cuts


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
