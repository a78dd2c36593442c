"""What keeping a layer group in higher precision costs in latency, per target flavour: an estimate
from FLOPs and bytes that does not change with machine load, so two runs on the same data order the
groups alike and choose the same mix; whole graphs are timed only to confirm the answer (:func:`measure`).

* ``onnxruntime``: a CPU roofline per node, max(FLOPs / rate, bytes / bandwidth), at the rates of
  ONNX Runtime's CPU kernels (:data:`CPU_GFLOPS`: dense INT8 convolutions and MatMuls about 1.8x
  FP32, measured 1.5-1.9x on AVX2 without VNNI, more with it; depthwise convolutions no faster in
  INT8, :data:`CPU_DEPTHWISE_INT8`); elementwise nodes move their bytes.
* ``tensorrt``: a GPU roofline per compute node at each precision's datasheet peak (:data:`PEAKS`:
  an H100 SXM's dense tensor-core rates, FP32 as TF32, which TensorRT enables by default);
  elementwise nodes fuse into their compute node.

Both count the precision **boundaries** a patch adds or removes (:class:`Borders`): a float island
inside an INT8 region costs a dequantize/quantize pair where its neighbours' fused integer kernels
would have handed INT8 straight on, and raising a group next to an already raised one removes the
boundary between them. So a patch's cost is not a sum of per-group costs (:meth:`Costs.of`), and
the search prefers contiguous regions over scattered groups. Only ratios matter to the search.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
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
class Borders:
    """The activation tensors a Q/DQ pair carries between layer groups, and what converting one costs.

    ``tensors``: (latency of one conversion of it, producing group or "" for a node in no group,
    reading groups, "" likewise). A tensor costs one conversion per precision among its producer and
    readers beyond the first: an INT8 producer with an FP32 reader needs a dequantize, an FP32
    producer with INT8 readers a quantize; all at one precision, none (the fused kernels pass INT8 on).
    """

    tensors: tuple[tuple[float, str, tuple[str, ...]], ...]
    base: str  # the groups' precision before a patch
    rest: str  # what nodes in no group compute in
    # precisions that hand tensors on without a conversion of their own (TensorRT writes INT8 or FP8
    # from the producing kernel's epilogue alike)
    alike: tuple[str, ...] = ()

    def cost(self, patch: Mapping[str, str]) -> float:
        """The conversions ``patch`` needs in all: per tensor, its conversion times the precisions among
        its producer and readers less one, as arrays (the search asks this ~900 times on a 549-group
        transformer, each over 1,000 tensors: 0.4 s one tensor at a time); summed in tensor order, to
        the bits :meth:`_tensor` gives."""
        index, members, conversions = self._layout
        codes: dict[str, int] = {}

        def code(precision: str) -> int:
            return codes.setdefault(self.alike[0] if precision in self.alike else precision, len(codes))

        at = np.full(len(index) + 1, code(self.base), np.int64)
        at[0] = code(self.rest)  # "": a node in no group
        known = [(index[g], p) for g, p in patch.items() if g in index]
        if known:
            where, precisions = zip(*known, strict=True)
            of = {p: code(p) for p in sorted(set(precisions))}
            at[list(where)] = [of[p] for p in precisions]
        found = np.sort(at[members], axis=1)
        distinct = 1 + np.count_nonzero(found[:, 1:] != found[:, :-1], axis=1)
        return sum((conversions * (distinct - 1)).tolist())

    @cached_property
    def _layout(self) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
        """Group -> its index (0 is "": no group); per tensor, its producer's and readers' indices (padded
        with the producer's); and its conversion's latency."""
        index: dict[str, int] = {}
        for _, producer, readers in self.tensors:
            for g in (producer, *readers):
                if g:
                    index.setdefault(g, len(index) + 1)
        width = max((1 + len(r) for _, _, r in self.tensors), default=1)
        members = np.zeros((len(self.tensors), width), np.int64)
        for i, (_, producer, readers) in enumerate(self.tensors):
            row = [index.get(g, 0) for g in (producer, *readers)]
            members[i] = row + row[:1] * (width - len(row))
        return index, members, np.array([c for c, _, _ in self.tensors], np.float64)

    def _tensor(self, tensor: tuple[float, str, tuple[str, ...]], patch: Mapping[str, str]) -> float:
        conversion, producer, readers = tensor
        at = {self._precision(producer, patch), *(self._precision(r, patch) for r in readers)}
        return conversion * (len(at) - 1)

    def _precision(self, group: str, patch: Mapping[str, str]) -> str:
        p = patch.get(group, self.base) if group else self.rest
        return self.alike[0] if p in self.alike else p

    def adjacent(self) -> dict[str, list[int]]:
        """Group -> the indices of the tensors it produces or reads (what raising it can change)."""
        out: dict[str, list[int]] = {}
        for i, (_, producer, readers) in enumerate(self.tensors):
            for g in {producer, *readers} - {""}:
                out.setdefault(g, []).append(i)
        return out

    def change(self, patch: Mapping[str, str], group: str, precision: str, adjacent: list[int]) -> float:
        """What setting ``group`` to ``precision`` on top of ``patch`` adds in conversions."""
        after = {**patch, group: precision}
        return sum(self._tensor(self.tensors[i], after) - self._tensor(self.tensors[i], patch) for i in adjacent)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensors": [[c, p, list(r)] for c, p, r in self.tensors],
            "base": self.base,
            "rest": self.rest,
            "alike": list(self.alike),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Borders:
        return cls(
            tuple((float(c), p, tuple(r)) for c, p, r in data["tensors"]),
            data["base"],
            data["rest"],
            tuple(data.get("alike", ())),
        )


@dataclass(frozen=True)
class Costs:
    """Latency of each group at each precision relative to its base precision, and of the boundaries
    between groups at different precisions, in ``unit``."""

    delta: dict[str, dict[str, float]]  # group -> precision -> compute latency added over the base precision
    base: float  # the whole base graph (every group at the base precision)
    top: float  # every group at the highest precision offered (FP32 on the CPU)
    unit: str
    method: str  # a sentence for reports
    borders: Borders | None = None

    def of(self, patch: Mapping[str, str]) -> float:
        """Latency of the base graph with ``patch`` applied: the groups' compute costs add up, the
        boundaries are counted for the patch as a whole."""
        compute = self.base + sum(map(self._deltas.get, patch.items(), itertools.repeat(0.0)))
        if self.borders is None or not patch:
            return compute
        return compute + self.borders.cost(patch) - self._base_borders

    @cached_property
    def _deltas(self) -> dict[tuple[str, str], float]:
        """(group, precision) -> its compute delta: looked up in C for every group of a patch."""
        return {(g, p): v for g, by in self.delta.items() for p, v in by.items()}

    @cached_property
    def _base_borders(self) -> float:
        return self.borders.cost({}) if self.borders is not None else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "delta": self.delta,
            "base": self.base,
            "top": self.top,
            "unit": self.unit,
            "method": self.method,
            "borders": self.borders.to_dict() if self.borders is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Costs:
        borders = Borders.from_dict(data["borders"]) if data.get("borders") else None
        return cls(data["delta"], data["base"], data["top"], data["unit"], data["method"], borders)


def borders(
    base: onnx.ModelProto,
    groups: Mapping[str, Group],
    conversion: Callable[[float], float],
    base_precision: str,
    rest: str,
    alike: tuple[str, ...] = (),
) -> Borders:
    """The activation tensors of ``base`` that pass through a Q/DQ pair, by producing and reading group;
    ``conversion``: elements -> the latency of converting that many."""
    from deploykit.graph.proto import consumers, infer_shapes, producers, static_shapes

    owner = {n: g.name for g in groups.values() for n in g.nodes}
    made_by, readers = producers(base), consumers(base)
    inits = {i.name for i in base.graph.initializer}
    shapes = static_shapes(infer_shapes(base))
    found = []
    for q in base.graph.node:
        if q.op_type != "QuantizeLinear" or q.input[0] in inits:
            continue
        source = made_by.get(q.input[0])
        while source is not None and source.op_type in (*_QDQ, "Cast"):
            source = made_by.get(source.input[0])
        reading = sorted(
            {
                owner.get(r.name, "")
                for dq in readers.get(q.output[0], [])
                if dq.op_type == "DequantizeLinear"
                for r in _past_casts(readers, dq.output[0])
            }
        )
        elements = float(np.prod(shapes.get(q.input[0], (0,)), dtype=np.float64))
        if reading and elements > 0:
            found.append(
                (conversion(elements), owner.get(source.name, "") if source is not None else "", tuple(reading))
            )
    return Borders(tuple(found), base_precision, rest, alike)


def _past_casts(readers: dict[str, list[onnx.NodeProto]], tensor: str) -> list[onnx.NodeProto]:
    out = []
    for r in readers.get(tensor, []):
        out += _past_casts(readers, r.output[0]) if r.op_type == "Cast" else [r]
    return out


# -- onnxruntime: a CPU roofline ---------------------------------------------------------------------

# ONNX Runtime's CPU kernels (MLAS), GFLOP/s for one core-pair: dense INT8 ~1.8x FP32 (measured 1.5-1.9x
# on AVX2 without VNNI; README's zoo rows); only ratios matter.
CPU_GFLOPS = {"fp32": 50.0, "int8": 90.0}
CPU_DEPTHWISE_INT8 = 0.8  # of the FP32 rate: ORT's x86 integer depthwise kernel is no faster (measured, see README)
CPU_DEPTHWISE_RATE = 0.25  # of the dense rate, both precisions: one input channel per output leaves the FMAs idle
# GB/s by the bytes a node moves: L2-, L3- and DRAM-sized working sets (a 16 KB map stays in cache,
# a 480x480x16 one does not)
CPU_BANDWIDTH_GBS = ((256 << 10, 100.0), (4 << 20, 30.0), (float("inf"), 10.0))
CPU_BYTES = {"fp32": 4.0, "int8": 1.0}
CONVERSION_BYTES = 5.0  # a standalone QuantizeLinear/DequantizeLinear reads and writes 4 + 1 bytes an element


def cpu_estimate(
    reference: onnx.ModelProto, base: onnx.ModelProto, groups: Mapping[str, Group], steps: tuple[str, ...]
) -> Costs:
    """Per-group costs on ONNX Runtime's CPU kernels, in microseconds at :data:`CPU_GFLOPS` (the
    module docstring); ``steps``: the base precision, then FP32."""
    from deploykit.graph.proto import infer_shapes, static_shapes

    model = infer_shapes(reference)
    shapes = static_shapes(model)
    nodes = {n.name: n for n in model.graph.node}
    low, high = steps[0], steps[-1]
    delta, base_total, top_total = {}, 0.0, 0.0
    for name, group in groups.items():
        cost = {p: sum(_cpu_us(nodes[n], shapes, p) for n in group.nodes if n in nodes) for p in (low, high)}
        delta[name] = {high: float(cost[high] - cost[low])}
        base_total += cost[low]
        top_total += cost[high]
    edges = borders(base, groups, lambda n: _cpu_move_us(n * CONVERSION_BYTES), low, high)
    return Costs(
        delta,
        base_total + edges.cost({}),
        top_total,
        "us (estimate)",
        "CPU roofline estimate from FLOPs and bytes (load-independent; whole graphs timed to confirm): "
        f"max(FLOPs / rate, bytes / bandwidth) per node at {', '.join(f'{k} {v:g}' for k, v in CPU_GFLOPS.items())} "
        f"GFLOP/s (depthwise at {CPU_DEPTHWISE_RATE:g}x that, INT8 at {CPU_DEPTHWISE_INT8:g}x FP32), "
        f"{'/'.join(f'{b:g}' for _, b in CPU_BANDWIDTH_GBS)} GB/s by working set, "
        f"Q/DQ at each precision boundary {CONVERSION_BYTES:g} bytes an element",
        edges,
    )


def _cpu_us(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]], precision: str) -> float:
    io = sum(float(np.prod(shapes.get(t, (0,)), dtype=np.float64)) for t in (*node.input[:1], *node.output[:1]) if t)
    weights = float(np.prod(shapes.get(node.input[1], (0,)), dtype=np.float64)) if len(node.input) > 1 else 0.0
    flops = _flops(node, shapes)
    if flops == 0.0:  # elementwise, pooling, resize: the bytes they move (fused into a QLinear kernel or not)
        return _cpu_move_us(io * CPU_BYTES[precision])
    rate = CPU_GFLOPS[precision]
    if _depthwise(node, shapes):
        rate = CPU_DEPTHWISE_RATE * (CPU_DEPTHWISE_INT8 * CPU_GFLOPS["fp32"] if precision == "int8" else rate)
    return float(max(flops / (rate * 1e3), _cpu_move_us((io + weights) * CPU_BYTES[precision])))


def _cpu_move_us(nbytes: float) -> float:
    bandwidth = next(gbs for limit, gbs in CPU_BANDWIDTH_GBS if nbytes <= limit)
    return nbytes / (bandwidth * 1e3)


def _depthwise(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> bool:
    group = next((a.i for a in node.attribute if a.name == "group"), 1)
    w = shapes.get(node.input[1]) if len(node.input) > 1 else None
    return node.op_type == "Conv" and group > 1 and bool(w) and w[1] == 1


# -- tensorrt: a roofline ----------------------------------------------------------------------------


def roofline(
    reference: onnx.ModelProto,
    groups: Mapping[str, Group],
    steps: tuple[str, ...],
    base_precision: str,
    activations: str,
    base: onnx.ModelProto | None = None,
) -> Costs:
    """Per-group costs from FLOPs and bytes (microseconds at :data:`PEAKS`).

    Args:
        reference: the FP32 graph (shapes are inferred on it; node names match the groups').
        groups: the quantized graph's groups by name.
        steps: the precisions offered (the base first).
        base_precision: int8, fp8 or int4 (int4 quantizes weights only).
        activations: what unquantized tensors are stored in (the float rest's precision).
        base: the quantized graph, whose Q/DQ boundaries a patch changes (reformats at
            :data:`REFORMAT_BYTES` an element); None counts none.
    """
    from deploykit.graph.proto import infer_shapes, static_shapes

    model = infer_shapes(reference)
    shapes = static_shapes(model)
    nodes = {n.name: n for n in model.graph.node}
    delta, base_total, top_total = {}, 0.0, 0.0
    for name, group in groups.items():
        cost = {
            p: sum(_node_us(nodes[n], shapes, p, base_precision, activations) for n in group.nodes if n in nodes)
            for p in steps
        }
        delta[name] = {p: float(cost[p] - cost[steps[0]]) for p in steps[1:]}
        base_total += cost[steps[0]]
        top_total += cost[steps[-1]]
    edges = (
        borders(
            base,
            groups,
            lambda n: n * REFORMAT_BYTES / (BANDWIDTH_TBS * 1e6),
            steps[0],
            activations,
            alike=("int8", "fp8", "int4"),
        )
        if base is not None
        else None
    )
    return Costs(
        delta,
        base_total + (edges.cost({}) if edges else 0.0),
        top_total,
        "us (estimate)",
        "roofline estimate from FLOPs and bytes (no GPU measured): max(FLOPs / peak, bytes / bandwidth) "
        f"per compute node at H100 SXM datasheet rates ({', '.join(f'{k} {v:g}' for k, v in PEAKS.items())} "
        f"TFLOPS, {BANDWIDTH_TBS} TB/s)"
        + (f", {REFORMAT_BYTES:g} bytes an element at each precision boundary" if edges else ""),
        edges,
    )


REFORMAT_BYTES = 3.0  # a precision boundary on the GPU: an FP16 element read, an INT8 one written


def _node_us(
    node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]], precision: str, base: str, activations: str
) -> float:
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


def measure(
    models: Mapping[str, onnx.ModelProto],
    sample: dict[str, np.ndarray],
    level: str,
    budget_s: float = 4.0,
    rounds: int = 3,
) -> dict[str, float]:
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
