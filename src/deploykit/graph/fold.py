"""Constant weight chains computed once, for graphs evaluated as written.

A TensorRT-bound graph keeps its weights in FP32 behind a QuantizeLinear/DequantizeLinear pair (TensorRT
folds the pair when it builds). Evaluated as written (every optimization off), ONNX Runtime runs those
pairs on every inference, and its per-channel QuantizeLinear along a MatMul weight's last axis quantizes
one element at a time: the 77 weights of a ViT-S took 0.51 of its 0.65 s a run (0.2 s folded).
Their values do not depend on the input, so :func:`fold_constant_chains` has ONNX Runtime compute them
once, with the same kernels, and the graph reads them as initializers that are also graph inputs (never
fed). ONNX Runtime does not treat such an initializer as a constant, so it does not prepack it, as it
could not prepack the tensor it used to compute; every other weight is prepacked as before. Both matter:
a prepacked MatMul sums in another order, and that last-bit difference moves activations across
quantization steps (the folded weights prepacked: 0.1 on the ViT-S's output; no weight prepacked: the
tensorrt-flavour search on it chose another mix). So the folded graph computes the same bits (tested).

The last folds are kept by content: method ``auto``'s range sets and the search's patches differ in
activation scales, not in weights.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from deploykit.graph.proto import copy_model, node_reads

if TYPE_CHECKING:
    from collections.abc import Iterable

    import onnx

FOLDED_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "Cast"})
_FLOATS = frozenset({1, 10, 11})  # FLOAT, FLOAT16, DOUBLE: what a folded tensor may be
_KEPT_BYTES = 1 << 29  # folds remembered, in bytes of values (a ViT-S's weights: 88 MB)
_cache: OrderedDict[str, list[np.ndarray]] = OrderedDict()
_lock = threading.Lock()


def fold_constant_chains(model: onnx.ModelProto, keep: Iterable[str] = ()) -> tuple[onnx.ModelProto, int]:
    """``model`` with every chain of :data:`FOLDED_OPS` nodes that reads only initializers replaced by
    the float values it computes, and how many nodes went (0: ``model`` itself, unchanged). Tensors in
    ``keep`` (taps) and the graph's outputs stay computed by their nodes."""
    from onnx import helper, numpy_helper

    graph = model.graph
    stay = {o.name for o in graph.output} | set(keep)
    folded, boundary = _foldable(graph, stay)
    if not boundary:
        return model, 0
    nodes = [graph.node[k] for k in sorted(folded)]
    try:
        values = _values(model, nodes, boundary)
    except Exception:  # ONNX Runtime's own errors are plain Exceptions
        return model, 0  # the session over the whole graph reports what it refuses, as without folding
    out = copy_model(model)
    kept = [n for k, n in enumerate(out.graph.node) if k not in folded]
    del out.graph.node[:]
    out.graph.node.extend(kept)
    read = {i for n in kept for i in node_reads(n)} | stay
    inits = [i for i in out.graph.initializer if i.name in read]
    del out.graph.initializer[:]
    out.graph.initializer.extend(inits)
    out.graph.initializer.extend(numpy_helper.from_array(v, name) for name, v in zip(boundary, values, strict=True))
    out.graph.input.extend(  # not constant to ONNX Runtime: not prepacked, as the computed tensor was not
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for name, v in zip(boundary, values, strict=True)
    )
    return out, len(nodes)


def _foldable(graph: onnx.GraphProto, stay: set[str]) -> tuple[set[int], list[str]]:
    """The indices of the nodes to fold and the tensors of theirs something else reads: nodes of
    :data:`FOLDED_OPS` computing from initializers only (graph order is topological; an initializer
    that is also a graph input can be fed, so it is not constant), less the chains that end in a
    non-float tensor (INT8 a kernel reads, FP8) or in one that must stay computed."""
    types = {i.name: i.data_type for i in graph.initializer}
    undone: set[int] = set()
    while True:
        folded = _constant_nodes(graph, undone)
        made = {o: k for k in folded for o in graph.node[k].output}
        wanted = sorted({i for k, n in enumerate(graph.node) if k not in folded for i in node_reads(n) if i in made})
        undo = {made[t] for t in wanted if _output_type(graph.node[made[t]], types) not in _FLOATS}
        undo |= {made[t] for t in stay if t in made}
        if not undo:
            return folded, wanted
        undone |= undo  # they, and what reads them, stay computed; their inputs are checked next round


def _constant_nodes(graph: onnx.GraphProto, undone: set[int]) -> set[int]:
    """The :data:`FOLDED_OPS` nodes (less ``undone``) whose inputs are all constant."""
    const = {i.name for i in graph.initializer} - {i.name for i in graph.input}
    folded: set[int] = set()
    for k, node in enumerate(graph.node):
        standard = node.domain in ("", "ai.onnx")
        if k not in undone and node.op_type in FOLDED_OPS and standard and all(not i or i in const for i in node.input):
            folded.add(k)
            const.update(node.output)
    return folded


def _output_type(node: onnx.NodeProto, types: dict[str, int]) -> int:
    attrs = {a.name: a for a in node.attribute}
    if node.op_type == "Cast":
        return attrs["to"].i
    if "output_dtype" in attrs and attrs["output_dtype"].i:
        return attrs["output_dtype"].i
    if node.op_type == "DequantizeLinear":
        return types.get(node.input[1], 0)  # the scale's type
    zero_point = node.input[2] if len(node.input) > 2 else ""
    return types.get(zero_point, 0) if zero_point else 2  # Q: the zero point's type, else UINT8


def _values(model: onnx.ModelProto, nodes: list[onnx.NodeProto], boundary: list[str]) -> list[np.ndarray]:
    """The boundary tensors' values: remembered by content, else computed by ONNX Runtime."""
    h = hashlib.blake2b(digest_size=20)
    read = {i for n in nodes for i in n.input}
    for init in model.graph.initializer:
        if init.name in read:
            h.update(init.SerializeToString())
    for node in nodes:
        h.update(node.SerializeToString())
    h.update("\0".join(boundary).encode())
    key = h.hexdigest()
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    values = _compute(model, nodes, boundary)
    size = sum(v.nbytes for v in values)
    with _lock:
        if size <= _KEPT_BYTES:
            _cache[key] = values
        while sum(v.nbytes for vs in _cache.values() for v in vs) > _KEPT_BYTES:
            _cache.popitem(last=False)
    return values


def _compute(model: onnx.ModelProto, nodes: list[onnx.NodeProto], boundary: list[str]) -> list[np.ndarray]:
    """The boundary tensors' values, computed by ONNX Runtime from the folded nodes alone (a session of
    its own: the as-written evaluator folds before it opens a session, and what stands in for that
    evaluator must not stand in for this)."""
    import onnxruntime as ort
    from onnx import helper

    read = {i for n in nodes for i in n.input}
    sub = helper.make_graph(
        nodes,
        "folded",
        [],
        [helper.make_empty_tensor_value_info(t) for t in boundary],
        [i for i in model.graph.initializer if i.name in read],
    )
    small = helper.make_model(sub, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(small.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return list(session.run(boundary, {}))
