"""Graphs reproducing refusals reported in public TensorRT / onnx-tensorrt issues, each built in code,
with the rules ``deploykit lint`` must raise for it: the lint's regression corpus (tests/lint/
test_issue_corpus.py), a row set of ``bench/bench_lint.py`` and, where TensorRT runs,
``scripts/gpu_check.py``'s agreement check against the real parser (:func:`agreement_rows`).

Each case names the issue it reproduces; the graph is the smallest one showing the same refusal, not
the reporter's model. ``clean`` cases are the same graphs made right: the parser accepts them and the
lint must find no error (a lint error there would be a false alarm).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, T = TensorProto.FLOAT, TensorProto


@dataclass(frozen=True)
class Case:
    name: str
    issue: str  # owner/repo#number
    what: str  # the refusal, in our words
    build: Callable[[], onnx.ModelProto]
    errors: frozenset[str]  # the lint's error rules for it (empty: the parser accepts it)


def _value(name: str, elem: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _init(name: str, array: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _model(nodes: list, inputs: list, outputs: list, inits: list = (), opset: int = 17) -> onnx.ModelProto:
    m = helper.make_model(
        helper.make_graph(nodes, "issue", inputs, outputs, list(inits)),
        opset_imports=[helper.make_opsetid("", opset)],
    )
    m.ir_version = 9
    return m


def scatternd_add(reduction: str = "add") -> onnx.ModelProto:
    nodes = [helper.make_node("ScatterND", ["data", "idx", "upd"], ["y"], name="scatter", reduction=reduction)]
    return _model(
        nodes,
        [_value("data", F, [8, 4]), _value("upd", F, [3, 4])],
        [_value("y", F, [8, 4])],
        [_init("idx", np.array([[1], [3], [1]], np.int64))],
        opset=18,
    )


def topk(k: int) -> onnx.ModelProto:
    nodes = [helper.make_node("TopK", ["scores", "k"], ["values", "indices"], name="topk", axis=1)]
    return _model(
        nodes,
        [_value("scores", F, [1, 8400])],
        [_value("values", F, [1, k]), _value("indices", T.INT64, [1, k])],
        [_init("k", np.array([k], np.int64))],
    )


def _qdq_conv(
    zero: Any,
    zero_dtype: Any,
    scale: Any = 0.05,
    wscale_count: int = 8,
    bias_int32: bool = False,
    opset: int = 13,
) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="x_q"),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="x_dq"),
        helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], name="w_dq", axis=0),
    ]
    inits = [
        _init("xs", np.asarray(scale, np.float32)),
        _init("xz", np.asarray(zero, zero_dtype)),
        _init("w", rng.integers(-100, 100, (8, 3, 3, 3)).astype(np.int8)),
        _init("ws", np.full(wscale_count, 0.01, np.float32)),
        _init("wz", np.zeros(wscale_count, np.int8)),
    ]
    conv_inputs = ["xd", "wd"]
    if bias_int32:
        nodes.append(helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"], name="bias_dq"))
        inits += [_init("b", np.arange(8, dtype=np.int32)), _init("bs", np.asarray(5e-4, np.float32))]
        conv_inputs.append("bd")
    nodes.append(helper.make_node("Conv", conv_inputs, ["y"], name="conv"))
    return _model(nodes, [_value("x", F, [1, 3, 16, 16])], [_value("y", F, [1, 8, 14, 14])], inits, opset)


def uint8_cast() -> onnx.ModelProto:
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s"], ["q"], name="q"),  # no zero point: UINT8
        helper.make_node("Cast", ["q"], ["y"], name="cast", to=T.FLOAT),
    ]
    return _model(nodes, [_value("x", F, [4])], [_value("y", F, [4])], [_init("s", np.asarray(0.1, np.float32))])


def dequantize_float_bias() -> onnx.ModelProto:
    """A DequantizeLinear of a float tensor (Paddle2ONNX's merged conv bias)."""
    nodes = [
        helper.make_node("DequantizeLinear", ["bias", "s", "z"], ["b"], name="bias_dq", axis=0),
        helper.make_node("Add", ["x", "b"], ["y"], name="add"),
    ]
    return _model(
        nodes,
        [_value("x", F, [1, 8])],
        [_value("y", F, [1, 8])],
        [
            _init("bias", np.ones(8, np.float32)),
            _init("s", np.full(8, 0.1, np.float32)),
            _init("z", np.zeros(8, np.int8)),
        ],
    )


def dynamic_quantized_gather() -> onnx.ModelProto:
    """quantize_dynamic's embedding: UINT8 weights with a non-zero zero point, dequantized after a Gather."""
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["rows"], name="embed"),
        helper.make_node("DequantizeLinear", ["rows", "s", "z"], ["y"], name="embed_dq"),
    ]
    return _model(
        nodes,
        [_value("ids", T.INT64, [1, 4])],
        [_value("y", F, [1, 4, 16])],
        [
            _init("table", np.random.default_rng(2).integers(0, 255, (32, 16)).astype(np.uint8)),
            _init("s", np.asarray(0.02, np.float32)),
            _init("z", np.asarray(131, np.uint8)),
        ],
    )


