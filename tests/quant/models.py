"""Small ONNX models built in code for the quantization tests, each with one trait to test.

Weights come from a seeded generator with He-style scaling, so activations keep a signal through
the layers (an output that ignores its input would pass any tolerance).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

INPUT = "x"


def _conv(name: str, x: str, w: np.ndarray, b: np.ndarray, inits: list, pads: int | None = None) -> onnx.NodeProto:
    k = w.shape[-1]
    inits += [
        numpy_helper.from_array(w.astype(np.float32), f"{name}.weight"),
        numpy_helper.from_array(b.astype(np.float32), f"{name}.bias"),
    ]
    pad = k // 2 if pads is None else pads
    return helper.make_node(
        "Conv", [x, f"{name}.weight", f"{name}.bias"], [f"{name}_out"], name=name, pads=[pad] * 4, kernel_shape=[k, k]
    )


def he(rng: np.random.Generator, cout: int, cin: int, k: int) -> np.ndarray:
    return rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))


def cnn(
    channels: tuple[int, ...] = (8, 16),
    *,
    size: int = 16,
    opset: int = 17,
    seed: int = 0,
    head: str = "none",
    outlier: float = 0.0,
    batch: str | int = "N",
) -> onnx.ModelProto:
    """Conv/Relu stack then a 1x1 head conv; ``head='sigmoid'`` ends in a Sigmoid (a bounded output).

    ``outlier`` > 0 multiplies channel 0 of the first conv by that factor and divides what the
    second conv reads from it: the same FP32 function, but per-tensor activation quantization of the
    second conv's input now crushes every other channel (an outlier-sensitive layer).
    """
    rng = np.random.default_rng(seed)
    nodes, inits, x, cin = [], [], INPUT, 3
    for i, cout in enumerate(channels):
        w, b = he(rng, cout, cin, 3), rng.standard_normal(cout) * 0.1
        if outlier and i == 0:
            w[0] *= outlier
            b[0] = abs(b[0]) * outlier + outlier  # channel 0 stays positive and large after Relu
        if outlier and i == 1:
            w[:, 0] /= outlier
        nodes += [
            _conv(f"conv{i}", x, w, b, inits),
            helper.make_node("Relu", [f"conv{i}_out"], [f"relu{i}"], name=f"relu{i}"),
        ]
        x, cin = f"relu{i}", cout
    nodes.append(_conv("head", x, he(rng, 4, cin, 1), rng.standard_normal(4) * 0.1, inits))
    out = "head_out"
    if head == "sigmoid":
        nodes.append(helper.make_node("Sigmoid", [out], ["y"], name="sigmoid"))
        out = "y"
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        inits,
    )
    return _model(graph, opset)


def depthwise(size: int = 32, seed: int = 0, spread: float = 1.0) -> onnx.ModelProto:
    """A MobileNetV3-style network: stem, three inverted residual blocks (1x1 expand, 3x3 depthwise,
    1x1 project; HardSwish), a 1x1 head and a Sigmoid probability map (a text detector's output).

    The depthwise channels get gains exp(N(0, spread)), as trained depthwise layers with folded
    BatchNorm have: their outputs then span very different ranges per channel, which per-tensor
    activation quantization handles badly (the INT8 loss such networks show on real detectors).
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def conv(
        name: str, x: str, cout: int, cin: int, k: int, group: int = 1, stride: int = 1, gain: np.ndarray | None = None
    ) -> str:
        w = he(rng, cout, cin // group, k)
        if gain is not None:
            w *= gain[:, None, None, None]
        inits.extend(
            [
                numpy_helper.from_array(w.astype(np.float32), f"{name}.weight"),
                numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), f"{name}.bias"),
            ]
        )
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{name}.weight", f"{name}.bias"],
                [f"{name}_out"],
                name=name,
                pads=[k // 2] * 4,
                kernel_shape=[k, k],
                group=group,
                strides=[stride] * 2,
            )
        )
        return f"{name}_out"

    def hswish(x: str, name: str) -> str:
        nodes.append(helper.make_node("HardSwish", [x], [name], name=name))
        return name

    x, c = hswish(conv("stem", INPUT, 16, 3, 3, stride=2), "stem_act"), 16
    for i, (expand, out) in enumerate([(48, 24), (72, 24), (96, 32)]):
        e = hswish(conv(f"b{i}_expand", x, expand, c, 1), f"b{i}_expand_act")
        d = hswish(
            conv(f"b{i}_dw", e, expand, expand, 3, group=expand, gain=np.exp(rng.normal(0, spread, expand))),
            f"b{i}_dw_act",
        )
        p = conv(f"b{i}_project", d, out, expand, 1)
        if out == c:
            nodes.append(helper.make_node("Add", [p, x], [f"b{i}_sum"], name=f"b{i}_add"))
            p = f"b{i}_sum"
        x, c = p, out
    nodes.append(helper.make_node("Sigmoid", [conv("head", x, 1, c, 1)], ["prob"], name="sigmoid"))
    graph = helper.make_graph(
        nodes,
        "depthwise",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, None)],
        inits,
    )
    return _model(graph, 17)


