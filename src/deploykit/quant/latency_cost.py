"""What keeping a layer group in higher precision costs in latency, per target flavour.

* ``onnxruntime``: **measured** on this CPU. ONNX Runtime's profiler times every kernel of the base
  graph (every group at the stage's precision) and of the graph with every group in FP32, at the
  build's optimization level, in interleaved rounds; a group's cost is its FP32 kernels' time minus
  its quantized kernels' time (the fused QLinearConv and the Q/DQ nodes inside the group), plus the
  Q/DQ kernels it adds at its border. It can be negative: a depthwise convolution often runs slower
  in INT8 than in FP32 here.
* ``tensorrt``: **estimated** from FLOPs and bytes (no GPU is needed to search), a roofline per
  compute node: max(FLOPs / peak, bytes / bandwidth) at each precision's datasheet peak
  (:data:`PEAKS`: an H100 SXM's dense tensor-core rates, FP32 as TF32, which TensorRT enables by
  default). Only ratios matter to the search, so the absolute numbers need not match a given GPU.

:func:`measure` times whole graphs (the FP32 graph, the base, the mix a search chose) in
interleaved rounds, for the accuracy-vs-latency table.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.quant.groups import Group

if TYPE_CHECKING:
    import onnx

# TFLOPS (dense) and TB/s: NVIDIA H100 SXM datasheet; FP32 convolutions run as TF32.
PEAKS = {"fp32": 495.0, "fp16": 990.0, "fp8": 1979.0, "int8": 1979.0, "int4": 1979.0}
BANDWIDTH_TBS = 3.35
BYTES = {"fp32": 4.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
_QDQ = ("QuantizeLinear", "DequantizeLinear")


@dataclass(frozen=True)
class Costs:
    """Latency of each group at each precision, relative to its base precision, in ``unit``."""

    delta: dict[str, dict[str, float]]  # group -> precision -> latency added over the base precision
    base: float  # the whole base graph (every group at the base precision)
    top: float  # every group at the highest precision offered (FP32 on the CPU)
    unit: str
    method: str  # a sentence for reports

    def of(self, patch: Mapping[str, str]) -> float:
        """Latency of the base graph with ``patch`` applied (first order: group costs add up)."""
        return self.base + sum(self.delta.get(g, {}).get(p, 0.0) for g, p in patch.items())

    def to_dict(self) -> dict[str, Any]:
        return {"delta": self.delta, "base": self.base, "top": self.top, "unit": self.unit, "method": self.method}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Costs:
        return cls(data["delta"], data["base"], data["top"], data["unit"], data["method"])


# -- onnxruntime: the profiler -----------------------------------------------------------------------

def profiled(base: onnx.ModelProto, top: onnx.ModelProto, groups: Mapping[str, Group], sample: dict[str, np.ndarray],
             level: str, top_precision: str = "fp32", rounds: int = 3, budget_s: float = 2.0) -> Costs:
    """Per-group costs from ONNX Runtime's profiler (``top``: every group at ``top_precision``); each
    round profiles as many runs as fit ``budget_s`` (small graphs get many: their kernels are short).

    A group raised among quantized neighbours also pays for the conversions at its border: its
    inputs are dequantized and its outputs quantized by kernels of their own (in the base graph they
    are fused into the QLinear kernels). Those are priced per element at the median rate of the
    standalone Q/DQ kernels the base graph already runs.
    """
    from deploykit.graph.proto import consumers, infer_shapes, producers, static_shapes

    runs = _runs(top, sample, level, budget_s / (2 * rounds))
    base_t, top_t = _kernel_times([base, top], sample, level, rounds, runs)
    shapes = static_shapes(infer_shapes(base))
    rate = _qdq_rate(base, base_t, shapes)
    made_by, readers = producers(base), consumers(base)
    delta = {}
    for name, group in groups.items():
        kernels = _kernels(base, group)
        low = sum(t for n, t in base_t.items() if n in kernels)
        wide = sum(t for n, t in top_t.items() if n in group.nodes)
        crossing = _border(base, group, made_by, readers)
        border = rate * sum(float(np.prod(shapes.get(t, (0,)), dtype=np.float64)) for t in crossing)
        delta[name] = {top_precision: (wide - low + border) / 1e3}
    return Costs(delta, sum(base_t.values()) / 1e3, sum(top_t.values()) / 1e3, "ms",
                 f"ONNX Runtime profiler on this CPU at optimization level {level} (kernel time per node, "
                 f"median of {rounds} interleaved rounds; Q/DQ at a raised group's border at "
                 f"{rate * 1e3:.3g} ns per element)")


def _qdq_rate(base: onnx.ModelProto, times: dict[str, float], shapes: dict[str, tuple[int, ...]]) -> float:
    """Median microseconds per element of the Q/DQ kernels that run on their own in the base graph."""
    rates = []
    for node in base.graph.node:
        size = float(np.prod(shapes.get(node.input[0], (0,)), dtype=np.float64)) if node.input else 0.0
        if node.op_type in _QDQ and node.name in times and size > 0:
            rates.append(times[node.name] / size)
    return float(np.median(rates)) if rates else 0.0


def _border(base: onnx.ModelProto, group: Group, made_by: dict[str, onnx.NodeProto],
            readers: dict[str, list[onnx.NodeProto]]) -> list[str]:
    """Activation tensors crossing the group's border through a Q/DQ pair: what a raised group reads
    dequantized and writes quantized by separate kernels."""
    members = set(group.nodes)
    inits = {i.name for i in base.graph.initializer}
    out = []
    for node in (n for n in base.graph.node if n.name in members):
        for tensor in node.input:
            dq = made_by.get(tensor)
            if dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] not in inits:
                source = made_by.get(dq.input[0])
                if source is None or source.op_type != "QuantizeLinear" or source.input[0] in inits:
                    continue
                producer = made_by.get(source.input[0])
                if producer is None or producer.name not in members:
                    out.append(tensor)
        for o in node.output:
            after = [d for q in readers.get(o, []) if q.op_type == "QuantizeLinear" for d in readers.get(q.output[0], [])]
            if any(r.name not in members for d in after for r in readers.get(d.output[0], [])):
                out.append(o)
    return out


def _kernels(base: onnx.ModelProto, group: Group) -> set[str]:
    """The group's nodes in the quantized graph and the Q/DQ (and Cast) nodes between them."""
    from deploykit.graph.proto import producers

    made_by = producers(base)
    members, out = set(group.nodes), set(group.nodes)
    for node in (n for n in base.graph.node if n.name in members):
        for tensor in node.input:
            chain, source = [], made_by.get(tensor)
            while source is not None and source.op_type in (*_QDQ, "Cast"):
                chain.append(source.name)
                source = made_by.get(source.input[0])
            if source is not None and source.name in members:
                out.update(chain)
    return out


