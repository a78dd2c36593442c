"""replace_with_plugin: replace every match of a pattern with one plugin node.

The plugin node is what TensorRT's ONNX parser maps to a plugin: ``op_type`` = plugin name, with
``plugin_version`` and ``plugin_namespace`` attributes, plus the plugin's own attributes. ONNX
Runtime cannot run it until ``lower_plugins`` gives it a body (or a custom-op library is loaded), so
the runner defers the numeric check to the next graph it can run.

A pattern that matches nothing is a warning with the reason (the graph may simply not have it), or
an error with ``required: true``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx

from deploykit.graph.proto import copy_model, ensure_opset, node_label, remove_nodes, toposort
from deploykit.surgery.base import Pass, PassConfigError, PassResult
from deploykit.surgery.patterns import Chain, Match, PluginSpec, get_pattern

AttrValue = int | float | str | tuple[int, ...] | tuple[float, ...]


@dataclass(frozen=True)
class ReplaceWithPluginParams:
    pattern: str = ""  # a registered pattern name (or module:attr); or give chain
    chain: tuple[str, ...] = ()  # an op-type chain, e.g. [Transpose, Reshape, Softmax]
    plugin: str = ""  # the plugin's name (op_type); "" = the pattern's plugin
    plugin_version: str = ""  # "" = the pattern's, else "1"
    plugin_namespace: str = ""  # TensorRT plugin namespace; the pattern's when it names one
    domain: str = ""  # ONNX domain of the node; "" = the pattern's, else "trt.plugins"
    attributes: dict[str, AttrValue] = field(default_factory=dict)  # plugin attributes (over the pattern's)
    required: bool = False  # no match is an error, not a warning
    max_matches: int = 0  # replace at most this many (0 = all)


class ReplaceWithPlugin(Pass):
    name = "replace_with_plugin"
    description = "replace each match of a pattern (registered name or op chain) with one plugin node"
    Params = ReplaceWithPluginParams
    changes_numerics = False  # checked against the graph once lower_plugins makes it runnable

    def _pattern(self) -> Any:
        p = self.params
        if bool(p.pattern) == bool(p.chain):
            raise PassConfigError(
                "replace_with_plugin: give exactly one of 'pattern' (a registered name) or 'chain' (op types)",
                hint="e.g. {pattern: bev_pool} or {chain: [MatMul, Softmax], plugin: MyAttention}",
            )
        return get_pattern(p.pattern) if p.pattern else Chain(tuple(p.chain), name="chain")

    def _spec(self, pattern: Any) -> PluginSpec:
        p, base = self.params, getattr(pattern, "plugin", None)
        name = p.plugin or (base.name if base else "")
        if not name:
            raise PassConfigError("replace_with_plugin: no plugin name: the pattern names none, so give 'plugin'")
        return PluginSpec(
            name=name,
            version=p.plugin_version or (base.version if base else "1"),
            namespace=p.plugin_namespace or (base.namespace if base else ""),
            domain=p.domain or (base.domain if base else "trt.plugins"),
        )

    def requires(self, model: onnx.ModelProto) -> None:
        pattern = self._pattern()
        spec = self._spec(pattern)
        if spec.domain in ("", "ai.onnx"):
            raise PassConfigError(
                "replace_with_plugin: a plugin node needs its own domain, not the ONNX one",
                hint="leave 'domain' unset ('trt.plugins') or name yours",
            )

    def run(self, model: onnx.ModelProto) -> PassResult:
        pattern = self._pattern()
        spec = self._spec(pattern)
        search = pattern.find(model.graph)
        matches = search.matches[: self.params.max_matches or None]
        if not matches:
            if self.params.required:
                raise PassConfigError(
                    f"replace_with_plugin: {search.reason}",
                    hint="the pattern does not fit this graph; fix it or drop 'required'",
                )
            return PassResult(model, False, search.reason, warnings=(search.reason,))
        out = copy_model(model)
        twin = {id(a): b for a, b in zip(model.graph.node, out.graph.node, strict=True)}
        _keep_output_types(out, model, [o for m in matches for o in m.outputs])
        plugins = [_plugin_node(m, pattern, spec, self.params.attributes, i) for i, m in enumerate(matches)]
        remove_nodes(out.graph, [twin[id(n)] for m in matches for n in m.nodes])
        out.graph.node.extend(plugins)  # toposort moves each next to its readers
        ensure_opset(out, spec.domain, 1)
        toposort(out.graph)
        replaced = [
            {"plugin_node": p.name, "nodes": [node_label(n) for n in m.nodes], "inputs": m.inputs, "outputs": m.outputs}
            for p, m in zip(plugins, matches, strict=True)
        ]
        return PassResult(
            out,
            True,
            details={
                "plugin": spec.name,
                "domain": spec.domain,
                "version": spec.version,
                "namespace": spec.namespace,
                "replaced": replaced,
            },
        )


def _plugin_node(
    match: Match, pattern: Any, spec: PluginSpec, user_attrs: dict[str, Any], index: int
) -> onnx.NodeProto:
    """The plugin node for one match: the pattern's attributes, then the user's, then version and namespace."""
    from onnx import helper

    attrs = dict(pattern.attributes(match)) if getattr(pattern, "attributes", None) else {}
    attrs.update(user_attrs)
    attrs.update(plugin_version=spec.version, plugin_namespace=spec.namespace)
    name = f"{spec.name}_{index}" if not match.nodes[-1].name else f"{match.nodes[-1].name}_{spec.name}"
    return helper.make_node(
        spec.name,
        match.inputs,
        match.outputs,
        name=name,
        domain=spec.domain,
        **{k: list(v) if isinstance(v, tuple) else v for k, v in sorted(attrs.items())},
    )


def _keep_output_types(out: onnx.ModelProto, original: onnx.ModelProto, names: list[str]) -> None:
    """Record the matched outputs' types: shape inference cannot look inside the plugin."""
    known = {vi.name for vi in [*out.graph.value_info, *out.graph.output]}
    missing = [n for n in names if n not in known]
    if not missing:
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(original).graph.value_info
    except Exception:  # without types, downstream inference stops at the plugin; the graph stays valid
        return
    out.graph.value_info.extend(vi for vi in inferred if vi.name in missing)