def mobile_detector(
    size: int = 640,
    widths: tuple[int, ...] = (16, 24, 40, 64, 96),
    blocks: tuple[int, ...] = (1, 4, 5, 5, 4),
    seed: int = 0,
    spread: float = 0.3,
    residual: float = 0.2,
) -> onnx.ModelProto:
    """A DBNet-style text detector built from MobileNetV3 blocks: a stride-2 stem, stages of inverted
    residual blocks (1x1 expand, 3x3 depthwise, 1x1 project; HardSwish) whose first block strides 2,
    a 1x1 head on the last stage, nearest upsampling to 1/4 of the input, and a Sigmoid map.

    With the defaults: 1 stem + 19 blocks x 3 + 2 head convs = 60 convolutions, a 640x640 input and
    a 160x160 probability map. Every convolution is normalised on image data as a trained network's
    folded BatchNorm is (:func:`normalize_convs`); depthwise channels then get gains exp(N(0, spread)),
    and residual branches a gain of ``residual``.
    """
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    gains: dict[str, np.ndarray] = {}

    def conv(name: str, x: str, cout: int, cin: int, k: int, group: int = 1, stride: int = 1) -> str:
        inits.extend(
            [
                numpy_helper.from_array(he(rng, cout, cin // group, k).astype(np.float32), f"{name}.weight"),
                numpy_helper.from_array(np.zeros(cout, np.float32), f"{name}.bias"),
            ]
        )
        nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{name}.weight", f"{name}.bias"],
                [f"{name}_out"],
                name=name,
                pads=[k // 2] * 4,
                kernel_shape=[k, k],
                group=group,
                strides=[stride] * 2,
            )
        )
        if group > 1:
            gains[name] = np.exp(rng.normal(0, spread, cout))
        return f"{name}_out"

    def hswish(x: str, name: str) -> str:
        nodes.append(helper.make_node("HardSwish", [x], [name], name=name))
        return name

    x, c = hswish(conv("stem", INPUT, widths[0], 3, 3, stride=2), "stem_act"), widths[0]
    for s, (width, count) in enumerate(zip(widths, blocks, strict=True)):
        for b in range(count):
            name, stride, expand = f"s{s}b{b}", 2 if b == 0 and s > 0 else 1, c * (3 if s < 2 else 4)
            e = hswish(conv(f"{name}_expand", x, expand, c, 1), f"{name}_expand_act")
            d = hswish(conv(f"{name}_dw", e, expand, expand, 3, group=expand, stride=stride), f"{name}_dw_act")
            p = conv(f"{name}_project", d, width, expand, 1)
            if stride == 1 and width == c:
                gains[f"{name}_project"] = np.full(width, residual)  # a trained branch adds a correction
                nodes.append(helper.make_node("Add", [p, x], [f"{name}_sum"], name=f"{name}_add"))
                p = f"{name}_sum"
            x, c = p, width
    h = hswish(conv("head_reduce", x, 32, c, 1), "head_act")
    scale = float(2 ** (len(widths) - 2))  # the last stage is at 1/2^len(widths); the map at 1/4
    inits.append(numpy_helper.from_array(np.array([1, 1, scale, scale], np.float32), "up_scales"))
    nodes.append(helper.make_node("Resize", [h, "", "up_scales"], ["head_up"], name="upsample", mode="nearest"))
    nodes.append(helper.make_node("Sigmoid", [conv("head", "head_up", 1, 32, 3)], ["prob"], name="sigmoid"))

    def graph(side: int) -> onnx.ModelProto:
        g = helper.make_graph(
            nodes,
            "mobile_detector",
            [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [1, 3, side, side])],
            [helper.make_tensor_value_info("prob", TensorProto.FLOAT, None)],
            inits,
        )
        return _model(g, 17)

    small = normalize_convs(
        graph(2 ** (len(widths) + 2)), images(4, size=2 ** (len(widths) + 2), seed=seed + 1), gains, rng
    )
    del inits[:]
    inits.extend(small.graph.initializer)  # the weights do not depend on the input size
    return graph(size)


