"""Helpers over the ONNX protobuf that surgery, quantization, the backends and the CLI share.

They work on the protobuf directly (no onnx-graphsurgeon round trip), so a pass that only rewires
a few nodes keeps everything else byte-for-byte: names, metadata, value_info, functions. Functions
taking a ``graph`` accept a ``ModelProto`` too and then work on its main graph.

    structure   producers/consumers (subgraph reads count), node_reads, real_inputs, node_label
    validity    graph_problems (dangling inputs, cycles), find_cycle, toposort, remove_unused
    constants   constant_value, constant_node_value, constants_to_initializers
    types       infer_shapes (lenient), tensor_types, float_tensors, graph_input_shapes, opset_version,
                ensure_opset, op_histogram
    outputs     expose_tensors (intermediate tensors as outputs, for taps and diagnoses)
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnx

    Graph = onnx.GraphProto | onnx.ModelProto  # functions taking a graph accept a model too

FLOAT_TYPES = frozenset({1, 10, 16})  # FLOAT, FLOAT16, BFLOAT16
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft", "ai.onnx.preview.training"})


def main_graph(graph: Graph) -> onnx.GraphProto:
    """The graph itself, or a model's main graph."""
    return getattr(graph, "graph", graph)  # a GraphProto has no ``graph`` field


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A deep copy: passes never modify the model they were given."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def node_label(node: onnx.NodeProto, index: int | None = None) -> str:
    """``'conv1' (Conv)``, or ``#3 (Conv)`` for an unnamed node: how errors name a node."""
    op = f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
    if node.name:
        return f"{node.name!r} ({op})"
    if index is not None:
        return f"#{index} ({op}, output {node.output[0]!r})" if node.output else f"#{index} ({op})"
    return f"{op} -> {node.output[0]!r}" if node.output else op


