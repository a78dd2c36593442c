"""Declarative subgraph patterns for ``replace_with_plugin``, and the registry code puts them in.

Two forms:

* :class:`Pattern` (registered by code): nodes with named values, like a small ONNX graph::

      Pattern("scaled_softmax",
              nodes=(Node("Mul", ("x", "scale"), ("scaled",)),
                     Node("Softmax", ("scaled",), ("y",), attrs={"axis": -1})),
              inputs=("x", "scale"), outputs=("y",))

  A value produced by a pattern node must be produced by the matching graph node; any other value
  is a pattern input and binds to whatever tensor is there (the same tensor wherever it recurs).
  ``"*"`` accepts any input. ``attributes`` computes plugin attributes from a match (e.g. a constant's
  value); ``plugin`` gives the plugin node's defaults (name, version, namespace, domain).

* :class:`Chain` (from YAML, ``chain: [Transpose, Reshape, Softmax]``): ops where each reads the one
  before through its first input; every other input becomes a plugin input, in order.

A match is accepted only if its inner tensors are read by nothing outside it. When nothing matches,
the search says why, from the candidate that got furthest.

Registry: :func:`register_pattern` (code), ``deploykit.patterns`` entry points, ``module:attr``
named in the config, and :data:`BUILTIN_PATTERNS` (``name -> "module:attr"``, imported on first use).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import numpy as np
import onnx

from deploykit.errors import ConfigError
from deploykit.graph.proto import constant_value, consumers, graph_output_names, node_label, producers

# Patterns shipped with deploykit, imported on first use: name -> "module:attr".
BUILTIN_PATTERNS: dict[str, str] = {}
_REGISTERED: dict[str, Any] = {}


@dataclass(frozen=True)
class Node:
    """One node of a pattern: op (``"Op"`` or ``"domain::Op"``), input and output value names, attributes."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PluginSpec:
    """The plugin node a pattern is replaced with, by default."""

    name: str
    version: str = "1"
    namespace: str = ""
    domain: str = "trt.plugins"


@dataclass
class Match:
    """Graph nodes a pattern matched, and the graph tensors of its inputs and outputs."""

    graph: onnx.GraphProto
    nodes: list[onnx.NodeProto]
    inputs: list[str]
    outputs: list[str]
    values: dict[str, str] = field(default_factory=dict)  # pattern value -> graph tensor

    def constant(self, value: str) -> np.ndarray | None:
        """The constant behind a pattern value (an initializer or Constant node), or None."""
        return constant_value(self.graph, self.values.get(value, value))


@dataclass
class Search:
    matches: list[Match]
    reason: str = ""  # why nothing matched, when nothing did


@dataclass(frozen=True)
class Pattern:
    """A declarative pattern (see the module docstring)."""

    name: str
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: Callable[[Match], dict[str, Any]] | None = None
    plugin: PluginSpec | None = None
    description: str = ""

    def __post_init__(self) -> None:
        made = [o for n in self.nodes for o in n.outputs]
        missing = [o for o in self.outputs if o not in made]
        if not self.nodes or missing:
            raise ValueError(f"pattern {self.name!r}: outputs {missing} are made by none of its nodes")

    def find(self, graph: onnx.GraphProto) -> Search:
        return _Matcher(self, graph).search()


@dataclass(frozen=True)
class Chain:
    """An op-type chain: each op reads the previous one's output through its first input."""

    ops: tuple[str, ...]
    name: str = ""
    attributes: Callable[[Match], dict[str, Any]] | None = None
    plugin: PluginSpec | None = None

    def find(self, graph: onnx.GraphProto) -> Search:
        return _find_chain(self, graph)


# ---- registry -----------------------------------------------------------------------------------


def register_pattern(pattern: Pattern | Chain, *, replace: bool = False) -> None:
    """Make ``pattern`` available to ``replace_with_plugin`` under its name."""
    if pattern.name in _REGISTERED and not replace and _REGISTERED[pattern.name] is not pattern:
        raise ValueError(f"pattern {pattern.name!r} is registered already (pass replace=True to override)")
    _REGISTERED[pattern.name] = pattern


