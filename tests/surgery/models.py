"""Models built in code for the surgery tests and bench/bench_surgery.py.

``legacy_detector`` imitates what old exporters (torch 1.x at opset 11, paddle2onnx) write: weights in
``Constant`` nodes or as initializers listed among the graph inputs, BatchNormalization left unfused
after Conv and Gemm, Identity and Dropout nodes, shape arithmetic (Shape -> Gather -> Unsqueeze ->
Concat -> Reshape) that folds away once the input shape is known.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def const_node(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node(
        "Constant", [], [name], name=f"{name}_const", value=numpy_helper.from_array(np.asarray(value), f"{name}_value")
    )


def make(nodes, inputs, outputs, initializers=(), opset=17, ir_version=8, value_info=()) -> onnx.ModelProto:
    """A model from nodes and ``(name, dtype, shape)`` inputs/outputs; initializers are arrays by name."""

    def vi(spec):
        name, dtype, shape = spec
        return helper.make_tensor_value_info(name, dtype, shape)

    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()]
    graph = helper.make_graph(
        list(nodes),
        "g",
        [vi(i) for i in inputs],
        [vi(o) for o in outputs],
        inits,
        value_info=[vi(v) for v in value_info],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


class _Builder:
    """Conv/BN/Gemm blocks whose weights live in Constant nodes or as inputs+initializers."""

    def __init__(self, seed: int, weights_as: str) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.weights_as = weights_as  # "constant" | "input" | "initializer"
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def weight(self, stem: str, value: np.ndarray) -> str:
        name = self.name(stem)
        if self.weights_as == "constant":
            self.nodes.append(const_node(name, value.astype(np.float32)))
        else:
            self.inits[name] = value.astype(np.float32)
        return name

    def weight_int(self, stem: str, value) -> str:
        name = self.name(stem)
        if self.weights_as == "constant":
            self.nodes.append(const_node(name, np.asarray(value, dtype=np.int64)))
        else:
            self.inits[name] = np.asarray(value, dtype=np.int64)
        return name

    def conv_bn_relu(self, x: str, cin: int, cout: int, stride: int = 1, bias: bool = True) -> str:
        w = self.weight("w", self.rng.standard_normal((cout, cin, 3, 3)) * (2 / (9 * cin)) ** 0.5)
        ins = [x, w] + ([self.weight("b", self.rng.standard_normal(cout) * 0.1)] if bias else [])
        y = self.name("conv")
        self.nodes.append(
            helper.make_node("Conv", ins, [y], name=y, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride])
        )
        z = self.bn(y, cout)
        r = self.name("relu")
        self.nodes.append(helper.make_node("Relu", [z], [r], name=r))
        return r

    def bn(self, x: str, c: int) -> str:
        params = [
            self.weight("gamma", self.rng.uniform(0.5, 1.5, c)),
            self.weight("beta", self.rng.uniform(-0.2, 0.2, c)),
            self.weight("mean", self.rng.uniform(-0.2, 0.2, c)),
            self.weight("var", self.rng.uniform(0.5, 1.5, c)),
        ]
        y = self.name("bn")
        self.nodes.append(helper.make_node("BatchNormalization", [x, *params], [y], name=y, epsilon=1e-5))
        return y

    def noop(self, op: str, x: str, **attrs) -> str:
        y = self.name(op.lower())
        self.nodes.append(helper.make_node(op, [x], [y], name=y, **attrs))
        return y


def legacy_detector(
    size: int = 32, width: int = 8, opset: int = 11, weights_as: str = "constant", seed: int = 0, extra_blocks: int = 0
) -> onnx.ModelProto:
    """An opset-11/12 detector as old exporters wrote it (see the module docstring).

    ``extra_blocks`` adds Conv-BN-Relu(-Identity) blocks at stride 4, for benchmark-sized graphs.
    """
    b = _Builder(seed, weights_as)
    x = b.conv_bn_relu("images", 3, width, 2)
    x = b.noop("Identity", x)
    x = b.conv_bn_relu(x, width, 2 * width, 2)
    x = b.conv_bn_relu(x, 2 * width, 2 * width)
    for k in range(extra_blocks):
        x = b.conv_bn_relu(x, 2 * width, 2 * width)
        x = b.noop("Identity", x) if k % 2 else x
    x = b.noop("Dropout", x)  # opset 11: ratio is an attribute and there is no training mode
    feat = b.conv_bn_relu(x, 2 * width, 4 * width, 2)
    # The head flattens with shape arithmetic, as torch 1.x traced x.view(x.size(0), -1).
    shape, batch = b.name("shape"), b.name("batch")
    b.nodes.append(helper.make_node("Shape", [feat], [shape], name=shape))
    b.nodes.append(helper.make_node("Gather", [shape, b.weight_int("zero", 0)], [batch], name=batch, axis=0))
    unsq, target = b.name("unsq"), b.name("target")
    b.nodes.append(helper.make_node("Unsqueeze", [batch], [unsq], name=unsq, axes=[0]))
    b.nodes.append(helper.make_node("Concat", [unsq, b.weight_int("minus_one", [-1])], [target], name=target, axis=0))
    flat = b.name("flat")
    b.nodes.append(helper.make_node("Reshape", [feat, target], [flat], name=flat))
    n_in = 4 * width * (size // 8) ** 2
    gw = b.weight("fc_w", b.rng.standard_normal((n_in, 64)) * (1 / n_in) ** 0.5)
    gb = b.weight("fc_b", b.rng.standard_normal(64) * 0.1)
    fc = b.name("fc")
    b.nodes.append(helper.make_node("Gemm", [flat, gw, gb], [fc], name=fc))
    fcbn = b.bn(fc, 64)
    t1 = b.noop("Transpose", fcbn, perm=[1, 0])
    t2 = b.noop("Transpose", t1, perm=[1, 0])
    cast = b.noop("Cast", t2, to=TensorProto.FLOAT)
    hw = b.weight("head_w", b.rng.standard_normal((64, 10)) * 0.125)
    b.nodes.append(helper.make_node("MatMul", [cast, hw], ["logits"], name="head"))
    inputs = [("images", TensorProto.FLOAT, ["batch", 3, size, size])]
    if weights_as == "input":  # IR < 4 style: every initializer is also a graph input
        inputs += [(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for k, v in b.inits.items()]
    model = make(
        b.nodes,
        inputs,
        [("logits", TensorProto.FLOAT, ["batch", 10])],
        b.inits,
        opset=opset,
        ir_version=6 if opset <= 12 else 8,
    )
    model.producer_name, model.producer_version = "pytorch", "1.8"
    return model


def feeds_for(model: onnx.ModelProto, seed: int = 0, batch: int = 2) -> dict[str, np.ndarray]:
    """Random float inputs for the model's real inputs (symbolic dims = ``batch``)."""
    rng = np.random.default_rng(seed)
    weights = {i.name for i in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in weights:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else batch for d in vi.type.tensor_type.shape.dim]
        out[vi.name] = rng.standard_normal(dims).astype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    return out


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs by name under ONNX Runtime (CPU, optimizations off: the graph as written)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def apply(model: onnx.ModelProto, *specs, feeds=None, atol: float = 1e-5, rtol: float = 1e-5):
    """Run passes (config form) through the checked runner; return (model, reports)."""
    from deploykit.surgery.registry import instantiate
    from deploykit.surgery.runner import run_passes

    return run_passes(
        model,
        [instantiate(s) for s in specs],
        feeds if feeds is not None else feeds_for(model),
        atol=atol,
        rtol=rtol,
        where="model.onnx",
    )


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def dims(vi: onnx.ValueInfoProto) -> list:
    """A value's dims: sizes, names, or '' for unknown."""
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]
