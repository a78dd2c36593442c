"""Empirical bias correction removes the mean output shift that weight rounding adds."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploykit.config import QuantizeConfig
from deploykit.graph.run import session_from_onnx
from deploykit.quant.bias import correct_biases
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.reader import SampleStream


def _biased_weights(cout: int, cin: int) -> np.ndarray:
    w = np.full((cout, cin, 1, 1), 0.51 / 127, np.float32)  # 0.51 of a step: rounds to a whole step
    w[:, 0] = 1.0  # sets the per-channel scale to 1 / 127
    return w


def rounding_biased_conv(layers: int = 1) -> onnx.ModelProto:
    """1x1 convs whose every output channel has one large weight and many small ones just above half an
    INT8 step: per-channel rounding pushes all the small ones up, so on positive inputs the output mean
    shifts, and with two layers the second also sees the first one's shift."""
    cin, cout = 64, 64 if layers > 1 else 8
    inits = [
        numpy_helper.from_array(_biased_weights(cout, cin), "w"),
        numpy_helper.from_array(np.zeros(cout, np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w", "b"], ["y" if layers == 1 else "c"], name="conv"),
    ]
    if layers > 1:
        inits += [
            numpy_helper.from_array(_biased_weights(8, cout) * 0.1, "w2"),
            numpy_helper.from_array(np.zeros(8, np.float32), "b2"),
        ]
        nodes += [
            helper.make_node("Relu", ["c"], ["r2"], name="relu2"),
            helper.make_node("Conv", ["r2", "w2", "b2"], ["y"], name="conv2"),
        ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("layers", [1, 2])
def test_the_mean_shift_per_channel_is_removed_from_the_bias(layers):
    """Each layer's own shift is corrected; measured in the quantized graph, the second layer's shift
    would include the first one's, and correcting both for it removes it twice."""
    rng = np.random.default_rng(0)
    samples = [{"x": rng.uniform(0, 1, (1, 64, 8, 8)).astype(np.float32)} for _ in range(24)]
    model = rounding_biased_conv(layers)
    result = quantize_model(
        Job(
            model,
            QuantizeConfig(precision="int8", high_precision="fp32", method="max"),
            "tensorrt",
            SampleStream(samples),
        )
    )
    fresh = [{"x": rng.uniform(0, 1, (1, 64, 8, 8)).astype(np.float32)} for _ in range(8)]
    ref = session_from_onnx(model, "as_written")

    def mean_shift(m):
        s = session_from_onnx(m, "as_written")
        return float(np.mean([np.abs((s.infer(x)["y"] - ref.infer(x)["y"]).mean(axis=(0, 2, 3))).max() for x in fresh]))

    corrected, report = correct_biases(result.model, result.reference, samples[:8])
    assert set(report.corrected) == ({"conv"} if layers == 1 else {"conv", "conv2"}) and report.samples == 8
    before, after = mean_shift(result.model), mean_shift(corrected)
    assert before > 0.02 and after < before / 5, (
        before,
        after,
    )  # measured 0.12 -> 0.002 (1 layer), 0.032 -> 0.0006 (2)


def test_bias_correction_in_the_stage_uses_calibration_samples_and_says_so():
    rng = np.random.default_rng(1)
    samples = [{"x": rng.uniform(0, 1, (1, 64, 8, 8)).astype(np.float32)} for _ in range(40)]
    for flavour in ("tensorrt", "onnxruntime"):
        result = quantize_model(
            Job(
                rounding_biased_conv(),
                QuantizeConfig(precision="int8", high_precision="fp32", method="max", bias_correction=True),
                flavour,
                SampleStream(samples),
            )
        )
        assert any(n.startswith("bias correction: 1 layers on 8 calibration samples") for n in result.notes), (
            result.notes
        )
        assert result.check.passed