def known_patterns() -> list[str]:
    names = set(_REGISTERED) | set(BUILTIN_PATTERNS)
    names |= {ep.name for ep in metadata.entry_points(group="deploykit.patterns")}
    return sorted(names)


def get_pattern(name: str) -> Pattern | Chain:
    """A pattern by registered name, entry point, built-in, or ``module:attr``."""
    if name in _REGISTERED:
        return _REGISTERED[name]
    target = BUILTIN_PATTERNS.get(name) or next(
        (ep.value for ep in metadata.entry_points(group="deploykit.patterns") if ep.name == name), None
    )
    target = target or (name if ":" in name else None)
    if target is None:
        close = difflib.get_close_matches(name, known_patterns(), n=3)
        also = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(
            f"replace_with_plugin: unknown pattern {name!r}{also}",
            hint=f"known patterns: {', '.join(known_patterns()) or 'none'}; or give 'module:attr', "
            "or an op chain with chain: [OpA, OpB]",
        )
    module, attr = target.split(":", 1)
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"replace_with_plugin: cannot load pattern {name!r} from {target!r}: {e}") from e
    if not hasattr(obj, "find"):
        raise ConfigError(f"replace_with_plugin: {target!r} is not a Pattern (it has no find(graph))")
    _REGISTERED.setdefault(name, obj)
    return obj


# ---- declarative matching -----------------------------------------------------------------------


def _op_matches(spec: str, node: onnx.NodeProto) -> bool:
    domain, _, op = spec.rpartition("::")
    if node.op_type != op:
        return False
    return node.domain in ("", "ai.onnx") if not domain else node.domain == domain


def _attrs_match(want: Mapping[str, Any], node: onnx.NodeProto) -> str:
    from onnx import helper

    have = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    for k, v in want.items():
        got = have.get(k)
        got = got.decode() if isinstance(got, bytes) else list(got) if isinstance(got, (list, tuple)) else got
        if got != (list(v) if isinstance(v, (list, tuple)) else v):
            return f"{node_label(node)} has {k}={got!r}, the pattern wants {v!r}"
    return ""


def _strip(names: Sequence[str]) -> list[str]:
    names = list(names)
    while names and not names[-1]:
        names.pop()
    return names


