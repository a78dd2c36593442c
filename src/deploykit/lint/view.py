"""The graph as the rules read it: nodes with their scope, producers and consumers, element types and
shapes from ONNX shape inference, and constant values (initializers and ``Constant`` nodes).

Read-only and built once per lint; every rule module takes a :class:`GraphView`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deploykit.graph.proto import (
    constant_node_value,
    consumers,
    infer_shapes,
    opset_version,
    producers,
    real_inputs,
    tensor_array,
    tensor_types,
)

if TYPE_CHECKING:
    import numpy as np
    import onnx

ONNX_DOMAINS = frozenset({"", "ai.onnx"})
MAX_CONSTANT_ELEMENTS = 1 << 24  # a constant larger than this is not read for a check (weights, not parameters)


@dataclass(frozen=True)
class Scoped:
    """A node and where it lives: the main graph, a subgraph of a control-flow node, or a function body."""

    node: onnx.NodeProto
    label: str  # how findings name it
    where: str = ""  # "" for the main graph, else "in If 'cond' then_branch" / "in function BEVPoolV2"


@dataclass
class GraphView:
    model: onnx.ModelProto
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.model = infer_shapes(self.model, self.notes)
        g = self.model.graph
        self.graph = g
        self.opset = opset_version(self.model)
        # A declaration of a tensor no node writes or reads (left behind by an edit) is not part of
        # the network the parser builds: no rule reads it.
        present = {t for n in g.node for t in (*n.input, *n.output)} | {v.name for v in (*g.input, *g.output)}
        present |= {t.name for t in g.initializer}
        self.types: dict[str, int] = {k: v for k, v in tensor_types(g).items() if k in present}
        self.shapes: dict[str, list[int | str | None]] = {}
        for v in [*g.input, *g.value_info, *g.output]:
            if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
                self.shapes[v.name] = [
                    d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                    for d in v.type.tensor_type.shape.dim
                ]
        for t in g.initializer:
            self.shapes[t.name] = list(t.dims)
        self.producer = producers(g)
        self.consumer = consumers(g)
        self.inputs = [i.name for i in real_inputs(g)]
        self.outputs = [o.name for o in g.output]
        self.initializers = {t.name: t for t in g.initializer}
        self.functions = {(f.domain, f.name): f for f in self.model.functions}
        self._index = {id(n): i for i, n in enumerate(g.node)}

    # -- nodes ------------------------------------------------------------------------------------

    def label(self, node: onnx.NodeProto, index: int) -> str:
        return node.name or f"#{index} {node.op_type}"

    def name_of(self, node: onnx.NodeProto) -> str:
        """A main-graph node's label."""
        return self.label(node, self._index.get(id(node), -1))

    def main_nodes(self) -> Iterator[Scoped]:
        for i, node in enumerate(self.graph.node):
            yield Scoped(node, self.label(node, i))

    def all_nodes(self) -> Iterator[Scoped]:
        """The main graph's nodes, then each control-flow subgraph's (the parser imports those too)."""
        for scoped in self.main_nodes():
            yield scoped
            yield from self._nested(scoped.node, scoped.label, 0)

    def _nested(self, node: onnx.NodeProto, owner: str, depth: int) -> Iterator[Scoped]:
        if depth > 16:
            return
        for a in node.attribute:
            for sub in subgraphs_of(a):
                for j, inner in enumerate(sub.node):
                    label = inner.name or f"#{j} {inner.op_type}"
                    yield Scoped(inner, label, f"in {node.op_type} {owner!r} {a.name}")
                    yield from self._nested(inner, label, depth + 1)

    def function_nodes(self, node: onnx.NodeProto) -> Iterator[Scoped]:
        """The body of the model-local function ``node`` calls, as the parser would inline it."""
        f = self.functions.get((node.domain, node.op_type))
        for j, inner in enumerate(f.node if f is not None else ()):
            yield Scoped(inner, inner.name or f"#{j} {inner.op_type}", f"in function {node.op_type}")

    # -- tensors ----------------------------------------------------------------------------------

    def dtype(self, name: str) -> int | None:
        return self.types.get(name) if name else None

    def rank(self, name: str) -> int | None:
        shape = self.shapes.get(name)
        return len(shape) if shape is not None else None

    def is_constant(self, name: str) -> bool:
        if not name:
            return False
        if name in self.initializers:  # also one listed as an input: the parser imports it as weights
            return True
        node = self.producer.get(name)
        return node is not None and node.op_type == "Constant" and node.domain in ONNX_DOMAINS

    def value(self, name: str) -> np.ndarray | None:
        """A constant's value (None when ``name`` is not a constant or is too large to read for a check)."""
        return _value(self, name) if self.is_constant(name) else None

    def readers(self, name: str) -> list[onnx.NodeProto]:
        return self.consumer.get(name, [])


def _value(view: GraphView, name: str) -> np.ndarray | None:
    cache = view.__dict__.setdefault("_values", {})
    if name not in cache:
        cache[name] = _read(view, name)
    return cache[name]


def _read(view: GraphView, name: str) -> np.ndarray | None:
    import numpy as np

    tensor = view.initializers.get(name)
    try:
        if tensor is not None:
            if int(np.prod(tensor.dims, dtype=np.int64)) > MAX_CONSTANT_ELEMENTS:
                return None
            return tensor_array(tensor)
        node = view.producer.get(name)
        return constant_node_value(node) if node is not None else None
    except (
        ValueError,
        TypeError,
        OSError,
    ):  # external data not loaded, or an odd encoding: not a constant we read
        return None


def subgraphs_of(attribute: onnx.AttributeProto) -> list[onnx.GraphProto]:
    """The graphs an attribute holds (``g`` or ``graphs``)."""
    return [attribute.g] if attribute.HasField("g") else list(attribute.graphs)


def first_attribute(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    """A node attribute's value (ints, floats, strings decoded), or ``default``."""
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            if isinstance(value, bytes):
                return value.decode("utf-8", "replace")
            if isinstance(value, list) and value and isinstance(value[0], bytes):
                return [v.decode("utf-8", "replace") for v in value]
            return value
    return default


__all__ = ["GraphView", "Scoped", "first_attribute", "subgraphs_of"]
