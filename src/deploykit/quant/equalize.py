"""Cross-layer equalization (CLE): move per-channel weight range between consecutive convolutions.

Depthwise convolutions with folded BatchNorm have output channels whose weights differ by 100x,
and per-tensor activation scales then starve the small channels. For a Conv A whose output channel
``i`` feeds only input channel ``i`` of a Conv B (through a positive-homogeneous activation f,
f(x / s) = f(x) / s), scaling A's channel by ``1 / s_i`` and B's input channel by ``s_i`` computes
the same function; ``s_i = sqrt(r_A,i / r_B,i)`` gives both the same weight range (Nagel et al.,
"Data-Free Quantization Through Weight Equalization and Bias Correction", 2019).

Relu, LeakyRelu, PRelu and no activation are homogeneous. HardSwish, x * relu6(x + 3) / 6, is
not: ``hardswish`` chooses what happens with it:

* ``skip``: pairs through a HardSwish are left alone;
* ``approximate``: the weights are scaled and the HardSwish kept, which changes the FP32 function
  (how much is measured by the benchmark: the "exactness break");
* ``exact``: the HardSwish is rewritten for the scaled channels as ``x' * clip(x' * s / 6 + 0.5, 0, 1)``
  (the ReLU6 bound moved per channel, ``6 / s``), which is the same function in four pointwise ops.

ReLU6 (``Clip(0, 6)``) becomes ``Min(Relu(x'), 6 / s)``: exact. The rewrite is applied to the FP32
graph before calibration; the quantize stage's check still compares against the original graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from deploykit.choices import EqualizeHardSwish
from deploykit.graph.proto import copy_model

if TYPE_CHECKING:
    import onnx

HOMOGENEOUS = frozenset({"Relu", "LeakyRelu", "PRelu"})
SWEEPS = 4  # passes over the pairs; a chain A -> B -> C converges in a few


@dataclass
class Equalized:
    """What :func:`equalize` did."""

    pairs: list[tuple[str, str, str]] = field(default_factory=list)  # (conv A, activation, conv B)
    skipped: dict[str, str] = field(default_factory=dict)  # conv A -> why its pair was left alone
    rewritten: list[str] = field(default_factory=list)  # activation nodes replaced by their scaled form
    # mean over pairs and both sides of range_i / max range: how much of the per-tensor weight grid
    # the average channel uses (1 = every channel spans the grid; Nagel et al.'s "precision")
    precision_before: float = 0.0
    precision_after: float = 0.0

    def note(self) -> str:
        return (
            f"cross-layer equalization: {len(self.pairs)} convolution pairs, mean per-channel weight range "
            f"{self.precision_before:.2f} -> {self.precision_after:.2f} of the largest"
            + (f"; {len(self.rewritten)} activations rewritten per channel" if self.rewritten else "")
            + (f"; {len(self.skipped)} pairs left alone" if self.skipped else "")
        )


@dataclass
class _Pair:
    a: onnx.NodeProto
    act: onnx.NodeProto | None  # the activation between A and B (None: A feeds B directly)
    kind: str  # "none", "homogeneous", "relu6", "hardswish"
    b: onnx.NodeProto
    scale: np.ndarray = field(default_factory=lambda: np.ones(0))


def equalize(model: onnx.ModelProto, hardswish: EqualizeHardSwish = "exact") -> tuple[onnx.ModelProto, Equalized]:
    """A copy of ``model`` with every eligible Conv pair equalized; see the module docstring."""
    from onnx import numpy_helper

    out = copy_model(model)
    inits = {i.name: i for i in out.graph.initializer}
    weights = {name: numpy_helper.to_array(t).astype(np.float64) for name, t in inits.items()}
    report = Equalized()
    pairs = _pairs(out, weights, hardswish, report)
    if not pairs:
        return out, report
    report.precision_before = _precision(pairs, weights)
    for _ in range(SWEEPS):
        for p in pairs:
            _equalize_pair(p, weights)
    report.precision_after = _precision(pairs, weights)
    for p in pairs:
        for name in {*p.a.input[1:3], p.b.input[1]} - {""}:
            inits[name].CopyFrom(numpy_helper.from_array(weights[name].astype(np.float32), name))
    replace: dict[str, list[onnx.NodeProto]] = {}
    for p in pairs:
        if p.kind in ("relu6", "hardswish") and (p.kind == "relu6" or hardswish == "exact"):
            replace.update(_scaled_activation(out, p))
            report.rewritten.append(p.act.name)
        report.pairs.append((p.a.name, p.act.op_type if p.act is not None else "", p.b.name))
    if replace:
        nodes = [new for n in out.graph.node for new in replace.get(n.name, [n])]
        del out.graph.node[:]
        out.graph.node.extend(nodes)
    return out, report


def _pairs(
    model: onnx.ModelProto, weights: dict[str, np.ndarray], hardswish: EqualizeHardSwish, report: Equalized
) -> list[_Pair]:
    from deploykit.graph.proto import consumers

    readers = consumers(model)
    outputs = {o.name for o in model.graph.output}
    pairs, as_a, as_b = [], set(), set()
    for a in model.graph.node:
        if (
            a.op_type != "Conv"
            or len(a.input) < 2
            or a.input[1] not in weights
            or not (_group(a) == 1 or _is_depthwise(a, weights))
        ):
            continue
        found = _follow(a, readers, outputs, weights)
        if isinstance(found, str):
            report.skipped[a.name] = found
            continue
        act, kind, b = found
        if kind == "hardswish" and hardswish == "skip":
            report.skipped[a.name] = "HardSwish between the convolutions (equalize_hardswish: skip)"
            continue
        if b.name in as_b or a.name in as_a:
            continue  # a convolution is A of one pair and B of one pair: chains settle over the sweeps
        as_a.add(a.name)
        as_b.add(b.name)
        pairs.append(_Pair(a, act, kind, b))
    return pairs


def _follow(
    a: onnx.NodeProto, readers: dict, outputs: set[str], weights: dict[str, np.ndarray]
) -> tuple[onnx.NodeProto | None, str, onnx.NodeProto] | str:
    """(activation, its kind, conv B) that A's output reaches alone, or why there is none."""
    tensor = a.output[0]
    users = readers.get(tensor, [])
    if tensor in outputs or not users:
        return "its output is a graph output or unused"
    act, kind = None, "none"
    if len(users) == 1 and users[0].op_type != "Conv":
        act, kind = users[0], _kind(users[0], weights)
        if kind is None:
            return f"{users[0].op_type} between the convolutions is not scale-invariant"
        tensor = act.output[0]
    elif len(users) == 2 and {u.op_type for u in users} == {"HardSigmoid", "Mul"}:
        act, kind = _decomposed_hardswish(users, a.output[0])
        if act is None:
            return "HardSigmoid/Mul after the convolution is not a HardSwish"
        tensor = act.output[0]
    nxt = readers.get(tensor, [])
    if tensor in outputs or len(nxt) != 1 or nxt[0].op_type != "Conv" or nxt[0].input[0] != tensor:
        return "its output does not feed exactly one convolution"
    b = nxt[0]
    if b.input[1] not in weights or not (_group(b) == 1 or _is_depthwise(b, weights)):
        return "the next convolution is grouped or has computed weights"
    if weights[a.input[1]].shape[0] != (
        weights[b.input[1]].shape[0] if _is_depthwise(b, weights) else weights[b.input[1]].shape[1]
    ):
        return "channel counts do not line up"
    return act, kind, b