def normalize_convs(
    model: onnx.ModelProto, samples: list[dict[str, np.ndarray]], gains: dict[str, np.ndarray], rng: np.random.Generator
) -> onnx.ModelProto:
    """Rescale each Conv, in graph order, so every output channel has mean ~ N(0, 0.1) and standard
    deviation ``gains[name][c]`` (1 by default) on ``samples``: BatchNorm statistics from data, folded."""
    import onnxruntime as ort

    model = onnx.ModelProto.FromString(model.SerializeToString())
    weights = {i.name: i for i in model.graph.initializer}
    for node in [n for n in model.graph.node if n.op_type == "Conv"]:
        probe = onnx.ModelProto.FromString(model.SerializeToString())
        probe.graph.output.append(helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None))
        session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
        y = np.concatenate([session.run([node.output[0]], s)[0] for s in samples])
        mean, std = y.mean(axis=(0, 2, 3)), y.std(axis=(0, 2, 3)) + 1e-6
        gain = gains.get(node.name, np.ones_like(std))
        w, b = (numpy_helper.to_array(weights[n]) for n in node.input[1:3])
        factor = gain / std
        weights[node.input[1]].CopyFrom(
            numpy_helper.from_array((w * factor[:, None, None, None]).astype(np.float32), node.input[1])
        )
        beta = rng.normal(0, 0.1, len(b))
        weights[node.input[2]].CopyFrom(
            numpy_helper.from_array(((b - mean) * factor + beta).astype(np.float32), node.input[2])
        )
    return model


