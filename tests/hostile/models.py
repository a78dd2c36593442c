"""Small ONNX models built in code, one hostile trait each."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(graph: onnx.GraphProto, functions: list | None = None, opsets: list | None = None) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=opsets or [helper.make_opsetid("", 17)], functions=functions or [])
    m.ir_version = 8
    return m


def conv(seed: int = 0) -> onnx.ModelProto:
    """x [batch, 3, 8, 8] -> Conv(4) -> Relu -> y: a valid model."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32) * 0.1, "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes,
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        [w, b],
    )
    return _model(g)


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def identity_io(input_type: onnx.TypeProto, name: str = "x") -> onnx.ModelProto:
    """A graph whose input has the given type (sequence, map, optional, string tensor ...)."""
    vi = helper.make_value_info(name, input_type)
    out = helper.make_value_info("y", input_type)
    g = helper.make_graph([helper.make_node("Identity", [name], ["y"], name="id")], "io", [vi], [out])
    return _model(g)


def sequence_input() -> onnx.ModelProto:
    return identity_io(helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2])), "seq")


def map_input() -> onnx.ModelProto:
    return identity_io(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [])), "table"
    )


def tensor_input(elem: int, name: str) -> onnx.ModelProto:
    return identity_io(helper.make_tensor_type_proto(elem, [1, 4]), name)


def huge_fixed_dim() -> onnx.ModelProto:
    return identity_io(helper.make_tensor_type_proto(TensorProto.FLOAT, [1, 10**12]), "wide")


def function_model(calls: dict[str, list[str]], main: str) -> onnx.ModelProto:
    """Model-local functions in domain ``local``: each named function's body calls the listed ones
    in turn (an empty list: a Relu); the graph calls ``main``."""
    functions = []
    for name, callees in calls.items():
        nodes, x = [], "fx"
        for i, callee in enumerate(callees or ["Relu"]):
            domain = "" if callee == "Relu" else "local"
            out = "fy" if i == len(callees or ["Relu"]) - 1 else f"t{i}"
            nodes.append(helper.make_node(callee, [x], [out], domain=domain))
            x = out
        functions.append(
            helper.make_function(
                "local", name, ["fx"], ["fy"], nodes, [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
            )
        )
    g = helper.make_graph(
        [helper.make_node(main, ["x"], ["y"], domain="local", name="call")],
        "fn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    return _model(g, functions, [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


def recursive_function() -> onnx.ModelProto:
    return function_model({"F": ["F"]}, "F")


def mutually_recursive() -> onnx.ModelProto:
    return function_model({"F": ["G"], "G": ["H"], "H": ["F"]}, "F")


def deep_chain(depth: int = 200) -> onnx.ModelProto:
    calls = {f"F{i}": [f"F{i + 1}"] for i in range(depth)}
    calls[f"F{depth}"] = []
    return function_model(calls, "F0")


def exponential(depth: int = 30) -> onnx.ModelProto:
    """F_i calls F_{i+1} twice: 2^depth nodes once inlined, from a few hundred bytes."""
    calls = {f"F{i}": [f"F{i + 1}", f"F{i + 1}"] for i in range(depth)}
    calls[f"F{depth}"] = []
    return function_model(calls, "F0")


def with_external_data(
    folder: Path,
    *,
    location: str = "w.bin",
    offset: int = 0,
    length: int | None = None,
    data: bytes | None = None,
    link: str = "",
) -> Path:
    """conv() with its weight ``w`` in an external file; ``link`` = 'hard' or 'symlink' makes the
    data file a link to a file outside ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    model = conv()
    w = next(t for t in model.graph.initializer if t.name == "w")
    raw = data if data is not None else w.raw_data or numpy_helper.to_array(w).tobytes()
    target = folder / location
    if link:
        outside = folder.parent / f"outside-{folder.name}.bin"
        outside.write_bytes(raw)
        target.parent.mkdir(parents=True, exist_ok=True)
        if link == "hard":
            os.link(outside, target)
        else:
            target.symlink_to(outside)
    elif not (location.startswith("/") or location.startswith("..") or "\0" in location):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(raw)
    w.ClearField("raw_data")
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset), "length": str(len(raw) if length is None else length)}
    for k, v in entries.items():
        e = w.external_data.add()
        e.key, e.value = k, v
    path = folder / "model.onnx"
    onnx.save(model, str(path))
    return path


def cyclic() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
    ]
    g = helper.make_graph(
        nodes,
        "cyc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, 4])],
    )
    return _model(g)


def dangling() -> onnx.ModelProto:
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")]
    g = helper.make_graph(
        nodes,
        "dang",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    return _model(g)


def nested_ifs(depth: int) -> onnx.ModelProto:
    """``If`` nodes nested ``depth`` deep."""

    def branch(level: int) -> onnx.GraphProto:
        out = helper.make_tensor_value_info(f"o{level}", TensorProto.FLOAT, [1, 4])
        if level == 0:
            node = helper.make_node("Identity", ["x"], [f"o{level}"])
        else:
            node = helper.make_node("If", ["c"], [f"o{level}"], then_branch=branch(level - 1), else_branch=branch(0))
        return helper.make_graph([node], f"b{level}", [], [out])

    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=branch(depth), else_branch=branch(0))],
        "ifs",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    return _model(g)


def wide(seed: int = 0) -> onnx.ModelProto:
    """x [batch, 3, 16, 16] -> Conv(64) -> Relu -> Conv(64) -> y: ~150 KB of weights (a disk fills)."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((64, 3, 3, 3)) * 0.2).astype(np.float32), "w")
    w2 = numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    g = helper.make_graph(
        nodes,
        "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64, 16, 16])],
        [w, w2],
    )
    return _model(g)


def conv_rank_mismatch() -> onnx.ModelProto:
    """conv() with a rank-3 input for its 2-D weight: onnx's Conv shape inference aborts (SIGABRT)."""
    model = conv()
    dims = model.graph.input[0].type.tensor_type.shape.dim
    del dims[3]
    return model


def misdeclared(
    shape: list | None = (), elem: int = TensorProto.FLOAT, stale_value_info: bool = False, batch: int | str = 1
) -> onnx.ModelProto:
    """A PP-OCR-style recognizer head: x [batch, 4, 8] -> MatMul -> Softmax -> y, whose output is
    declared with ``shape`` and ``elem`` (the real one: float [batch, 4, 6]); optionally a
    ``value_info`` entry for the MatMul output with a wrong rank."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "w")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Softmax", ["m"], ["y"], name="softmax", axis=-1),
    ]
    y = helper.make_tensor_value_info("y", elem, None if shape is None else list(shape))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 8])
    g = helper.make_graph(nodes, "rec", [x], [y], [w])
    if stale_value_info:
        g.value_info.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, [7]))
    return _model(g)
