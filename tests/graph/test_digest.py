"""Content digests of in-memory models: the same content the same digest, any change another one."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from deploykit.graph.proto import copy_model, digest_model


def _model(w: np.ndarray, b: np.ndarray, alpha: float = 0.1):
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "b"], ["a"], name="add"),
        helper.make_node("LeakyRelu", ["a"], ["y"], name="act", alpha=alpha),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, w.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, w.shape[1]])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_model_digest_follows_its_content_weights_included():
    rng = np.random.default_rng()
    w, b = rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    model = _model(w, b)
    digest = digest_model(model)
    assert digest_model(copy_model(model)) == digest == digest_model(_model(w.copy(), b.copy()))

    nudged = w.copy()
    nudged.flat[rng.integers(w.size)] += 1.0  # one weight value
    renamed = copy_model(model)
    renamed.graph.initializer[1].name = "b2"
    renamed.graph.node[1].input[1] = "b2"
    reshaped = copy_model(model)
    reshaped.graph.initializer[0].dims[:] = [4, 8]  # the same bytes, another shape
    variants = [
        _model(nudged, b),
        _model(w, b, alpha=0.2),  # an attribute
        renamed,
        reshaped,
        _model(w, b + np.float32(0.5)),  # every value of the other weight
    ]
    digests = [digest_model(v) for v in variants]
    assert digest not in digests and len(set(digests)) == len(digests)