class _Matcher:
    def __init__(self, pattern: Pattern, graph: onnx.GraphProto) -> None:
        self.p, self.g = pattern, graph
        self.made = producers(graph)
        self.readers = consumers(graph)
        self.graph_outputs = graph_output_names(graph)
        self.maker = {o: n for n in pattern.nodes for o in n.outputs}  # pattern value -> pattern node
        self.order = {id(n): k for k, n in enumerate(graph.node)}

    def search(self) -> Search:
        anchor = self.maker[self.p.outputs[0]]
        candidates = [n for n in self.g.node if _op_matches(anchor.op, n)]
        if not candidates:
            return Search([], f"pattern {self.p.name!r}: the graph has no {anchor.op} node")
        matches, used, best = [], set(), (-1, "")
        for cand in candidates:
            if id(cand) in used:
                continue
            state: dict[str, Any] = {"values": {}, "nodes": {}}
            why = self._match(anchor, cand, state) or self._rest(state) or self._contained(state)
            if why:
                depth = len(state["nodes"])
                best = max(best, (depth, f"{node_label(cand)}: {why}"), key=lambda t: t[0])
                continue
            nodes = sorted(state["nodes"].values(), key=lambda n: self.order[id(n)])
            if any(id(n) in used for n in nodes):
                continue
            used |= {id(n) for n in nodes}
            values = state["values"]
            matches.append(
                Match(
                    self.g, nodes, [values[v] for v in self.p.inputs], [values[v] for v in self.p.outputs], dict(values)
                )
            )
        reason = "" if matches else f"pattern {self.p.name!r} matched no subgraph; nearest: {best[1]}"
        return Search(matches, reason)

    def _match(self, pnode: Node, gnode: onnx.NodeProto, state: dict[str, Any]) -> str:
        done = state["nodes"]
        if id(pnode) in done:
            return "" if done[id(pnode)] is gnode else f"{node_label(gnode)} is not the node matched before"
        if any(g is gnode for g in done.values()):
            return f"{node_label(gnode)} would match two pattern nodes"
        if not _op_matches(pnode.op, gnode):
            return f"{node_label(gnode)} is not {pnode.op}"
        why = _attrs_match(pnode.attrs, gnode)
        ins, outs = _strip(gnode.input), _strip(gnode.output)
        if why or len(ins) != len(pnode.inputs) or len(outs) < len(pnode.outputs):
            return why or f"{node_label(gnode)} has {len(ins)} inputs, the pattern's {pnode.op} {len(pnode.inputs)}"
        done[id(pnode)] = gnode
        values = state["values"]
        for pv, gv in zip(pnode.outputs, outs, strict=False):
            if values.setdefault(pv, gv) != gv:
                return f"value {pv!r} would be both {values[pv]!r} and {gv!r}"
        for pv, gv in zip(pnode.inputs, ins, strict=True):
            if pv == "*":
                continue
            if values.setdefault(pv, gv) != gv:
                return f"value {pv!r} would be both {values[pv]!r} and {gv!r}"
            if pv in self.maker:
                producer = self.made.get(gv)
                if producer is None:
                    return f"{gv!r} comes from outside the graph, the pattern wants it from {self.maker[pv].op}"
                why = self._match(self.maker[pv], producer, state)
                if why:
                    return why
        return ""

    def _rest(self, state: dict[str, Any]) -> str:
        """Match pattern nodes the backward walk did not reach, through the readers of bound values."""
        for pnode in self.p.nodes:
            if id(pnode) in state["nodes"]:
                continue
            bound = [state["values"][v] for v in pnode.inputs if v in state["values"]]
            for cand in (c for gv in bound for c in self.readers.get(gv, [])):
                trial = {"values": dict(state["values"]), "nodes": dict(state["nodes"])}
                if not self._match(pnode, cand, trial):
                    state.update(trial)
                    break
            else:
                return f"no {pnode.op} node reads the matched tensors"
        return ""

    def _contained(self, state: dict[str, Any]) -> str:
        inside = {id(n) for n in state["nodes"].values()}
        exits = {state["values"][v] for v in self.p.outputs}
        for node in state["nodes"].values():
            for out in node.output:
                if not out or out in exits:
                    continue
                if out in self.graph_outputs:
                    return f"inner tensor {out!r} is a graph output"
                outside = [r for r in self.readers.get(out, []) if id(r) not in inside]
                if outside:
                    return f"inner tensor {out!r} is also read by {node_label(outside[0])}"
        return ""


# ---- chains -------------------------------------------------------------------------------------


def _find_chain(chain: Chain, graph: onnx.GraphProto) -> Search:
    made, readers, outputs = producers(graph), consumers(graph), graph_output_names(graph)
    label = " -> ".join(chain.ops)
    last = [n for n in graph.node if _op_matches(chain.ops[-1], n)]
    if not last:
        return Search([], f"chain {label}: the graph has no {chain.ops[-1]} node")
    matches, used, best = [], set(), (-1, "")
    for tail in last:
        nodes, why = [tail], ""
        for op in reversed(chain.ops[:-1]):
            head = nodes[0]
            prev = made.get(head.input[0]) if head.input else None
            if prev is None or not _op_matches(op, prev):
                why = f"{node_label(head)} does not read a {op}"
            elif prev.output[0] in outputs or len(readers.get(prev.output[0], [])) != 1:
                why = f"{node_label(prev)}'s output is also used outside the chain"
            if why:
                break
            nodes.insert(0, prev)
        if why:
            best = max(best, (len(nodes), why), key=lambda t: t[0])
            continue
        if any(id(n) in used for n in nodes):
            continue
        used |= {id(n) for n in nodes}
        ins = [i for i in nodes[0].input if i] + [i for n in nodes[1:] for i in n.input[1:] if i]
        matches.append(Match(graph, nodes, ins, [o for o in tail.output if o]))
    reason = "" if matches else f"chain {label} matched nothing; nearest: {best[1]}"
    return Search(matches, reason)