def _kind(node: onnx.NodeProto, weights: dict[str, np.ndarray]) -> str | None:
    if node.op_type in ("Relu", "LeakyRelu"):
        return "homogeneous"
    if node.op_type == "PRelu":
        return "homogeneous" if len(node.input) > 1 and node.input[1] in weights else None
    if node.op_type == "HardSwish":
        return "hardswish"
    if node.op_type == "Clip" and len(node.input) == 3 and all(n in weights for n in node.input[1:]):
        lo, hi = float(weights[node.input[1]]), float(weights[node.input[2]])
        return "relu6" if lo == 0.0 and hi > 0 else None
    return None


def _decomposed_hardswish(users: list[onnx.NodeProto], x: str) -> tuple[onnx.NodeProto | None, str]:
    """x * HardSigmoid(x) with alpha 1/6, beta 0.5 (how paddle2onnx and ORT's pre-processing write it)."""
    hs = next(u for u in users if u.op_type == "HardSigmoid")
    mul = next(u for u in users if u.op_type == "Mul")
    attrs = {a.name: a.f for a in hs.attribute}
    if abs(attrs.get("alpha", 0.2) - 1 / 6) > 1e-6 or abs(attrs.get("beta", 0.5) - 0.5) > 1e-6:
        return None, ""
    if set(mul.input) != {x, hs.output[0]}:
        return None, ""
    return mul, "hardswish"  # the Mul stands for the whole activation