def _model(graph: onnx.GraphProto, opset: int) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def with_constant_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same model with every initializer held in a Constant node (old exporters, paddle2onnx)."""
    out = onnx.ModelProto.FromString(model.SerializeToString())
    constants = [
        helper.make_node("Constant", [], [i.name], value=i, name=f"const_{i.name}") for i in out.graph.initializer
    ]
    del out.graph.initializer[:]
    nodes = constants + list(out.graph.node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def batchnorm_overflow(size: int = 16, var: float = 1e8) -> onnx.ModelProto:
    """Conv -> BatchNormalization with a channel whose running variance overflows FP16 -> Relu -> Conv."""
    rng = np.random.default_rng(1)
    inits: list = []
    conv0 = _conv("conv0", INPUT, he(rng, 8, 3, 3) * 1e4, np.zeros(8), inits)  # big pre-BN activations
    scale, bias = np.ones(8, np.float32), np.full(8, 0.1, np.float32)
    mean, variance = np.zeros(8, np.float32), np.full(8, 1e8 * 0 + var, np.float32)
    inits += [
        numpy_helper.from_array(a, n)
        for a, n in ((scale, "bn.scale"), (bias, "bn.bias"), (mean, "bn.mean"), (variance, "bn.var"))
    ]
    bn = helper.make_node(
        "BatchNormalization",
        ["conv0_out", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
        ["bn_out"],
        name="bn",
        epsilon=1e-5,
    )
    relu = helper.make_node("Relu", ["bn_out"], ["relu"], name="relu")
    head = _conv("head", "relu", he(rng, 4, 8, 1), np.zeros(4), inits)
    graph = helper.make_graph(
        [conv0, bn, relu, head],
        "bn",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("head_out", TensorProto.FLOAT, None)],
        inits,
    )
    return _model(graph, 17)


def activation_overflow(size: int = 16) -> onnx.ModelProto:
    """Conv whose output reaches ~1e5 (inf in FP16; every weight in range) -> Relu -> Conv scaled back."""
    rng = np.random.default_rng(5)
    inits: list = []
    weight = 6000.0 * (0.5 + rng.random((8, 3, 3, 3)))  # < the 16384 weight limit; 27 taps sum to ~1e5
    conv0 = _conv("conv0", INPUT, weight, np.full(8, 1e4), inits)
    relu = helper.make_node("Relu", ["conv0_out"], ["relu"], name="relu")
    head = _conv("head", "relu", he(rng, 4, 8, 1) * 1e-4, np.zeros(4), inits)
    graph = helper.make_graph(
        [conv0, relu, head],
        "big",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("head_out", TensorProto.FLOAT, None)],
        inits,
    )
    return _model(graph, 17)


def packed_detector(size: int = 16, classes: int = 2, seed: int = 0) -> onnx.ModelProto:
    """A YOLO-style packed output: box coordinates in pixels (sigmoid x 640) concatenated with class
    scores in [0, 1] along the channel axis, as exported detectors write ``[N, 4 + C, ...]``."""
    rng = np.random.default_rng(seed)
    inits: list = []
    nodes = [
        _conv("stem", INPUT, he(rng, 8, 3, 3), rng.standard_normal(8) * 0.1, inits),
        helper.make_node("Relu", ["stem_out"], ["feat"], name="relu"),
        _conv("box", "feat", he(rng, 4, 8, 1), rng.standard_normal(4) * 0.1, inits),
        _conv("cls", "feat", he(rng, classes, 8, 1), rng.standard_normal(classes) * 0.5, inits),
        helper.make_node("Sigmoid", ["box_out"], ["box_unit"], name="box_sigmoid"),
        helper.make_node("Mul", ["box_unit", "pixels"], ["boxes"], name="box_scale"),
        helper.make_node("Sigmoid", ["cls_out"], ["scores"], name="cls_sigmoid"),
        helper.make_node("Concat", ["boxes", "scores"], ["packed"], name="pack", axis=1),
    ]
    inits.append(numpy_helper.from_array(np.array(640.0, np.float32), "pixels"))
    graph = helper.make_graph(
        nodes,
        "packed",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("packed", TensorProto.FLOAT, None)],
        inits,
    )
    return _model(graph, 17)


def matmul_mlp(opset: int = 17) -> onnx.ModelProto:
    """x[N, 64] -> MatMul(64x64) -> Relu -> MatMul(64x16): for int4 weight-only."""
    rng = np.random.default_rng(2)
    inits = [
        numpy_helper.from_array((rng.standard_normal((64, 64)) / 8).astype(np.float32), "w0"),
        numpy_helper.from_array((rng.standard_normal((64, 16)) / 8).astype(np.float32), "w1"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["h"], name="mm0"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w1"], ["y"], name="mm1"),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return _model(graph, opset)


def conv_integer() -> onnx.ModelProto:
    """A model that already carries dynamic quantization (DynamicQuantizeLinear + ConvInteger)."""
    rng = np.random.default_rng(3)
    w = rng.integers(-20, 20, (4, 3, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.int8(0), "w_zp")]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xzp"], name="dq"),
        helper.make_node("ConvInteger", ["xq", "w", "xzp", "w_zp"], ["ci"], name="convint", pads=[1] * 4),
        helper.make_node("Cast", ["ci"], ["cf"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["cf", "xs"], ["y"], name="rescale"),
    ]
    graph = helper.make_graph(
        nodes,
        "ci",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return _model(graph, 13)


def unmergeable_dims() -> onnx.ModelProto:
    """Two inputs with differently named dims that an Add broadcasts together: ORT's symbolic shape
    inference cannot merge 'a' and 'b' and fails (unless skipped)."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 8)) / 3).astype(np.float32), "w")]
    nodes = [
        helper.make_node("Add", ["x", "z"], ["s"], name="add"),
        helper.make_node("MatMul", ["s", "w"], ["y"], name="mm"),
    ]
    graph = helper.make_graph(
        nodes,
        "dims",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", 8]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["b", 8]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return _model(graph, 17)


def classifier(size: int = 16, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm (a classifier head);
    32 channels, so ModelOpt's FP8 rules quantize the second convolution."""
    rng = np.random.default_rng(seed)
    inits: list = []
    nodes = [
        _conv("conv0", INPUT, he(rng, 32, 3, 3), rng.standard_normal(32) * 0.1, inits),
        helper.make_node("Relu", ["conv0_out"], ["relu0"], name="relu0"),
        _conv("conv1", "relu0", he(rng, 32, 32, 3), rng.standard_normal(32) * 0.1, inits),
        helper.make_node("Relu", ["conv1_out"], ["relu1"], name="relu1"),
        helper.make_node("GlobalAveragePool", ["relu1"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1),
    ]
    inits += [
        numpy_helper.from_array((rng.standard_normal((classes, 32)) / np.sqrt(32) * 4).astype(np.float32), "fc.weight"),
        numpy_helper.from_array((rng.standard_normal(classes) * 0.1).astype(np.float32), "fc.bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["N", 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
        inits,
    )
    return _model(graph, 17)


def encoder(tokens: int = 16, dim: int = 32, heads: int = 2, seed: int = 0) -> onnx.ModelProto:
    """One pre-norm transformer encoder layer on x[N, tokens, dim]: LayerNormalization, Q/K/V
    MatMuls, per-head MatMul -> Softmax -> MatMul attention, output projection, residual, and a
    LayerNormalization -> MatMul -> Relu -> MatMul MLP with a residual."""
    rng = np.random.default_rng(seed)
    head = dim // heads
    inits: list = []
    nodes: list = []

    def weight(name: str, rows: int, cols: int) -> str:
        inits.append(
            numpy_helper.from_array((rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32), name)
        )
        return name

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, ins: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def layer_norm(x: str, name: str) -> str:
        gamma = const(f"{name}.scale", (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32))
        beta = const(f"{name}.bias", (0.1 * rng.standard_normal(dim)).astype(np.float32))
        return node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=1e-5)

    split = const("heads_shape", np.array([0, 0, heads, head], np.int64))
    merge = const("merge_shape", np.array([0, 0, dim], np.int64))
    h = layer_norm("x", "ln0")
    q, k, v = (
        node(
            "Transpose",
            [node("Reshape", [node("MatMul", [h, weight(f"w{t}", dim, dim)], f"{t}_proj"), split], f"{t}_heads")],
            f"{t}_t",
            perm=[0, 2, 1, 3],
        )
        for t in "qkv"
    )
    kt = node("Transpose", [k], "k_tt", perm=[0, 1, 3, 2])
    scores = node("Mul", [node("MatMul", [q, kt], "qk"), const("inv_sqrt", np.array(head**-0.5, np.float32))], "scaled")
    attn = node("MatMul", [node("Softmax", [scores], "attn_probs", axis=-1), v], "attn")
    ctx = node("Reshape", [node("Transpose", [attn], "attn_t", perm=[0, 2, 1, 3]), merge], "ctx")
    x1 = node("Add", ["x", node("MatMul", [ctx, weight("wo", dim, dim)], "out_proj")], "res0")
    m = node("Relu", [node("MatMul", [layer_norm(x1, "ln1"), weight("w1", dim, 2 * dim)], "mlp_up")], "mlp_act")
    node("Add", [x1, node("MatMul", [m, weight("w2", 2 * dim, dim)], "mlp_down")], "y")
    graph = helper.make_graph(
        nodes,
        "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", tokens, dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return _model(graph, 17)


def sliced_tokens(seed: int = 0) -> onnx.ModelProto:
    """x (1, 8, 16) -> MatMul -> Slice (tokens 0-3) -> Reshape (1, 64) -> MatMul -> y: ONNX Runtime's
    quantizer gives the Slice and Reshape outputs the parameters of the MatMul output they read
    (one scale along the chain), not their own narrower range."""
    rng = np.random.default_rng(seed)
    arrays = {"w1": rng.standard_normal((16, 16)) / 4, "w2": rng.standard_normal((64, 8)) / 8}
    inits = [numpy_helper.from_array(a.astype(np.float32), k) for k, a in arrays.items()]
    inits += [
        numpy_helper.from_array(np.array(v, np.int64), k)
        for k, v in (("start", [0]), ("end", [4]), ("axis", [1]), ("flat", [1, 64]))
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("Slice", ["h", "start", "end", "axis"], ["s"], name="slice"),
        helper.make_node("Reshape", ["s", "flat"], ["r"], name="reshape"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2"),
    ]
    graph = helper.make_graph(
        nodes,
        "sliced",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        inits,
    )
    return _model(graph, 17)


def pooled_concat(size: int = 16, seed: int = 0) -> onnx.ModelProto:
    """x -> Conv -> (itself, MaxPool, Resize -> MaxPool) -> Concat -> Conv, as YOLOv8's SPPF block and
    upsampling path: ONNX Runtime's quantizer gives the MaxPool and Resize outputs the parameters of the
    Conv output they read, and the Concat's (and the nearest Resize's) own max ranges equal the Conv's."""
    rng = np.random.default_rng(seed)
    inits: list = [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "twice")]
    nodes = [
        _conv("c1", INPUT, he(rng, 8, 3, 3), rng.standard_normal(8) * 0.1, inits),
        helper.make_node("MaxPool", ["c1_out"], ["pooled"], name="pool", kernel_shape=[3, 3], pads=[1] * 4),
        helper.make_node("Resize", ["c1_out", "", "twice"], ["up"], name="up", mode="nearest"),
        helper.make_node("MaxPool", ["up"], ["down"], name="down", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Concat", ["c1_out", "pooled", "down"], ["cat"], name="cat", axis=1),
        _conv("c2", "cat", he(rng, 4, 24, 1), rng.standard_normal(4) * 0.1, inits),
    ]
    graph = helper.make_graph(
        nodes,
        "pooled_concat",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("c2_out", TensorProto.FLOAT, [1, 4, size, size])],
        inits,
    )
    return _model(graph, 17)


def sliced_token_samples(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Tokens 4-7 (sliced away) four times larger than tokens 0-3, so the chain's ranges differ."""
    rng = np.random.default_rng(seed)
    gain = np.where(np.arange(8) >= 4, 4.0, 1.0)[None, :, None]
    return [{"x": (rng.standard_normal((1, 8, 16)) * gain).astype(np.float32)} for _ in range(n)]


def tokens(n: int, count: int = 16, dim: int = 32, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Fresh token embeddings: a shared per-channel offset plus noise (embeddings are not zero-mean)."""
    rng = np.random.default_rng(seed)
    offset = rng.standard_normal(dim) * 0.5
    return [{"x": (offset + rng.standard_normal((1, count, dim))).astype(np.float32)} for _ in range(n)]


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def images(n: int, size: int = 16, seed: int = 0, batch: int = 1) -> list[dict[str, np.ndarray]]:
    """Fresh image-like samples in [0, 1]: smooth blobs plus noise, so channels correlate as in photos."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        base = rng.random((batch, 3, size // 4, size // 4)).repeat(4, axis=2).repeat(4, axis=3)
        out.append({INPUT: np.clip(base + rng.normal(0, 0.05, base.shape), 0, 1).astype(np.float32)})
    return out
