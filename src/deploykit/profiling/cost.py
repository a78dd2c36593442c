"""FLOPs and bytes moved by one layer, from its shapes and dtypes: the roofline's x and y.

One cost model for both backends: an ONNX op type (ONNX Runtime's nodes, fused ones included) or a
TensorRT ``ParameterType`` maps to a *kind*, and the kind decides the count:

- conv: 2 x output elements x weight elements per output channel (groups included, since the weight is
  (Cout, Cin/groups, k...)); transposed: 2 x input elements x weight elements per input channel;
- matmul / gemm: 2 x output elements x the reduced dimension;
- pool: output elements x window size; global pool and reductions: input elements;
- elementwise: output elements x a small per-op constant (1 for add/relu, ~4 for exp/sigmoid);
- movement (reshape, transpose, concat, gather, ...): no arithmetic, only bytes.

Bytes moved are every input and output tensor once plus weights held inside the layer: what a layer
must at least read and write, so ``bytes / bandwidth`` is a floor, not a prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from deploykit.profiling.layers import Layer

_CONV = {"Conv", "FusedConv", "ConvInteger", "QLinearConv", "NhwcConv", "NhwcFusedConv", "Convolution"}
_DECONV = {"ConvTranspose", "Deconvolution"}
_MATMUL = {"MatMul", "FusedMatMul", "MatMulInteger", "QLinearMatMul", "MatrixMultiply", "MatMulNBits"}
_GEMM = {"Gemm", "QGemm", "FullyConnected"}
_POOL = {"MaxPool", "AveragePool", "LpPool", "QLinearAveragePool", "Pooling"}
_REDUCE = {
    "GlobalAveragePool",
    "GlobalMaxPool",
    "QLinearGlobalAveragePool",
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL2",
    "Reduce",
}
_MOVEMENT = {
    "Reshape",
    "Transpose",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "GatherElements",
    "GatherND",
    "Squeeze",
    "Unsqueeze",
    "Flatten",
    "Identity",
    "Shape",
    "Expand",
    "Pad",
    "Tile",
    "ScatterND",
    "ScatterElements",
    "Constant",
    "ConstantOfShape",
    "Shuffle",
    "Reformat",
    "Copy",
    "NoOp",
    "Concatenation",
    "Padding",
    "Scatter",
    "MemcpyToHost",
    "MemcpyFromHost",
    "Resize",
}
# Arithmetic per output element of elementwise ops; 1 for anything not listed.
_PER_ELEMENT = {
    "Sigmoid": 4,
    "Tanh": 4,
    "Exp": 4,
    "Log": 4,
    "Erf": 4,
    "Gelu": 8,
    "FastGelu": 8,
    "BiasGelu": 8,
    "HardSwish": 3,
    "HardSigmoid": 3,
    "Softmax": 5,
    "LogSoftmax": 5,
    "LayerNormalization": 8,
    "SkipLayerNormalization": 9,
    "InstanceNormalization": 8,
    "GroupNormalization": 8,
    "BatchNormalization": 2,
    "QuantizeLinear": 2,
    "DequantizeLinear": 2,
    "Pow": 4,
    "Sqrt": 4,
    "Div": 1,
    "LeakyRelu": 2,
    "Mish": 8,
    "Swish": 5,
    "Softplus": 4,
    "Normalization": 8,
    "Quantize": 2,
    "Dequantize": 2,
}


@dataclass(frozen=True)
class Cost:
    flops: float
    bytes: float
    kind: str

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved (the roofline's x)."""
        return self.flops / self.bytes if self.bytes else 0.0


def kind_of(op_type: str) -> str:
    if op_type in _CONV:
        return "conv"
    if op_type in _DECONV:
        return "deconv"
    if op_type in _MATMUL:
        return "matmul"
    if op_type in _GEMM:
        return "gemm"
    if op_type in _POOL:
        return "pool"
    if op_type in _REDUCE:
        return "reduce"
    if op_type in _MOVEMENT:
        return "movement"
    return "elementwise"


def layer_cost(layer: Layer) -> Cost:
    """FLOPs and bytes of one layer (see the module docstring)."""
    kind = kind_of(layer.op_type)
    moved = sum(t.nbytes for t in layer.inputs) + sum(t.nbytes for t in layer.outputs) + layer.weights_bytes
    return Cost(float(_flops(kind, layer)), float(moved), kind)


def _flops(kind: str, layer: Layer) -> float:
    out = layer.outputs[0].elements if layer.outputs else 0
    ins, attrs = layer.inputs, layer.attributes
    if kind in ("conv", "deconv"):
        weights = attrs.get("weight_shape") or _weight_shape(layer)
        if not weights:
            return 0.0
        per_channel = math.prod(weights[1:])
        if kind == "deconv":
            return 2.0 * (ins[0].elements if ins else 0) * per_channel
        return 2.0 * out * per_channel
    if kind in ("matmul", "gemm"):
        return 2.0 * out * _reduced_dim(kind, layer)
    if kind == "pool":
        return float(out * math.prod(attrs.get("kernel_shape") or [1]))
    if kind == "reduce":
        return float(ins[0].elements if ins else out)
    if kind == "movement":
        return 0.0
    return float(out * _PER_ELEMENT.get(layer.op_type, 1))


def _weight_shape(layer: Layer) -> tuple[int, ...]:
    """The weight's shape among the inputs: QLinearConv's is input 3, every other conv's input 1."""
    index = 3 if layer.op_type == "QLinearConv" else 1
    return layer.inputs[index].shape if len(layer.inputs) > index else ()


def _reduced_dim(kind: str, layer: Layer) -> int:
    if "reduced_dim" in layer.attributes:
        return int(layer.attributes["reduced_dim"])
    if not layer.inputs or not layer.inputs[0].shape:
        return 0
    a = layer.inputs[0].shape
    if kind == "gemm" and layer.attributes.get("transA") and len(a) >= 2:
        return a[-2]
    return a[-1]