def _runs(model: onnx.ModelProto, sample: dict[str, np.ndarray], level: str, budget_s: float) -> int:
    from deploykit.graph.run import session_from_onnx

    run = session_from_onnx(model, "onnxruntime", level=level).timed_runner(sample)
    run()
    start = time.perf_counter()
    run()
    return int(min(50, max(2, budget_s / max(time.perf_counter() - start, 1e-6))))


def _kernel_times(models: list[onnx.ModelProto], sample: dict[str, np.ndarray], level: str, rounds: int,
                  runs: int) -> list[dict[str, float]]:
    """Median over rounds of each node's kernel time (microseconds per run), graphs interleaved."""
    per_model: list[dict[str, list[float]]] = [{} for _ in models]
    with tempfile.TemporaryDirectory(prefix="deploykit-profile-") as tmp:
        for r in range(rounds):
            for i, model in enumerate(models):
                for node, t in _profile_once(model, sample, level, runs, Path(tmp) / f"m{i}r{r}").items():
                    per_model[i].setdefault(node, []).append(t)
    return [{node: statistics.median(ts) for node, ts in m.items()} for m in per_model]


def _profile_once(model: onnx.ModelProto, sample: dict[str, np.ndarray], level: str, runs: int,
                  prefix: Path) -> dict[str, float]:
    from deploykit.graph.run import session_from_onnx

    session = session_from_onnx(model, "onnxruntime", level=level, profile_prefix=str(prefix))
    run = session.timed_runner(sample)  # the first run (allocations, kernel selection) is averaged in
    for _ in range(runs):
        run()
    path = Path(session.end_profiling())
    events = json.loads(path.read_text())
    path.unlink(missing_ok=True)
    out: dict[str, float] = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            node = name[: -len("_kernel_time")]
            out[node] = out.get(node, 0.0) + e["dur"] / (runs + 1)
    return out


# -- tensorrt: a roofline ----------------------------------------------------------------------------