CASES: tuple[Case, ...] = (
    Case(
        "scatternd-add",
        "onnx/onnx-tensorrt#957",
        "ScatterND with a reduction (opset 16)",
        scatternd_add,
        frozenset({"op.attribute"}),
    ),
    Case(
        "scatternd-none",
        "microsoft/onnxruntime#23618",
        "ScatterND with reduction='none' (refused by 10.7, accepted since onnx-tensorrt#1013)",
        lambda: scatternd_add("none"),
        frozenset(),
    ),
    Case(
        "topk-k-8400",
        "open-mmlab/mmdeploy#2236",
        "TopK K above 3840",
        lambda: topk(8400),
        frozenset({"op.attribute"}),
    ),
    Case(
        "topk-k-1000",
        "open-mmlab/mmdeploy#2236",
        "the same TopK with K 1000",
        lambda: topk(1000),
        frozenset(),
    ),
    Case(
        "asymmetric-zero-point",
        "NVIDIA/TensorRT#2774",
        "a QuantizeLinear/DequantizeLinear zero point that is not 0",
        lambda: _qdq_conv(7, np.int8),
        frozenset({"qdq.zero_point"}),
    ),
    Case(
        "symmetric",
        "NVIDIA/TensorRT#2774",
        "the same graph, symmetric",
        lambda: _qdq_conv(0, np.int8),
        frozenset(),
    ),
    Case(
        "per-channel-count",
        "NVIDIA/TensorRT#994",
        "per-channel weight scales of the wrong count",
        lambda: _qdq_conv(0, np.int8, wscale_count=3),
        frozenset({"qdq.axis"}),
    ),
    Case(
        "int32-bias",
        "onnx/onnx-tensorrt#850",
        "quantize_static's INT32 bias DequantizeLinear",
        lambda: _qdq_conv(0, np.int8, bias_int32=True),
        frozenset({"qdq.bias"}),
    ),
    Case(
        "uint8-q-cast",
        "NVIDIA/TensorRT#2644",
        "a UINT8 QuantizeLinear read by a Cast",
        uint8_cast,
        frozenset(),
    ),  # warnings only: the parser imports zero-point-0 UINT8 as INT8
    Case(
        "dequantize-float",
        "lyuwenyu/RT-DETR#343",
        "DequantizeLinear of a float tensor ('only activation types allowed as input')",
        dequantize_float_bias,
        frozenset({"qdq.type"}),
    ),
    Case(
        "dynamic-quantized-gather",
        "NVIDIA/TensorRT#4698",
        "quantize_dynamic's UINT8 embedding with a non-zero zero point",
        dynamic_quantized_gather,
        frozenset({"qdq.type", "qdq.zero_point", "type.uint8"}),
    ),
)


def lint_case(case: Case, versions: tuple[str, ...] = ("10.13", "11")) -> Any:
    from deploykit.lint import LintOptions, lint_model

    return lint_model(case.build(), LintOptions(versions=versions, plugins=(), profiles={}), name=case.name)


def agreement_rows(folder: Path) -> list[dict[str, Any]]:
    """Each case through TensorRT's real parser: the lint's verdict (any error) against the parser's."""
    import tensorrt as trt

    from deploykit.lint.tables import nearest

    folder.mkdir(parents=True, exist_ok=True)
    version = nearest(trt.__version__)
    logger = trt.Logger(trt.Logger.ERROR)
    rows = []
    for case in CASES:
        path = folder / f"{case.name}.onnx"
        onnx.save(case.build(), str(path))
        builder = trt.Builder(logger)
        network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED))
        parser = trt.OnnxParser(network, logger)
        parsed = bool(parser.parse_from_file(str(path)))
        said = [parser.get_error(i).desc() for i in range(parser.num_errors)]
        refused = bool(lint_case(case, (version,)).errors)
        agree = refused == (not parsed)
        rows.append(
            {
                "case": f"lint agreement: {case.name} ({case.issue})",
                "status": "pass" if agree else "fail",
                "detail": f"TensorRT {trt.__version__} parser {'accepts' if parsed else 'refuses'}"
                f"{': ' + said[0][:160] if said else ''}; the lint "
                f"{'refuses' if refused else 'accepts'} (table {version})",
            }
        )
    return rows
