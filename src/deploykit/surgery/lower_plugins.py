"""lower_plugins: give plugin nodes an ONNX body (a model-local function) so ONNX Runtime runs them.

Calibration and parity run on the CPU under ONNX Runtime; a graph with TensorRT plugin nodes cannot
run there unless each plugin op has a body (registered in :mod:`deploykit.surgery.plugin_bodies`).
Nodes keep their op type and attributes, so the graph still says what TensorRT should use (its parser
finds a plugin by op type, and ignores the domain); where two nodes of one op need different bodies
(their attributes differ), each variant is a function of the same name in a domain of its own
(``<domain>.<digest>``), the node moves to that domain, and a node without ``plugin_namespace`` gets
the one TensorRT read from its old domain, so the parser looks up the same plugin as before.

The runner compares the lowered graph with the last one ONNX Runtime could run, which, after
``replace_with_plugin``, is the graph before the plugins went in: a wrong body fails here.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass

import onnx

from deploykit.graph.proto import STANDARD_DOMAINS, copy_model, ensure_opset, node_label, opset_version
from deploykit.surgery.base import Pass, PassConfigError, PassError, PassResult
from deploykit.surgery.plugin_bodies import body_builder, registered_ops


@dataclass(frozen=True)
class LowerPluginsParams:
    ops: tuple[str, ...] = ()  # lower only these op types; empty = every plugin op with a registered body


class LowerPlugins(Pass):
    name = "lower_plugins"
    description = "attach registered ONNX bodies (model-local functions) to plugin nodes for ONNX Runtime"
    Params = LowerPluginsParams

    def requires(self, model: onnx.ModelProto) -> None:
        present = {n.op_type for n in _plugin_nodes(model)}
        for op in self.params.ops:
            if op in present and body_builder(_probe(model, op)) is None:
                raise PassConfigError(
                    f"lower_plugins: no body is registered for plugin op {op!r}",
                    hint=f"registered: {', '.join(registered_ops()) or 'none'}; "
                    "see deploykit.surgery.plugin_bodies.register_body",
                )

    def run(self, model: onnx.ModelProto) -> PassResult:
        nodes = [n for n in _plugin_nodes(model) if not self.params.ops or n.op_type in self.params.ops]
        if not nodes:
            return PassResult(model, False, "no plugin node without a body")
        opset = opset_version(model)
        bodies: dict[tuple[str, str], dict[bytes, tuple[onnx.FunctionProto, list[int]]]] = defaultdict(dict)
        missing = sorted({n.op_type for n in nodes if body_builder(n) is None})
        index = {id(n): k for k, n in enumerate(model.graph.node)}
        for node in (n for n in nodes if n.op_type not in missing):
            f = _build(node, opset)
            key = f.SerializeToString(deterministic=True)
            bodies[(node.domain, node.op_type)].setdefault(key, (f, []))[1].append(index[id(node)])
        warnings = (
            (
                f"no body registered for {', '.join(missing)}: ONNX Runtime still cannot run "
                f"{'them' if len(missing) > 1 else 'it'}",
            )
            if missing
            else ()
        )
        if not bodies:
            return PassResult(model, False, warnings[0], warnings=warnings)
        out = copy_model(model)
        lowered = {}
        for (domain, op), variants in sorted(bodies.items()):
            for f, positions in variants.values():
                digest = hashlib.sha256(f.SerializeToString(deterministic=True)).hexdigest()[:8]
                where = domain if len(variants) == 1 else f"{domain or 'custom'}.{digest}"
                f.name, f.domain = op, where
                out.functions.append(f)
                for k in positions:
                    _move(out.graph.node[k], where)
                ensure_opset(out, where, 1)
                for entry in f.opset_import:
                    ensure_opset(out, entry.domain, entry.version)
                lowered[op if where == domain else f"{where}::{op}"] = len(positions)
        return PassResult(out, True, details={"functions": lowered, "without_body": missing}, warnings=warnings)


def _move(node: onnx.NodeProto, domain: str) -> None:
    """Put a variant's node in its function's domain; its op type, and the plugin TensorRT finds for it, stay."""
    from onnx import helper

    if node.domain != domain and not any(a.name == "plugin_namespace" for a in node.attribute):
        node.attribute.append(helper.make_attribute("plugin_namespace", node.domain))
    node.domain = domain


def _plugin_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    local = {(f.domain, f.name) for f in model.functions}
    return [n for n in model.graph.node if n.domain not in STANDARD_DOMAINS and (n.domain, n.op_type) not in local]


def _probe(model: onnx.ModelProto, op: str) -> onnx.NodeProto:
    return next(n for n in _plugin_nodes(model) if n.op_type == op)


def _build(node: onnx.NodeProto, opset: int) -> onnx.FunctionProto:
    """Call the registered builder; check the body's interface fits the node."""
    builder = body_builder(node)
    try:
        f = builder(node, opset)  # type: ignore[misc]
    except Exception as e:
        raise PassError(
            f"the body builder of {node.op_type!r} failed for node {node_label(node)}: {type(e).__name__}: {e}",
            node=node.name,
        ) from e
    if not isinstance(f, onnx.FunctionProto):
        raise PassError(
            f"the body builder of {node.op_type!r} returned {type(f).__name__}, not an onnx.FunctionProto",
            node=node.name,
        )
    if len(f.input) != len(node.input) or len(f.output) != len(node.output):
        raise PassError(
            f"the body of {node.op_type!r} takes {len(f.input)} inputs and gives {len(f.output)} outputs; "
            f"node {node_label(node)} has {len(node.input)} and {len(node.output)}",
            node=node.name,
        )
    # The checker rejects a function importing another ai.onnx version than the model: use the model's.
    for entry in f.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    if not any(e.domain in ("", "ai.onnx") for e in f.opset_import):
        f.opset_import.add(domain="", version=opset)
    return f