def roofline(reference: onnx.ModelProto, groups: Mapping[str, Group], steps: tuple[str, ...],
             base_precision: str, activations: str) -> Costs:
    """Per-group costs from FLOPs and bytes (microseconds at :data:`PEAKS`).

    Args:
        reference: the FP32 graph (shapes are inferred on it; node names match the groups').
        groups: the quantized graph's groups by name.
        steps: the precisions offered (the base first).
        base_precision: int8, fp8 or int4 (int4 quantizes weights only).
        activations: what unquantized tensors are stored in (the float rest's precision).
    """
    from deploykit.graph.proto import infer_shapes, static_shapes

    model = infer_shapes(reference)
    shapes = static_shapes(model)
    nodes = {n.name: n for n in model.graph.node}
    delta, base_total, top_total = {}, 0.0, 0.0
    for name, group in groups.items():
        cost = {p: sum(_node_us(nodes[n], shapes, p, base_precision, activations) for n in group.nodes if n in nodes)
                for p in steps}
        delta[name] = {p: float(cost[p] - cost[steps[0]]) for p in steps[1:]}
        base_total += cost[steps[0]]
        top_total += cost[steps[-1]]
    return Costs(delta, base_total, top_total, "us (estimate)",
                 "roofline estimate from FLOPs and bytes (no GPU measured): max(FLOPs / peak, bytes / bandwidth) "
                 f"per compute node at H100 SXM datasheet rates ({', '.join(f'{k} {v:g}' for k, v in PEAKS.items())} "
                 f"TFLOPS, {BANDWIDTH_TBS} TB/s)")


def _node_us(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]], precision: str, base: str,
             activations: str) -> float:
    """One node's roofline time at ``precision`` (elementwise nodes fuse into their compute node: 0)."""
    flops = _flops(node, shapes)
    if flops == 0.0:
        return 0.0
    act = activations if precision == "int4" or (precision == base == "int4") else precision
    act_bytes = BYTES["fp16" if act == "int4" else act]
    io = sum(np.prod(shapes.get(t, (0,)), dtype=np.float64) for t in (*node.input[:1], *node.output[:1]))
    weights = float(np.prod(shapes.get(node.input[1], (0,)), dtype=np.float64)) if len(node.input) > 1 else 0.0
    bytes_ = io * act_bytes + weights * BYTES[precision]
    return float(max(flops / (PEAKS[precision] * 1e6), bytes_ / (BANDWIDTH_TBS * 1e6)))


def _flops(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> float:
    out = shapes.get(node.output[0]) if node.output else None
    if node.op_type in ("Conv", "ConvTranspose") and out and len(node.input) > 1 and node.input[1] in shapes:
        w = shapes[node.input[1]]
        if node.op_type == "Conv":
            return 2.0 * float(np.prod(out, dtype=np.float64)) * float(np.prod(w[1:], dtype=np.float64))
        x = shapes.get(node.input[0])
        return 2.0 * float(np.prod(x, dtype=np.float64)) * float(np.prod(w[1:], dtype=np.float64)) if x else 0.0
    if node.op_type in ("MatMul", "Gemm") and out:
        a = shapes.get(node.input[0])
        if not a:
            return 0.0
        transposed = node.op_type == "Gemm" and any(x.name == "transA" and x.i for x in node.attribute)
        k = a[-2] if transposed else a[-1]
        return 2.0 * float(np.prod(out, dtype=np.float64)) * k
    return 0.0


# -- whole graphs ------------------------------------------------------------------------------------

def measure(models: Mapping[str, onnx.ModelProto], sample: dict[str, np.ndarray], level: str,
            budget_s: float = 4.0, rounds: int = 3) -> dict[str, float]:
    """Median ms per inference of each graph as ONNX Runtime runs it at ``level``, interleaved rounds."""
    from deploykit.graph.run import session_from_onnx

    runners = {k: session_from_onnx(m, "onnxruntime", level=level).timed_runner(sample) for k, m in models.items()}
    single = 0.0
    for run in runners.values():
        run()
        start = time.perf_counter()
        run()
        single += time.perf_counter() - start
    iterations = max(1, min(50, int(budget_s / (rounds * single or 1e-9))))
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(rounds):
        for k, run in runners.items():
            start = time.perf_counter()
            for _ in range(iterations):
                run()
            times[k].append((time.perf_counter() - start) / iterations * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}