def node_attribute(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    """The value of a node's attribute ``name`` (a number, list, tensor, graph ...), or ``default``."""
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held in a node's attributes (If branches, Loop and Scan bodies)."""
    import onnx

    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def outer_names(node: onnx.NodeProto) -> set[str]:
    """Names a node's subgraphs read from the enclosing scope (its implicit inputs)."""
    found: set[str] = set()
    for g in subgraphs(node):
        defined = {i.name for i in g.input} | {i.name for i in g.initializer}
        defined |= {o for n in g.node for o in n.output}
        for n in g.node:
            found |= {i for i in n.input if i and i not in defined}
            found |= {i for i in outer_names(n) if i not in defined}
        found |= {o.name for o in g.output if o.name not in defined}
    return found


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Every tensor a node reads: its inputs, then what its subgraphs take from outside."""
    reads = [i for i in node.input if i]
    return reads + sorted(outer_names(node) - set(reads))


def producers(graph: Graph) -> dict[str, onnx.NodeProto]:
    """Tensor name -> the node that makes it (main graph)."""
    return {o: n for n in main_graph(graph).node for o in n.output if o}


def consumers(graph: Graph) -> dict[str, list[onnx.NodeProto]]:
    """Tensor name -> the nodes that read it (subgraph reads count for the node holding them)."""
    out: dict[str, list[onnx.NodeProto]] = collections.defaultdict(list)
    for n in main_graph(graph).node:
        for name in dict.fromkeys(node_reads(n)):
            out[name].append(n)
    return out


def graph_output_names(graph: onnx.GraphProto) -> set[str]:
    return {o.name for o in graph.output}


def initializer_names(graph: onnx.GraphProto) -> set[str]:
    return {i.name for i in graph.initializer} | {i.values.name for i in graph.sparse_initializer}


def real_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (old exporters list weights as inputs too)."""
    weights = initializer_names(graph)
    return [i for i in graph.input if i.name not in weights]


def graph_input_shapes(model: Graph) -> dict[str, list[int | str]]:
    """Real graph inputs (not initializers) with their dims; unknown dims are ''."""
    graph = main_graph(model)
    initializers = {i.name for i in graph.initializer}
    out = {}
    for vi in graph.input:
        if vi.name in initializers:
            continue
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
    return out


def static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape as inferred (and the initializers'); a named (dynamic) dim counts as 1, as
    batch dims usually are (the callers want ratios or channel counts, not the exact size)."""
    out = {}
    for v in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            out[v.name] = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in v.type.tensor_type.shape.dim)
    out.update({i.name: tuple(i.dims) for i in model.graph.initializer})
    return out


def custom_ops(model: onnx.ModelProto) -> list[str]:
    """``domain::Op`` of nodes in non-standard domains that no model-local function defines."""
    local = {(f.domain, f.name) for f in model.functions}
    ops = {
        f"{n.domain}::{n.op_type}"
        for n in model.graph.node
        if n.domain not in STANDARD_DOMAINS and (n.domain, n.op_type) not in local
    }
    return sorted(ops)


def graph_problems(graph: onnx.GraphProto, outer: Iterable[str] = ()) -> list[str]:
    """Structural problems the checker reports badly: tensors nothing provides, and cycles.

    Returns one line per problem, naming the node; empty when the graph is sound. Node order does
    not matter here (an unsorted but acyclic graph is fine: ``sanitize`` sorts it).
    """
    known = set(outer) | {i.name for i in graph.input} | initializer_names(graph)
    made = producers(graph)
    problems = []
    for index, n in enumerate(graph.node):
        for name in node_reads(n):
            if name not in known and name not in made:
                problems.append(
                    f"node {node_label(n, index)} reads {name!r}, which no node, graph input "
                    "or initializer provides (a dangling input)"
                )
    for name in (o.name for o in graph.output):
        if name not in known and name not in made:
            problems.append(f"graph output {name!r} is produced by no node and is no graph input")
    cycle = find_cycle(graph)
    if cycle:
        index = {id(n): i for i, n in enumerate(graph.node)}
        path = " -> ".join(node_label(n, index[id(n)]) for n in cycle)
        problems.append(f"nodes form a cycle: {path} -> back to the first")
    return problems


def find_cycle(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """One cycle of nodes (in data-flow order), or [] when the graph is acyclic."""
    made = producers(graph)
    state: dict[int, int] = {}  # id(node) -> 1 on the stack, 2 done
    for start in graph.node:
        if id(start) in state:
            continue
        stack: list[tuple[Any, Iterator[str]]] = [(start, iter(node_reads(start)))]
        state[id(start)] = 1
        while stack:
            node, reads = stack[-1]
            name = next(reads, None)
            if name is None:
                state[id(node)] = 2
                stack.pop()
                continue
            parent = made.get(name)
            if parent is None or state.get(id(parent)) == 2:
                continue
            if state.get(id(parent)) == 1:  # back edge: the cycle is the stack from parent on
                chain = [n for n, _ in stack]
                return list(reversed(chain[chain.index(parent) :]))
            state[id(parent)] = 1
            stack.append((parent, iter(node_reads(parent))))
    return []


def toposort(graph: onnx.GraphProto) -> None:
    """Order nodes so every tensor is made before it is read (stable for already sorted graphs)."""
    made = producers(graph)
    done: set[int] = set()
    order = []
    for start in graph.node:
        stack = [(start, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in done:
                continue
            if expanded:
                done.add(id(node))
                order.append(node)
                continue
            stack.append((node, True))
            for name in reversed(node_reads(node)):
                parent = made.get(name)
                if parent is not None and id(parent) not in done:
                    stack.append((parent, False))
    if [id(n) for n in order] != [id(n) for n in graph.node]:
        copies = [_copy_node(n) for n in order]
        del graph.node[:]
        graph.node.extend(copies)


def _copy_node(node: onnx.NodeProto) -> onnx.NodeProto:
    import onnx

    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out


def remove_nodes(graph: onnx.GraphProto, doomed: Iterable[onnx.NodeProto]) -> None:
    gone = {id(n) for n in doomed}
    keep = [_copy_node(n) for n in graph.node if id(n) not in gone]
    del graph.node[:]
    graph.node.extend(keep)


def remove_unused(graph: onnx.GraphProto) -> int:
    """Drop nodes nothing reads (transitively) and initializers no node reads; return nodes dropped."""
    needed = graph_output_names(graph)
    kept = []
    for n in reversed(graph.node):
        if any(o in needed for o in n.output):
            kept.append(n)
            needed |= set(node_reads(n))
    dropped = len(graph.node) - len(kept)
    if dropped:
        alive = {id(k) for k in kept}
        remove_nodes(graph, [n for n in graph.node if id(n) not in alive])
    used = needed | {i.name for i in graph.input}
    unused = [t for t in graph.initializer if t.name not in used]
    for t in unused:
        graph.initializer.remove(t)
    stale = [v for v in graph.value_info if v.name not in needed]
    for v in stale:
        graph.value_info.remove(v)
    return dropped


def constant_value(graph: onnx.GraphProto, name: str) -> np.ndarray | None:
    """The value of ``name`` when it is an initializer (not overridable as an input) or a Constant node."""
    if name in {i.name for i in graph.input}:
        return None  # an initializer listed as an input is a default the caller may override
    for t in graph.initializer:
        if t.name == name:
            return tensor_array(t)
    node = producers(graph).get(name)
    if node is not None and node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
        return constant_node_value(node)
    return None


def tensor_array(tensor: onnx.TensorProto) -> np.ndarray:
    """A tensor's value; one marked for external data but still holding it (split_large_weights) too."""
    import onnx
    from onnx import numpy_helper

    if tensor.data_location == onnx.TensorProto.EXTERNAL and tensor.HasField("raw_data"):
        inline = onnx.TensorProto()
        inline.CopyFrom(tensor)
        inline.data_location = onnx.TensorProto.DEFAULT
        del inline.external_data[:]
        return numpy_helper.to_array(inline)
    return numpy_helper.to_array(tensor)


def constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value of a ``Constant`` node in any of its attribute forms (``value``, ``value_float``, ...)."""
    import numpy as np
    from onnx import helper, numpy_helper

    if not node.attribute:
        return None
    attr = node.attribute[0]
    value = helper.get_attribute_value(attr)
    if attr.name == "value":
        return numpy_helper.to_array(value)
    if attr.name in ("value_float", "value_int"):
        return np.array(value, dtype=np.float32 if attr.name == "value_float" else np.int64)
    if attr.name in ("value_floats", "value_ints"):
        return np.array(list(value), dtype=np.float32 if attr.name == "value_floats" else np.int64)
    return None  # sparse values and strings: not ours to fold


def constants_to_initializers(graph: Graph) -> int:
    """Turn main-graph Constant nodes into initializers of the same name; return how many.

    Every attribute form counts (``value``, ``value_float(s)``, ``value_int(s)``: quantizers see
    only initializer weights, whatever form an exporter wrote); sparse and string constants stay.
    A Constant that is itself a graph output stays a node (an output must be computed). Done here
    rather than by onnx-graphsurgeon, which reads ``value_floats`` as float64 and so changes the
    type of what it folds.
    """
    from onnx import numpy_helper

    graph = main_graph(graph)
    outputs = {o.name for o in graph.output}
    doomed = []
    for node in graph.node:
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or node.output[0] in outputs:
            continue
        value = constant_node_value(node)
        if value is not None:
            graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
            doomed.append(node)
    remove_nodes(graph, doomed)
    return len(doomed)


def infer_shapes(model: onnx.ModelProto, notes: list[str] | None = None) -> onnx.ModelProto:
    """ONNX shape inference; a graph it cannot complete goes on without it (``notes`` gets why)."""
    try:
        return shapes_inferred(model)
    except Exception as e:  # inference failures are data, not a reason to stop
        if notes is not None:
            notes.append(f"shape inference failed, continuing without it: {str(e).splitlines()[0]}")
        return model


# Initializers of more bytes than this go into shape inference as typed graph inputs, without their data:
# ONNX's inference serializes the whole model, weights included (ViT-S, 96 MB: 0.1-0.3 s a call, and a
# quantize stage makes a dozen calls), and it reads the values of shape-like tensors only, which are small.
WEIGHT_BYTES = 4096


def shapes_inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """What ``onnx.shape_inference.infer_shapes(model)`` returns, inferred on a copy whose initializers of
    more than :data:`WEIGHT_BYTES` are typed graph inputs without data; raises as ONNX's does."""
    import onnx

    light, heavy = without_initializers(model, lambda t: t.ByteSize() > WEIGHT_BYTES)
    if not heavy:
        return onnx.shape_inference.infer_shapes(model)
    listed = {i.name for i in model.graph.input}
    added = [t for t in heavy if t.name not in listed]
    light.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in added)
    out = onnx.shape_inference.infer_shapes(light)
    for _ in added:
        out.graph.input.pop()
    del out.graph.initializer[:]
    out.graph.initializer.extend(model.graph.initializer)
    return out


def initializer_bytes(model: onnx.ModelProto) -> int:
    """The bytes of ``model``'s initializers, from their shapes (``ByteSize`` serializes them all)."""
    import onnx

    return sum(
        math.prod(t.dims) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        for t in model.graph.initializer
        if t.data_type not in (onnx.TensorProto.UNDEFINED, onnx.TensorProto.STRING)
    )


def without_initializers(
    model: onnx.ModelProto, left_out: Callable[[onnx.TensorProto], bool]
) -> tuple[onnx.ModelProto, list[onnx.TensorProto]]:
    """A copy of ``model`` without the initializers ``left_out`` picks (the weights: copying them is
    most of a copy's cost), and those initializers, in graph order."""
    import onnx

    light = _copy_fields(model, onnx.ModelProto(), skip="graph")
    _copy_fields(model.graph, light.graph, skip="initializer")
    heavy = []
    for tensor in model.graph.initializer:
        if left_out(tensor):
            heavy.append(tensor)
        else:
            light.graph.initializer.append(tensor)
    return light, heavy


def digest_model(model: onnx.ModelProto) -> str:
    """A digest of an in-memory model's content: its bytes without the raw weights, then each weight's
    header and bytes where they lie. Serializing a 95 MB transformer only to hash it cost 0.19 s beside
    the hash's 0.08 s, once per graph a quantize judges or files statistics under."""
    import hashlib
    import json

    light, raw = without_initializers(model, lambda t: t.HasField("raw_data"))
    graph = light.SerializeToString()
    h = hashlib.sha256(len(graph).to_bytes(8, "little") + graph)
    for t in raw:
        data = t.raw_data
        header = [t.name, t.data_type, list(t.dims), t.data_location, t.doc_string, len(data)]
        h.update(json.dumps(header).encode())
        h.update(data)
    return h.hexdigest()


def _copy_fields(source: Any, target: Any, skip: str) -> Any:
    """``target`` with every set field of the proto ``source`` but ``skip`` copied in; returns it."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)
    return target


def float_tensors(model: Graph) -> list[str]:
    """Float activations: graph inputs and node outputs of a float type, in graph order."""
    graph = main_graph(model)
    types = tensor_types(graph)
    initializers = {i.name for i in graph.initializer}
    names = [i.name for i in graph.input if i.name not in initializers]
    names += [o for n in graph.node for o in n.output if o]
    return [t for t in dict.fromkeys(names) if types.get(t) in FLOAT_TYPES]


def tensor_types(graph: Graph) -> dict[str, int]:
    """Element type of every tensor the graph declares (inputs, outputs, value_info, initializers)."""
    g = main_graph(graph)
    out = {
        v.name: v.type.tensor_type.elem_type
        for v in [*g.input, *g.value_info, *g.output]
        if v.type.HasField("tensor_type")
    }
    out.update({i.name: i.data_type for i in g.initializer})
    for node in g.node:  # Constant outputs are often missing from value_info
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value":
                    out[node.output[0]] = a.t.data_type
    return out


def opset_version(model: onnx.ModelProto, domain: str = "") -> int:
    """The model's opset for ``domain`` (0 when it imports none)."""
    aliases = ("", "ai.onnx") if domain in ("", "ai.onnx") else (domain,)
    return next((o.version for o in model.opset_import if o.domain in aliases), 0)


def ensure_opset(model: onnx.ModelProto, domain: str, version: int = 1) -> None:
    if not any(o.domain == domain for o in model.opset_import):
        entry = model.opset_import.add()
        entry.domain, entry.version = domain, version


def op_histogram(graph: onnx.GraphProto) -> dict[str, int]:
    """Op type -> count; custom-domain ops are written ``domain::Op``."""
    ops = (n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}" for n in graph.node)
    return dict(sorted(collections.Counter(ops).items()))


def expose_tensors(model: onnx.ModelProto, names: Iterable[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose outputs also include the intermediate tensors ``names`` (main graph).

    An exposed tensor keeps the type the graph declares for it; one of unknown type is left untyped,
    and ONNX Runtime types it itself.
    """
    from onnx import helper

    out = copy_model(model)
    types = tensor_types(out)
    present = {o.name for o in out.graph.output}
    for name in names:
        if name in present:
            continue
        if types.get(name):
            out.graph.output.append(helper.make_tensor_value_info(name, types[name], None))
        else:
            out.graph.output.add().name = name
        present.add(name)
    return out
