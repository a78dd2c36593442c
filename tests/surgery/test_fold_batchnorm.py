"""fold_batchnorm: Conv, grouped ConvTranspose and Gemm (both layouts, alpha/beta) against the unfused graph."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.surgery.models import apply, feeds_for, make, ops, ort_run

F = TensorProto.FLOAT
RNG = np.random.default_rng(3)


def bn_inits(c):
    return {
        "gamma": RNG.uniform(0.5, 2, c).astype(np.float32),
        "beta": RNG.uniform(-1, 1, c).astype(np.float32),
        "mean": RNG.uniform(-1, 1, c).astype(np.float32),
        "var": RNG.uniform(0.1, 3, c).astype(np.float32),
    }


def bn(x, y="y"):
    return helper.make_node("BatchNormalization", [x, "gamma", "beta", "mean", "var"], [y], name="bn", epsilon=1e-3)


def folded(model, expected_ops):
    out, reports = apply(model, "fold_batchnorm", atol=1e-5, rtol=1e-5)
    assert ops(out) == expected_ops
    feeds = feeds_for(model, batch=2)
    ref, got = ort_run(model, feeds)["y"], ort_run(out, feeds)["y"]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    return out, reports[0]


@pytest.mark.parametrize("bias", [True, False])
def test_conv(bias):
    inits = {
        "w": RNG.standard_normal((6, 3, 3, 3)).astype(np.float32),
        "b": RNG.standard_normal(6).astype(np.float32),
        **bn_inits(6),
    }
    conv = helper.make_node("Conv", ["x", "w", "b"] if bias else ["x", "w"], ["c"], pads=[1, 1, 1, 1])
    model = make([conv, bn("c")], [("x", F, ["n", 3, 5, 5])], [("y", F, ["n", 6, 5, 5])], inits)
    _, report = folded(model, ["Conv"])
    assert report["details"]["folded"] == ["bn"] and report["nodes_removed"] == 1 and report["nodes_modified"] == 1


def test_grouped_conv_transpose():
    inits = {"w": RNG.standard_normal((4, 3, 2, 2)).astype(np.float32), **bn_inits(6)}  # C_in 4, group 2 -> C_out 6
    conv = helper.make_node("ConvTranspose", ["x", "w"], ["c"], group=2, strides=[2, 2])
    model = make([conv, bn("c")], [("x", F, ["n", 4, 3, 3])], [("y", F, ["n", 6, 6, 6])], inits)
    folded(model, ["ConvTranspose"])


@pytest.mark.parametrize("trans_b", [0, 1])
def test_gemm_with_alpha_and_beta(trans_b):
    w = RNG.standard_normal((5, 8) if trans_b else (8, 5)).astype(np.float32)
    inits = {"w": w, "c": RNG.standard_normal(5).astype(np.float32), **bn_inits(5)}
    gemm = helper.make_node("Gemm", ["x", "w", "c"], ["g"], transB=trans_b, alpha=0.5, beta=2.0)
    model = make([gemm, bn("g")], [("x", F, ["n", 8])], [("y", F, ["n", 5])], inits)
    folded(model, ["Gemm"])


def test_bn_that_cannot_fold_stays_with_a_reason():
    inits = {"w": RNG.standard_normal((4, 3, 1, 1)).astype(np.float32), **bn_inits(4)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), bn("c"), helper.make_node("Relu", ["c"], ["r"])]
    model = make(nodes, [("x", F, [1, 3, 2, 2])], [("y", F, [1, 4, 2, 2]), ("r", F, [1, 4, 2, 2])], inits)
    out, reports = apply(model, "fold_batchnorm")
    assert reports[0]["modified"] is False
    assert "output is used elsewhere" in reports[0]["reason"] and "bn" in reports[0]["reason"]
    assert ops(out) == ["Conv", "BatchNormalization", "Relu"]


def test_bn_after_a_graph_input_is_reported():
    model = make([bn("x")], [("x", F, [1, 4, 2, 2])], [("y", F, [1, 4, 2, 2])], bn_inits(4))
    _, reports = apply(model, "fold_batchnorm")
    assert "graph input" in reports[0]["reason"]
