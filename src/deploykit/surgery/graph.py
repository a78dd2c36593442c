"""Graph helpers only passes need: renaming a tensor's uses, and what a pass changed.

The helpers every layer shares (producers, consumers, toposort, constants, ...) live in
:mod:`deploykit.graph.proto`.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from deploykit.graph.proto import subgraphs

if TYPE_CHECKING:
    import onnx


def rename_uses(graph: onnx.GraphProto, old: str, new: str, *, nested: bool = False) -> None:
    """Make every node that reads ``old`` read ``new``, inside subgraphs too.

    The graph's own outputs keep their names (they are the model's interface); a subgraph output
    that passes an outer tensor straight through is a read, and is renamed.
    """
    for n in graph.node:
        for k, name in enumerate(n.input):
            if name == old:
                n.input[k] = new
        for g in subgraphs(n):
            if old not in {i.name for i in g.input} | {o for m in g.node for o in m.output}:
                rename_uses(g, old, new, nested=True)
    if nested:
        for o in graph.output:
            if o.name == old:
                o.name = new


def diff_nodes(before: onnx.GraphProto, after: onnx.GraphProto) -> dict[str, int]:
    """Nodes added, removed and modified by a pass.

    Nodes are paired by name (when unique), then by the tensors they make, then by op and first
    input (a node whose output was renamed, e.g. a Conv taking over a folded BatchNorm's output);
    a pair must have the same op. A paired node that differs is modified; the rest were removed
    or added.
    """
    old, new = list(before.node), list(after.node)
    pairs: list[tuple[Any, Any]] = []
    for key in (_by_name, lambda n: tuple(n.output), lambda n: (n.input[0] if n.input else "",)):
        index = _unique_index(new, key)
        left = []
        for n in old:
            m = index.pop(key(n), None) if key(n) else None
            if m is not None and (m.domain, m.op_type) == (n.domain, n.op_type):
                pairs.append((n, m))
            else:
                left.append(n)
        taken = {id(m) for _, m in pairs}
        old, new = left, [m for m in new if id(m) not in taken]
    modified = sum(
        1 for a, b in pairs if a.SerializeToString(deterministic=True) != b.SerializeToString(deterministic=True)
    )
    return {"added": len(new), "removed": len(old), "modified": modified}


def _by_name(node: onnx.NodeProto) -> tuple[str, ...]:
    return (node.name,) if node.name else ()


def _unique_index(nodes: list[onnx.NodeProto], key: Any) -> dict[Any, onnx.NodeProto]:
    """key -> node, for keys exactly one node has (an ambiguous key pairs nothing)."""
    counts = collections.Counter(key(n) for n in nodes)
    return {key(n): n for n in nodes if key(n) and counts[key(n)] == 1}
