"""±inf in masked attention logits is legitimate: calibration ranges such tensors on their finite
values, and the quantize stage keeps the masking path exact (padded tokens get exactly no weight)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deploykit
from deploykit.graph.files import load_model
from deploykit.graph.run import session_from_onnx
from deploykit.quant.ranges import RangeSettings, calibrate
from tests.test_input_kinds import write_model


def masked_logits_model(then: str = "Softmax"):
    """Where(padding, -inf, logits) -> Softmax: the graph torch's masked_fill exports to (``then``: the
    op after the mask; Exp stays finite where every position is masked, Softmax gives NaN)."""
    after = {"axis": -1} if then == "Softmax" else {}
    nodes = [
        helper.make_node("Where", ["padding", "neg_inf", "logits"], ["masked"], name="mask"),
        helper.make_node(then, ["masked"], ["weights"], name=then.lower(), **after),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("padding", TensorProto.BOOL, [1, 4]),
        ],
        [helper.make_tensor_value_info("weights", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(np.array(-np.inf, np.float32), "neg_inf")],
    )
    return onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("method", ["max", "percentile", "mse"])
def test_a_tensor_holding_minus_inf_is_ranged_on_its_finite_values(method):
    rng = np.random.default_rng(0)
    samples = [
        {
            "logits": rng.standard_normal((1, 4)).astype(np.float32) * 3,
            "padding": np.array([[False, False, i % 2 == 0, True]]),
        }
        for i in range(8)
    ]
    result = calibrate(masked_logits_model(), samples, RangeSettings(method), (method,))
    r = result.sets[method]["masked"]
    finite = [s["logits"][~s["padding"]] for s in samples]
    assert r.min == pytest.approx(min(f.min() for f in finite)) and r.max == pytest.approx(max(f.max() for f in finite))
    assert np.isfinite(r.amax) and 0 < r.amax <= max(abs(r.min), abs(r.max)) + 1e-6
    assert result.infinite == frozenset({"masked"})  # the logits themselves are finite: not listed


def test_a_tensor_with_no_finite_value_on_any_sample_is_still_listed_as_infinite():
    """Every position masked: 'masked' is all -inf, nothing to range it on, and it must still stay out
    of Q/DQ (calibration measures samples side by side; the flag travels with each sample's result)."""
    model = masked_logits_model(then="Exp")
    rng = np.random.default_rng(1)
    samples = [{"logits": rng.standard_normal((1, 4)).astype(np.float32), "padding": np.ones((1, 4), bool)}] * 6
    result = calibrate(model, samples, RangeSettings("percentile"), ("max", "percentile"))
    assert result.infinite == frozenset({"masked"})
    assert result.sets["max"]["weights"].max == 0.0  # exp(-inf): finite zeros, ranged as usual


@pytest.fixture(scope="module")
def masked_model(tmp_path_factory):
    """The masked-attention model with multi-input .npz calibration/validation data (no ``input:``)."""
    root = tmp_path_factory.mktemp("masked")
    rng = np.random.default_rng(0)
    for folder, count in (("calib", 24), ("valid", 6)):
        (root / folder).mkdir()
        for i in range(count):
            tokens, real = int(rng.integers(2, 5)), int(rng.integers(1, 3))
            np.savez(
                root / folder / f"s{i}.npz",
                tokens=rng.standard_normal((2, tokens, 8)).astype(np.float32),
                padding=np.broadcast_to(np.arange(tokens) >= min(real, tokens), (2, tokens)).copy(),
            )
    # A random-weight toy: its INT8 error is not what this file tests (the tolerance is loosened).
    return write_model(
        root,
        extra="""
        calibration: {files: calib, samples: 24}
        validation: {files: valid, samples: 6}
        # high_precision_ops off: the Softmax must be kept out by the masking rule alone
        quantize:
          high_precision_ops: []
          tolerances: {int8: {rel_l2: 0.3, cosine: 0.95}, fp8: {rel_l2: 0.3, cosine: 0.95}}
    """,
    ), root / "store"


def padded_perturbed(model_path, evaluator):
    """Outputs for inputs whose padded tokens (2 and 3 of 4) hold two very different values."""
    session = session_from_onnx(load_model(model_path), evaluator)
    rng = np.random.default_rng(3)
    tokens = rng.standard_normal((2, 4, 8)).astype(np.float32)
    padding = np.broadcast_to(np.arange(4) >= 2, (2, 4)).copy()
    other = tokens.copy()
    other[:, 2:] = rng.standard_normal((2, 2, 8)) * 5
    return session.run_all({"tokens": tokens, "padding": padding}), session.run_all(
        {"tokens": other, "padding": padding}
    )


def test_int8_keeps_the_masking_path_exact(masked_model):
    cfg, store = masked_model
    result = deploykit.convert(
        cfg, workdir=store, quantize__precision="int8", quantize__target="onnxruntime", gate__iterations=2
    )
    assert result.passed, repr(result)
    excluded = result.report("model", "precision.json")["excluded_from_quantization"]
    masking = {name for name, why in excluded.items() if why["code"] == "masking"}
    assert masking and all(why["code"] in ("masking", "output_tail") for why in excluded.values())
    assert {"Where", "Softmax"} <= {
        n.op_type for n in load_model(result.artifacts["model"].file("model.onnx")).graph.node if n.name in excluded
    }
    a, b = padded_perturbed(result.artifacts["model"].file("model.onnx"), "onnxruntime")
    # the valid tokens' outputs: padded tokens get exactly zero weight, quantized or not
    assert np.array_equal(a["mixed"][:, :2], b["mixed"][:, :2])
    assert not np.array_equal(a["mixed"][:, 2:], b["mixed"][:, 2:])  # (the padded tokens' own outputs do change)


@pytest.mark.parametrize("precision", ["int8", "fp8"])
def test_tensorrt_flavour_keeps_the_masking_path_exact(masked_model, precision):
    cfg, store = masked_model
    result = deploykit.convert(
        cfg, workdir=store, quantize__precision=precision, quantize__target="tensorrt", gate__iterations=2
    )
    assert result.passed, repr(result)
    a, b = padded_perturbed(result.artifacts["model"].file("model.onnx"), "as_written")
    assert np.array_equal(a["mixed"][:, :2], b["mixed"][:, :2])
