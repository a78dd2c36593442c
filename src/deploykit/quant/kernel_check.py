"""ONNX Runtime's integer kernels checked on this CPU, one quantized compute node at a time.

At level ``basic`` and above ONNX Runtime fuses DequantizeLinear -> Conv/MatMul/Gemm -> QuantizeLinear
into QLinearConv / QLinearMatMul / QGemm, whose integer kernels must compute what the Q/DQ graph
says. On some CPUs they do not: onnxruntime 1.24.4 on a Xeon with AVX-512 VNNI and AMX-INT8 returns
garbage for the output channels after the last full block of 16 (a 3 -> 24 channel Conv: up to 183
output steps off on channels 16-23, MatMul/Gemm with N = 17, 24 or 6906 likewise, different on every
run; reported upstream as onnxruntime#26324), which took a real text recognizer's top-1 agreement from 0.95 as
written to 0.75 as computed. Each node is cut out with its Q/DQ neighbours and run both ways on
inputs drawn from its input's integer grid; a node whose fused result is more than
:data:`MAX_STEPS` output steps off is reported, and the quantize stage keeps it in float.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.errors import ModelError
from deploykit.graph.proto import consumers, producers, static_shapes
from deploykit.quant.reasons import Kept, Reason

if TYPE_CHECKING:
    import onnx

COMPUTE_OPS = ("Conv", "MatMul", "Gemm")
MAX_STEPS = 1.5  # a fused kernel may round once more than the Q/DQ graph; more is a wrong result
RUNS = 2  # the faulty kernels read uninitialised memory: one run can land close by chance
Feed = tuple[tuple[int, ...], str, str]  # an activation input: its shape, its Q scale and zero point names


def miscomputed(qdq: onnx.ModelProto, level: str) -> dict[str, Reason]:
    """Node name -> why, for each quantized compute node whose fused kernel disagrees with its Q/DQ
    definition on this CPU (``qdq``: shapes inferred; ``level``: the build's optimization level)."""
    if level == "disabled":  # nothing is fused: the graph runs as written
        return {}
    made_by, readers = producers(qdq), consumers(qdq)
    inits = {i.name: i for i in qdq.graph.initializer}
    shapes = static_shapes(qdq)  # a dynamic dim taken as 1: the faults depend on channel counts
    rng = np.random.default_rng(0)
    out: dict[str, Reason] = {}
    seen: dict[bytes, float | None] = {}  # kernel signature -> output steps off (None: ORT refused the cut)
    for node in qdq.graph.node:
        if node.op_type not in COMPUTE_OPS:
            continue
        cut = _cut(node, made_by, readers, inits, shapes)
        if cut is None:
            continue
        key = _signature(node, cut, inits)
        if key not in seen:
            seen[key] = _steps_off(qdq, cut, inits, shapes, level, rng)
        steps = seen[key]
        if steps is not None and steps > MAX_STEPS:
            out[node.name] = Kept.KERNEL_MISCOMPUTES(op=node.op_type, steps=steps)
    return out


def _steps_off(
    qdq: onnx.ModelProto,
    cut: tuple[list[Any], dict[str, Feed], float],
    inits: dict[str, Any],
    shapes: dict[str, tuple[int, ...]],
    level: str,
    rng: np.random.Generator,
) -> float | None:
    """How many output steps the fused kernel of one cut-out node is off its Q/DQ graph, worst of RUNS."""
    from onnx import numpy_helper

    from deploykit.graph.run import session_from_onnx

    sub, feeds_spec, step = cut
    feeds = {
        name: _grid_values(rng, shape, numpy_helper.to_array(inits[s]), numpy_helper.to_array(inits[z]))
        for name, (shape, s, z) in feeds_spec.items()
    }
    model = _model(qdq, sub, inits, feeds_spec, shapes)
    try:
        reference = session_from_onnx(model, "as_written", quiet=True, spin=False).infer(feeds)
        fused = session_from_onnx(model, "onnxruntime", level=level, quiet=True, spin=False)  # type: ignore[arg-type]
        name = next(iter(reference))
        worst = max(float(np.max(np.abs(fused.infer(feeds)[name] - reference[name]))) for _ in range(RUNS))
    except ModelError:  # ONNX Runtime refused or failed the cut-out node
        return None  # (a shape taken as 1 it cannot run at): the whole graph's check still judges it
    return worst / (step or max(float(np.max(np.abs(reference[name]))) / 255, 1e-30))


def _signature(node: onnx.NodeProto, cut: tuple[list[Any], dict[str, Feed], float], inits: dict[str, Any]) -> bytes:
    """What picks the integer kernel and its code path: the op and its attributes, the activation
    shapes, the weight and parameter shapes and types, whether the output is requantized. Nodes that
    share it run the same kernel on the same shapes (the faults follow channel counts, onnxruntime#26324),
    so each signature is run once (a text detector's 83 compute nodes have far fewer)."""
    sub, feeds, step = cut
    weights = sorted((tuple(inits[t].dims), inits[t].data_type) for n in sub for t in n.input if t in inits)
    parts = [
        node.op_type,
        [a.SerializeToString() for a in node.attribute],
        sorted(s for s, _, _ in feeds.values()),
        weights,
        [n.op_type for n in sub],
        step > 0,
    ]
    return repr(parts).encode()


def _cut(
    node: onnx.NodeProto,
    made_by: dict[str, Any],
    readers: dict[str, list[Any]],
    inits: dict[str, Any],
    shapes: dict[str, tuple[int, ...]],
) -> tuple[list[Any], dict[str, Feed], float] | None:
    """The node with its input Q/DQ (weights: their DQ) and output Q -> DQ, in graph order; the float inputs of the
    activation quantizers with their shapes and Q parameters; the output step (0: unquantized).
    None when the node does not read only dequantized tensors and constants (nothing is fused)."""
    from onnx import numpy_helper

    sub, feeds, quantized = [], {}, False
    for tensor in node.input:
        if not tensor or tensor in inits:
            continue
        dq = made_by.get(tensor)
        if dq is None or dq.op_type != "DequantizeLinear":
            return None
        quantized = True
        if dq.input[0] in inits:
            sub.append(dq)  # a weight
            continue
        q = made_by.get(dq.input[0])
        if q is None or q.op_type != "QuantizeLinear" or q.input[0] not in shapes or len(q.input) < 3:
            return None
        if not all(p in inits and numpy_helper.to_array(inits[p]).size == 1 for p in q.input[1:3]):
            return None  # per-tensor activation scales only
        sub += [q, dq]
        feeds[q.input[0]] = (shapes[q.input[0]], q.input[1], q.input[2])
    if not quantized or not feeds:
        return None
    sub.append(node)
    step = 0.0
    after = readers.get(node.output[0], [])
    if len(after) == 1 and after[0].op_type == "QuantizeLinear" and after[0].input[1] in inits:
        q = after[0]
        dq = next((r for r in readers.get(q.output[0], []) if r.op_type == "DequantizeLinear"), None)
        if dq is not None:
            sub += [q, dq]
            step = float(numpy_helper.to_array(inits[q.input[1]]).max())
    return sub, feeds, step


def _grid_values(rng: np.random.Generator, shape: tuple[int, ...], scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """Float values that quantize exactly to integers spread over the whole grid of ``zero``'s type."""
    info = np.iinfo(zero.dtype)
    q = rng.integers(info.min, info.max + 1, size=shape)
    return ((q - zero.astype(np.int64)) * scale.astype(np.float64)).astype(np.float32)


def _model(
    source: onnx.ModelProto,
    nodes: list[Any],
    inits: dict[str, Any],
    feeds: dict[str, Feed],
    shapes: dict[str, tuple[int, ...]],
) -> onnx.ModelProto:
    from onnx import TensorProto, helper

    used = {t for n in nodes for t in n.input if t in inits}
    result = nodes[-1].output[0]  # the compute node's, or its output DQ's
    graph = helper.make_graph(
        nodes,
        "kernel_check",
        [helper.make_tensor_value_info(t, TensorProto.FLOAT, shape) for t, (shape, _, _) in feeds.items()],
        [helper.make_tensor_value_info(result, TensorProto.FLOAT, shapes.get(result))],
        [inits[t] for t in sorted(used)],
    )
    return helper.make_model(graph, opset_imports=list(source.opset_import), ir_version=source.ir_version)