def _group(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "group"), 1)


def _is_depthwise(node: onnx.NodeProto, weights: dict[str, np.ndarray]) -> bool:
    w = weights.get(node.input[1])
    return w is not None and w.ndim == 4 and w.shape[1] == 1 and _group(node) == w.shape[0]


def _ranges(p: _Pair, weights: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    wa, wb = weights[p.a.input[1]], weights[p.b.input[1]]
    ra = np.abs(wa).reshape(wa.shape[0], -1).max(axis=1)
    rb = (
        np.abs(wb).reshape(wb.shape[0], -1).max(axis=1)
        if _is_depthwise(p.b, weights)
        else np.abs(np.moveaxis(wb, 1, 0)).reshape(wb.shape[1], -1).max(axis=1)
    )
    return ra, rb


def _equalize_pair(p: _Pair, weights: dict[str, np.ndarray]) -> None:
    ra, rb = _ranges(p, weights)
    s = np.where((ra > 0) & (rb > 0), np.sqrt(ra / np.maximum(rb, 1e-30)), 1.0)
    p.scale = s if p.scale.size == 0 else p.scale * s
    wa = weights[p.a.input[1]]
    weights[p.a.input[1]] = wa / s.reshape(-1, *([1] * (wa.ndim - 1)))
    if len(p.a.input) > 2 and p.a.input[2]:
        weights[p.a.input[2]] = weights[p.a.input[2]] / s
    wb = weights[p.b.input[1]]
    if _is_depthwise(p.b, weights):
        weights[p.b.input[1]] = wb * s.reshape(-1, 1, 1, 1)
    else:
        weights[p.b.input[1]] = wb * s.reshape(1, -1, *([1] * (wb.ndim - 2)))


def _precision(pairs: list[_Pair], weights: dict[str, np.ndarray]) -> float:
    values = []
    for p in pairs:
        for r in _ranges(p, weights):
            if r.size and r.max() > 0:
                values.append(float(np.mean(r / r.max())))
    return float(np.mean(values)) if values else 0.0


def _scaled_activation(model: onnx.ModelProto, p: _Pair) -> dict[str, list[onnx.NodeProto]]:
    """Node name -> its replacement: the activation after A in its per-channel form for inputs
    scaled by 1 / s (a decomposed HardSwish's HardSigmoid is dropped with its Mul)."""
    from onnx import helper, numpy_helper

    s = p.scale.astype(np.float32).reshape(1, -1, 1, 1)
    x, y, name = p.a.output[0], p.act.output[0], p.act.name
    if p.kind == "relu6":
        hi = float(numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == p.act.input[2])))
        consts = {f"{name}/bound": (hi / s).astype(np.float32)}
        nodes = [
            helper.make_node("Relu", [x], [f"{name}/relu"], name=f"{name}/relu"),
            helper.make_node("Min", [f"{name}/relu", f"{name}/bound"], [y], name=name),
        ]
    else:
        consts = {
            f"{name}/slope": (s / 6.0).astype(np.float32),
            f"{name}/half": np.array(0.5, np.float32),
            f"{name}/zero": np.array(0.0, np.float32),
            f"{name}/one": np.array(1.0, np.float32),
        }
        nodes = [
            helper.make_node("Mul", [x, f"{name}/slope"], [f"{name}/scaled"], name=f"{name}/scaled"),
            helper.make_node("Add", [f"{name}/scaled", f"{name}/half"], [f"{name}/shifted"], name=f"{name}/shifted"),
            helper.make_node(
                "Clip", [f"{name}/shifted", f"{name}/zero", f"{name}/one"], [f"{name}/gate"], name=f"{name}/gate"
            ),
            helper.make_node("Mul", [x, f"{name}/gate"], [y], name=name),
        ]
    model.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())
    out: dict[str, list[onnx.NodeProto]] = {name: nodes}
    if p.act.op_type == "Mul":
        out.update(
            {
                n.name: []
                for n in model.graph.node
                if n.op_type == "HardSigmoid" and n.input[0] == x and n.output[0] in p.act.input
            }
        )
    return out
