"""Common-subexpression elimination (used by ``sanitize``): one node per identical computation.

Traced shape arithmetic repeats itself (``x.size(0)`` read twice becomes two Shape -> Gather ->
Unsqueeze chains, each with its own ``axes`` constant); small initializers with equal type, shape
and bytes are merged first, then two nodes with the same op, inputs and attributes compute the
same tensor, unless the op is random. Nodes holding subgraphs are left alone.
"""

from __future__ import annotations

import onnx

from deploykit.graph.proto import graph_output_names, remove_nodes, subgraphs
from deploykit.surgery.graph import rename_uses

SMALL = 64 * 1024  # bytes: constants up to this size are compared (shape arithmetic, axes, scalars)

_RANDOM = frozenset(
    {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"}
)


def eliminate_common(graph: onnx.GraphProto) -> int:
    """Merge duplicate nodes into the first one (graph order); return how many were removed."""
    outputs = graph_output_names(graph)
    seen: dict[tuple, onnx.NodeProto] = {}
    doomed = []
    for node in graph.node:
        if node.op_type in _RANDOM or any(True for _ in subgraphs(node)):
            continue
        key = (
            node.domain,
            node.op_type,
            node.overload,
            tuple(node.input),
            len(node.output),
            tuple(a.SerializeToString(deterministic=True) for a in sorted(node.attribute, key=lambda a: a.name)),
        )
        first = seen.setdefault(key, node)
        if first is node or any(o in outputs for o in node.output if o):
            continue  # a graph output keeps its name: the duplicate stays
        for mine, theirs in zip(node.output, first.output, strict=True):
            if mine and theirs:
                rename_uses(graph, mine, theirs)
            elif mine:
                break  # the first does not make an output this one makes: keep both
        else:
            doomed.append(node)
    remove_nodes(graph, doomed)
    return len(doomed)


def merge_equal_constants(graph: onnx.GraphProto) -> int:
    """Merge small initializers holding the same typed value; return how many were dropped."""
    from deploykit.graph.proto import tensor_array

    overridable = {i.name for i in graph.input}
    outputs = graph_output_names(graph)
    seen: dict[tuple, str] = {}
    doomed = []
    for t in graph.initializer:
        if t.name in overridable or t.name in outputs or t.data_location == onnx.TensorProto.EXTERNAL:
            continue
        value = tensor_array(t)
        if value.nbytes > SMALL or value.dtype == object:
            continue
        key = (t.data_type, tuple(t.dims), value.tobytes())
        first = seen.setdefault(key, t.name)
        if first != t.name:
            rename_uses(graph, t.name, first)
            doomed.append(t)
    for t in doomed:
        graph.initializer.remove(t)
    return len(doomed)
