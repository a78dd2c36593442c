"""Quantizing a graph that holds plugin nodes: what the quantize stage calls around its quantizer.

Measured traps (issue 6) and their causes:

- ModelOpt "loses" the model-local functions: its preprocessing raises the opset to its minimum
  (19 for INT8) with ``onnx.version_converter``, which drops ``model.functions``; the calibrator's
  ONNX Runtime session then fails on the bodiless plugin node.
- ModelOpt's FP16 conversion of the rest of the graph asks TensorRT about every custom node, so it
  fails without TensorRT; converting an inlined body instead gives an FP16 ScatterND(add), which
  ONNX Runtime's CPU provider cannot run.
- Inlining for calibration alone loses the plugin node: TensorRT would get the decomposition.

The fix works for any quantizer: :func:`inline_plugins` replaces each plugin node by its body,
its nodes named ``deploykit_plugin/<k>/...`` (:attr:`InlinedPlugins.node_names`); the quantizer
calibrates, quantizes and converts a graph of standard ops only, told to leave those nodes alone;
:func:`restore_plugins` then removes them wherever the quantizer left them and puts the plugin
nodes back, FP32 at their inputs and outputs (Casts where the graph around became FP16; TensorRT
folds them), with their bodies rebuilt for the quantized graph's opset. The calibration ranges of
the tensors around a plugin come from the inlined body, which computes exactly what the plugin
does, so they carry over unchanged.

deploykit's quantize stage wraps its whole job in one call, :func:`quantize_keeping_plugins`::

    result = quantize_keeping_plugins(job, quantize_model)   # instead of quantize_model(job)

which amounts to the following, for any other quantizer::

    inlined = inline_plugins(model)            # first: an opset upgrade would drop the bodies
    exclude = [*exclude, *inlined.node_names]  # ModelOpt / ORT nodes_to_exclude
    keep_fp32 = [*keep_fp32, *inlined.node_names]  # FP16 conversion; else EXCLUDE_FP16_OP_TYPES
    quantized = restore_plugins(quantize(inlined.model, ...), inlined)

A graph without plugin nodes passes through unchanged (``inlined.plugins == ()``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from deploykit.errors import ModelError
from deploykit.plugins.onnx_functions import attach_bodies, function_body, plugin_nodes

if TYPE_CHECKING:
    import onnx

PREFIX = "deploykit_plugin"
# Ops of the bodies an FP16 pass must leave in FP32 if it converts the inlined graph (ORT's CPU
# provider has no FP16 ScatterND with reduction): pass as ModelOpt's op_types_to_exclude_fp16.
EXCLUDE_FP16_OP_TYPES = ("ScatterND",)
_FLOAT = 1  # onnx.TensorProto.FLOAT


@dataclass(frozen=True)
class InlinedPlugin:
    node: onnx.NodeProto  # the plugin node as it was
    prefix: str  # every inlined node's name starts with it
    readers: tuple[tuple[tuple[str, int], ...], ...]  # per plugin input: the (node, input slot)s reading it
    writers: tuple[tuple[str, int], ...]  # per plugin output: the (node, output slot) writing it


@dataclass(frozen=True)
class InlinedPlugins:
    model: onnx.ModelProto  # standard ops only: what the quantizer gets
    plugins: tuple[InlinedPlugin, ...] = ()
    node_names: tuple[str, ...] = field(default=())  # the inlined nodes: exclude them from quantization
    # Initializers the plugin nodes read (ranks, intervals): a constant folder may fold the body's
    # index arithmetic away together with them; restore_plugins puts back what went missing.
    initializers: tuple[onnx.TensorProto, ...] = field(default=())


def quantize_keeping_plugins(job: Any, quantize_model: Callable[[Any], Any]) -> Any:
    """``quantize_model(job)`` (:func:`deploykit.quant.quantize.quantize_model`) around the plugin nodes.

    The quantizer gets the inlined graph with the bodies excluded from quantization (a pattern on
    their prefix) and kept FP32 where the rest becomes FP16; the result's model gets its plugin
    nodes back. ``job`` is a ``deploykit.quant.quantize.Job`` (a dataclass with ``model`` and a
    ``QuantizeConfig`` as ``cfg``); a graph without plugin nodes goes straight through.
    """
    inlined = inline_plugins(job.model)
    if not inlined.plugins:
        return quantize_model(job)
    # Constant nodes of the bodies become initializers in the quantizer's preparation: name the rest.
    computing = tuple(
        n.name for n in inlined.model.graph.node if n.name.startswith(PREFIX + "/") and n.op_type != "Constant"
    )
    cfg = dataclasses.replace(
        job.cfg,
        exclude_patterns=(*job.cfg.exclude_patterns, f"^{re.escape(PREFIX)}/"),
        keep_fp32_nodes=(*job.cfg.keep_fp32_nodes, *computing),
    )
    result = quantize_model(dataclasses.replace(job, model=inlined.model, cfg=cfg))
    result.model = restore_plugins(result.model, inlined)
    return result


def plugin_node_names(model: onnx.ModelProto) -> list[str]:
    """Names of the plugin nodes (a quantizer that keeps them as they are can exclude these)."""
    return [p.name for p in plugin_nodes(model.graph)]


def inline_plugins(model: onnx.ModelProto) -> InlinedPlugins:
    """A copy of ``model`` with every plugin node replaced by its body (standard ONNX ops).

    Inner tensors and nodes are named ``deploykit_plugin/<k>/<name>``; the plugin nodes' own input
    and output tensors keep their names, so calibration ranges of the tensors around them carry over.
    """
    import onnx

    found = plugin_nodes(model.graph)
    if not found:
        return InlinedPlugins(model)
    checked, _ = attach_bodies(model)  # validates every node (attributes, static shapes) first
    out = onnx.ModelProto()
    out.CopyFrom(checked)
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), 18)
    new_nodes, plugins, names = [], [], []
    by_index = {p.index: (k, p) for k, p in enumerate(found)}
    for index, node in enumerate(out.graph.node):
        if index not in by_index:
            new_nodes.append(node)
            continue
        k, found_node = by_index[index]
        inlined, plugin = _inline_one(node, function_body(found_node.op.name, opset), f"{PREFIX}/{k}")
        new_nodes.extend(inlined)
        plugins.append(plugin)
        names.extend(n.name for n in inlined)
    del out.graph.node[:]
    out.graph.node.extend(new_nodes)
    del out.functions[:]
    read = {name for p in plugins for name in p.node.input}
    initializers = tuple(_copy_tensor(t) for t in out.graph.initializer if t.name in read)
    return InlinedPlugins(out, tuple(plugins), tuple(names), initializers)


def _copy_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    import onnx

    out = onnx.TensorProto()
    out.CopyFrom(tensor)
    return out


def _inline_one(node: onnx.NodeProto, body: onnx.FunctionProto, prefix: str) -> tuple[list, InlinedPlugin]:
    """The body's nodes with formal names bound to the node's tensors and attribute references resolved."""
    import onnx

    rename = dict(zip(body.input, node.input, strict=True)) | dict(zip(body.output, node.output, strict=True))
    attrs = {a.name: a for a in node.attribute}
    nodes, readers, writers = [], {i: [] for i in range(len(node.input))}, {}
    for inner in body.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = f"{prefix}/{inner.name or inner.output[0]}"
        for slot, name in enumerate(inner.input):
            if name in body.input:
                readers[list(body.input).index(name)].append((copy.name, slot))
            copy.input[slot] = rename.get(name, f"{prefix}/{name}") if name else ""
        for slot, name in enumerate(inner.output):
            if name in body.output:
                writers[list(body.output).index(name)] = (copy.name, slot)
            copy.output[slot] = rename.get(name, f"{prefix}/{name}")
        for attr in copy.attribute:
            if attr.ref_attr_name:
                value = attrs[attr.ref_attr_name]
                name = attr.name
                attr.CopyFrom(value)
                attr.name = name
        nodes.append(copy)
    plugin = InlinedPlugin(
        _copy(node),
        prefix,
        tuple(tuple(readers[i]) for i in range(len(node.input))),
        tuple(writers[i] for i in range(len(node.output))),
    )
    return nodes, plugin


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    import onnx

    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out


def restore_plugins(model: onnx.ModelProto, inlined: InlinedPlugins) -> onnx.ModelProto:
    """Put the plugin nodes back into a (quantized) ``model`` made from ``inlined.model``.

    Removes the inlined nodes, reconnects each plugin node to the tensors its body read and wrote
    (where the quantizer renamed them), keeps its float inputs and outputs FP32 with Casts where the
    graph around it is not, drops what only fed the removed nodes, and attaches the bodies.

    Raises:
        ModelError: the quantizer removed or renamed nodes of an inlined body, so the plugin cannot be
            reconnected (exclude ``inlined.node_names`` from quantization).
    """
    import onnx

    from deploykit.graph.proto import remove_unused, toposort

    if not inlined.plugins:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    present = _existing_tensors(graph)
    graph.initializer.extend(_copy_tensor(t) for t in inlined.initializers if t.name not in present)
    types = _elem_types(out)
    by_name = {n.name: n for n in graph.node}
    replacements: dict[str, list[onnx.NodeProto]] = {}
    for plugin in inlined.plugins:
        first = next((n.name for n in graph.node if n.name.startswith(plugin.prefix + "/")), None)
        if first is None:
            raise ModelError(
                f"the quantized graph lost every node of plugin {plugin.node.name!r}'s body",
                hint="exclude InlinedPlugins.node_names from quantization",
            )
        replacements[first] = _plugin_nodes_back(plugin, by_name, types, _existing_tensors(graph))
    kept = []
    for node in graph.node:
        if node.name in replacements:
            kept.extend(replacements[node.name])
        elif not any(node.name.startswith(p.prefix + "/") for p in inlined.plugins):
            kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    inner = {v.name for v in graph.value_info if v.name.startswith(PREFIX + "/")}
    for vi in [v for v in graph.value_info if v.name in inner]:
        graph.value_info.remove(vi)
    toposort(graph)
    remove_unused(graph)
    restored, _ = attach_bodies(out)
    return restored


def _plugin_nodes_back(
    plugin: InlinedPlugin, by_name: dict, types: dict[str, int], existing: set[str]
) -> list[onnx.NodeProto]:
    """The plugin node wired to the current tensors, with the Casts that keep it FP32."""
    from onnx import helper

    from deploykit.plugins.descriptions import descriptions

    op = descriptions()[plugin.node.op_type]
    node = _copy(plugin.node)
    before, after = [], []
    for i, (original, readers) in enumerate(zip(plugin.node.input, plugin.readers, strict=True)):
        current = _current_input(original, readers, by_name, existing, plugin)
        if op.inputs[i].dtype in op.types and types.get(current, _FLOAT) != _FLOAT:
            cast = f"{plugin.prefix}/{op.inputs[i].name}_fp32"
            before.append(helper.make_node("Cast", [current], [cast], name=cast, to=_FLOAT))
            current = cast
        node.input[i] = current
    for j, (writer, slot) in enumerate(plugin.writers):
        producer = by_name.get(writer)
        if producer is None:
            raise ModelError(
                f"the quantized graph lost {writer!r}, which computes plugin {plugin.node.name!r}'s output",
                hint="exclude InlinedPlugins.node_names from quantization",
            )
        target = producer.output[slot]
        if types.get(target, _FLOAT) != _FLOAT:  # the neighbours became FP16: cast the FP32 result to them
            fp32 = f"{plugin.prefix}/{op.outputs[j].name}_fp32"
            after.append(helper.make_node("Cast", [fp32], [target], name=f"{fp32}_cast", to=types[target]))
            target = fp32
        node.output[j] = target
    return [*before, node, *after]


def _current_input(
    original: str, readers: tuple[tuple[str, int], ...], by_name: dict, existing: set[str], plugin: InlinedPlugin
) -> str:
    """The tensor plugin input ``original`` is now: itself if it still exists, else what its readers read."""
    if original in existing:
        return original  # untouched: anything the quantizer put after it belonged to the body
    for reader, slot in readers:
        node = by_name.get(reader)
        if node is not None:
            return node.input[slot]
    raise ModelError(
        f"cannot find what plugin {plugin.node.name!r} read as {original!r} in the quantized graph",
        hint="exclude InlinedPlugins.node_names from quantization",
    )


def _existing_tensors(graph: onnx.GraphProto) -> set[str]:
    return (
        {i.name for i in graph.input}
        | {t.name for t in graph.initializer}
        | {o for n in graph.node for o in n.output if o}
    )


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every tensor shape inference can type (graph inputs, initializers, node outputs)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # an untyped neighbour only costs a Cast check: FP32 is assumed
        inferred = model
    graph = inferred.graph
    types = {t.name: t.data_type for t in graph.initializer}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    return types
