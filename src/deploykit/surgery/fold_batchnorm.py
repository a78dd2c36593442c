"""fold_batchnorm: fold an inference BatchNormalization into the Conv, ConvTranspose or Gemm before it.

Exporters in training mode, old exporters and hand-built graphs leave BatchNormalization unfused.
TensorRT fuses it itself, but quantizers see the unfused weights (and ranges) and ModelOpt's FP16
high precision turns a large running variance into inf (docs/architecture.md, pitfalls). With
``s = gamma / sqrt(var + eps)``: ``W' = W * s`` along the output channels, ``b' = (b - mean) * s + beta``.
Folding is done in float64 and cast back, so the result matches the unfused graph within rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from deploykit.graph.proto import (
    constant_value,
    consumers,
    copy_model,
    graph_output_names,
    node_attribute,
    producers,
    remove_unused,
)
from deploykit.surgery.base import NoParams, Pass, PassResult
from deploykit.surgery.graph import rename_uses


@dataclass(frozen=True)
class _BN:
    scale: np.ndarray  # gamma / sqrt(var + eps)
    shift: np.ndarray  # beta - mean * scale


class FoldBatchNorm(Pass):
    name = "fold_batchnorm"
    description = "fold inference BatchNormalization into the preceding Conv / ConvTranspose / Gemm weights"
    Params = NoParams

    def run(self, model: onnx.ModelProto) -> PassResult:
        out = copy_model(model)
        g = out.graph
        folded, skipped = [], {}
        for bn in [n for n in g.node if n.op_type == "BatchNormalization" and n.domain in ("", "ai.onnx")]:
            why = _fold_one(g, bn)
            if why:
                skipped[bn.name or bn.output[0]] = why
            else:
                folded.append(bn.name or bn.output[0])
        if not folded:
            reason = (
                "no BatchNormalization to fold"
                if not skipped
                else "no BatchNormalization could be folded: "
                + "; ".join(f"{k}: {v}" for k, v in list(skipped.items())[:5])
            )
            return PassResult(model, False, reason, details={"skipped": skipped})
        remove_unused(g)
        return PassResult(out, True, details={"folded": folded, "skipped": skipped})


def _fold_one(g: onnx.GraphProto, bn: onnx.NodeProto) -> str:
    """Fold ``bn`` into its producer; return why not ('' when folded)."""
    if len([o for o in bn.output if o]) != 1 or node_attribute(bn, "training_mode", 0):
        return "training mode (running statistics are outputs)"
    params = _bn_params(g, bn)
    if params is None:
        return "scale, bias, mean or variance is not a constant"
    prod = producers(g).get(bn.input[0])
    if prod is None or prod.domain not in ("", "ai.onnx") or prod.op_type not in ("Conv", "ConvTranspose", "Gemm"):
        return f"input comes from {prod.op_type if prod is not None else 'a graph input'}, not Conv/ConvTranspose/Gemm"
    if prod.output[0] in graph_output_names(g) or len(consumers(g).get(prod.output[0], [])) != 1:
        return f"{prod.op_type} output is used elsewhere too"
    fold = {"Conv": _fold_conv, "ConvTranspose": _fold_conv_transpose, "Gemm": _fold_gemm}[prod.op_type]
    why = fold(g, prod, params)
    if why:
        return why
    # The producer now computes the normalized value: it takes over the BatchNorm's output.
    rename_uses(g, bn.output[0], prod.output[0])
    if bn.output[0] in graph_output_names(g):
        rename_uses(g, prod.output[0], bn.output[0])
        prod.output[0] = bn.output[0]
    g.node.remove(bn)
    return ""


def _bn_params(g: onnx.GraphProto, bn: onnx.NodeProto) -> _BN | None:
    values = [constant_value(g, name) for name in bn.input[1:5]]
    if len(values) != 4 or any(v is None for v in values):
        return None
    gamma, beta, mean, var = (v.astype(np.float64) for v in values)  # type: ignore[union-attr]
    scale = gamma / np.sqrt(var + node_attribute(bn, "epsilon", 1e-5))
    return _BN(scale, beta - mean * scale)


def _fold_conv(g: onnx.GraphProto, conv: onnx.NodeProto, bn: _BN) -> str:
    w = constant_value(g, conv.input[1])
    if w is None:
        return "Conv weight is not a constant"
    if w.shape[0] != bn.scale.size:
        return f"Conv has {w.shape[0]} output channels, BatchNormalization {bn.scale.size}"
    b = _bias(g, conv, 2, w.shape[0])
    if b is None:
        return "Conv bias is not a constant"
    shape = (-1,) + (1,) * (w.ndim - 1)
    _set_inputs(g, conv, w * bn.scale.reshape(shape), b * bn.scale + bn.shift, w.dtype)
    return ""


def _fold_conv_transpose(g: onnx.GraphProto, conv: onnx.NodeProto, bn: _BN) -> str:
    w = constant_value(g, conv.input[1])
    if w is None:
        return "ConvTranspose weight is not a constant"
    group = node_attribute(conv, "group", 1)
    cout = w.shape[1] * group  # weight is [C_in, C_out / group, k...]
    if cout != bn.scale.size:
        return f"ConvTranspose has {cout} output channels, BatchNormalization {bn.scale.size}"
    b = _bias(g, conv, 2, cout)
    if b is None:
        return "ConvTranspose bias is not a constant"
    # Output channel c of group k is weight[k * C_in/group : ..., c % (C_out/group)].
    per_group = bn.scale.reshape(group, w.shape[1])
    cin_per_group = w.shape[0] // group
    factor = np.repeat(per_group, cin_per_group, axis=0).reshape((w.shape[0], w.shape[1]) + (1,) * (w.ndim - 2))
    _set_inputs(g, conv, w * factor, b * bn.scale + bn.shift, w.dtype)
    return ""


def _fold_gemm(g: onnx.GraphProto, gemm: onnx.NodeProto, bn: _BN) -> str:
    w = constant_value(g, gemm.input[1])
    if w is None or w.ndim != 2:
        return "Gemm weight is not a constant matrix"
    trans_b, beta = node_attribute(gemm, "transB", 0), node_attribute(gemm, "beta", 1.0)
    n = w.shape[0] if trans_b else w.shape[1]
    if n != bn.scale.size:
        return f"Gemm has {n} outputs, BatchNormalization {bn.scale.size}"
    c = _bias(g, gemm, 2, n)
    if c is None or c.shape not in ((n,), (1, n), (1,), ()):
        return "Gemm bias is not a per-output constant"
    c = np.broadcast_to(c.reshape(-1), (n,)) * (beta if len(gemm.input) > 2 and gemm.input[2] else 0.0)
    w_new = w * (bn.scale[:, None] if trans_b else bn.scale[None, :])
    # y = alpha*A@W + c, so BN(y) = alpha*A@(W*s) + (c*s + shift); the new bias goes in with beta = 1.
    _set_inputs(g, gemm, w_new, c * bn.scale + bn.shift, w.dtype)
    _set_attr(gemm, "beta", 1.0)
    return ""


def _bias(g: onnx.GraphProto, node: onnx.NodeProto, index: int, n: int) -> np.ndarray | None:
    if len(node.input) <= index or not node.input[index]:
        return np.zeros(n)
    value = constant_value(g, node.input[index])
    return None if value is None else value.astype(np.float64)


def _set_inputs(g: onnx.GraphProto, node: onnx.NodeProto, w: np.ndarray, b: np.ndarray, dtype: np.dtype) -> None:
    """New initializers for the folded weight and bias (the old ones may be shared with other nodes)."""
    from onnx import numpy_helper

    taken = {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
    base = node.name or node.output[0]
    for index, value in ((1, w), (2, b)):
        name = f"{base}_bnfold_{'w' if index == 1 else 'b'}"
        while name in taken:
            name += "_"
        taken.add(name)
        g.initializer.append(numpy_helper.from_array(value.astype(dtype), name))
        while len(node.input) <= index:
            node.input.append("")
        node.input[index] = name


def _set_attr(node: onnx.NodeProto, name: str, value: float) -> None:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            node.attribute.remove(a)
            break
    node.attribute.append(helper.make_attribute(name, value))
