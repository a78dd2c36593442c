"""Empirical bias correction: remove the mean error quantization adds to each convolution's output.

Rounding weights and clipping activations shift the mean of a layer's output per channel (a
clipped tail always pulls it down); the next layers take the shift for signal. Following Nagel et
al. ("Data-Free Quantization", 2019, empirical variant) the mean per output channel of
``quantized - fp32`` is measured on a few calibration samples (never the check samples) at every
quantized Conv/ConvTranspose/Gemm with a bias, and subtracted from that bias: the float bias in
the tensorrt flavour, the int32 bias (at its scale ``s_in * s_w``) in the onnxruntime flavour.
Every layer is corrected from one measurement of the uncorrected graph. A layer's measured shift
includes what upstream layers pass on, so correcting all of them at once removes some of it twice;
a second round of measuring and correcting made a depthwise network worse (mean rel-L2 0.074 ->
0.077), and correcting layer by layer in order (one pass over the samples per layer: 80 passes on a
real detector) gained 3 % there. The one-round correction is what is offered, and it is off by
default (``quantize.bias_correction``) because it did not help on the real models either (see
bench/bench_real_models.py --ablations).

The errors are measured on the graph as written (the onnxruntime flavour's fused kernels round a
little differently; the mean shift they add is the same).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import onnx

ROUNDS = 1
SAMPLES = 8  # calibration samples the mean errors are measured on
OPS = ("Conv", "ConvTranspose", "Gemm")


@dataclass
class BiasCorrection:
    corrected: dict[str, float] = field(default_factory=dict)  # node -> largest |shift| removed / output std
    samples: int = 0

    def note(self) -> str:
        worst = max(self.corrected.values(), default=0.0)
        return (f"bias correction: {len(self.corrected)} layers on {self.samples} calibration samples, "
                f"largest mean shift removed {worst:.3g} of the output's spread")


def correct_biases(quantized: onnx.ModelProto, reference: onnx.ModelProto, samples: list[dict[str, Any]]
                   ) -> tuple[onnx.ModelProto, BiasCorrection]:
    """A copy of ``quantized`` (FP32 high precision) with bias corrections; ``reference`` is the FP32
    graph it was quantized from (node names align)."""
    import onnx

    from deploykit.quant.evaluate import open_as_written
    from deploykit.quant.graph import quantized_node_names

    out = onnx.ModelProto.FromString(quantized.SerializeToString())
    quantized_nodes = quantized_node_names(out)
    ref_nodes = {n.name: n for n in reference.graph.node}
    layers = [n for n in out.graph.node if n.op_type in OPS and n.name in quantized_nodes and n.name in ref_nodes
              and len(n.input) > 2 and n.input[2]]
    report = BiasCorrection(samples=len(samples))
    if not layers or not samples:
        return out, report
    fp32 = open_as_written(reference, expose=tuple(ref_nodes[n.name].output[0] for n in layers))
    want, spread = [], {}
    for sample in samples:
        values = fp32.run_all(sample)
        want.append({n.name: _channel_mean(values[ref_nodes[n.name].output[0]], n) for n in layers})
        spread = spread or {n.name: float(np.std(values[ref_nodes[n.name].output[0]])) or 1.0 for n in layers}
    for _ in range(ROUNDS):
        session = open_as_written(out, expose=tuple(n.output[0] for n in layers))
        got = [session.run_all(s) for s in samples]
        for node in layers:
            shift = np.mean([_channel_mean(g[node.output[0]], node) - w[node.name] for g, w in zip(got, want, strict=True)],
                            axis=0)
            if _subtract(out, node, shift):
                report.corrected[node.name] = max(report.corrected.get(node.name, 0.0),
                                                  float(np.abs(shift).max()) / spread[node.name])
    return out, report


def _channel_mean(value: np.ndarray, node: onnx.NodeProto) -> np.ndarray:
    """Mean per output channel: axis 1 for convolutions, the last axis for Gemm."""
    v = np.asarray(value, np.float64)
    axis = v.ndim - 1 if node.op_type == "Gemm" else 1
    return np.moveaxis(v, axis, 0).reshape(v.shape[axis], -1).mean(axis=1)


def _subtract(model: onnx.ModelProto, node: onnx.NodeProto, shift: np.ndarray) -> bool:
    """bias -= shift, where the bias is an initializer or the int32 input of a DequantizeLinear."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    name = node.input[2]
    if name in inits:
        bias = numpy_helper.to_array(inits[name]).astype(np.float64)
        if bias.shape != shift.shape:
            return False
        inits[name].CopyFrom(numpy_helper.from_array((bias - shift).astype(numpy_helper.to_array(inits[name]).dtype),
                                                     name))
        return True
    dq = next((n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == name), None)
    if dq is None or dq.input[0] not in inits or inits[dq.input[0]].data_type != 6:  # INT32
        return False
    q = numpy_helper.to_array(inits[dq.input[0]]).astype(np.int64)
    scale = numpy_helper.to_array(inits[dq.input[1]]).astype(np.float64)
    if q.shape != shift.shape:
        return False
    new = np.clip(q - np.round(shift / scale), -(2**31), 2**31 - 1).astype(np.int32)
    inits[dq.input[0]].CopyFrom(numpy_helper.from_array(new, dq.input[0]))
    return True
