"""Cross-layer equalization: the same FP32 function with evened-out channels, and what HardSwish does to it."""

import numpy as np
import pytest

from deploykit.config import QuantizeConfig
from deploykit.graph.run import session_from_onnx
from deploykit.metrics import compare
from deploykit.quant.equalize import equalize
from deploykit.quant.flavours import flavour_for
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.reader import SampleStream
from tests.quant import models


def fp32_error(a, b, samples):
    ra, rb = session_from_onnx(a, "as_written"), session_from_onnx(b, "as_written")
    return max(compare(ra.infer(s)["prob"], rb.infer(s)["prob"])["rel_l2"] for s in samples)


def test_exact_equalization_keeps_the_function_and_evens_out_the_channels():
    model = models.depthwise(spread=2.0)
    out, report = equalize(model, "exact")
    assert ("b0_expand", "HardSwish", "b0_dw") in report.pairs and ("b0_dw", "HardSwish", "b0_project") in report.pairs
    assert "b1_project" in report.skipped and "Add" in report.skipped["b1_project"]  # a residual is no pair
    assert len(report.rewritten) == 7  # every HardSwish between a pair, now with its bound per channel
    assert fp32_error(model, out, models.images(4, size=32, seed=3)) < 1e-5
    from onnx import numpy_helper

    def spread(m, name):
        w = next(numpy_helper.to_array(i) for i in m.graph.initializer if i.name == name)
        r = np.abs(w).reshape(w.shape[0], -1).max(axis=1)
        return r.max() / r.min()

    assert spread(out, "b0_dw.weight") < spread(model, "b0_dw.weight") / 3  # the depthwise gains moved upstream


def test_hardswish_breaks_plain_equalization_and_skip_leaves_it_alone():
    model, samples = models.depthwise(spread=2.0), models.images(4, size=32, seed=3)
    approximate, _ = equalize(model, "approximate")
    assert fp32_error(model, approximate, samples) > 0.1  # HardSwish is not scale-invariant: measured 0.47
    skipped, report = equalize(model, "skip")
    assert report.pairs == [("b2_project", "", "head")] and fp32_error(model, skipped, samples) < 1e-5


@pytest.mark.parametrize("flavour", ["onnxruntime", "tensorrt"])
def test_equalization_lowers_int8_error_on_a_depthwise_network(flavour):
    from deploykit.quant.ort_flavour import resolve_reduce_range

    model, calib, valid = models.depthwise(spread=2.0), models.images(48, size=32), models.images(12, size=32, seed=9)
    ref = session_from_onnx(model, "as_written")

    def error(**cfg):
        job = Job(
            model,
            QuantizeConfig(precision="int8", high_precision="fp32", method="max", **cfg),
            flavour,
            SampleStream(calib),
            reduce_range=resolve_reduce_range("auto") if flavour == "onnxruntime" else False,
        )
        result = quantize_model(job)
        session = session_from_onnx(result.model, flavour_for(flavour).evaluator)
        return float(
            np.mean([compare(ref.infer(s)["prob"], session.infer(s)["prob"])["rel_l2"] for s in valid])
        ), result

    plain, _ = error()
    equalized, result = error(equalize=True)
    assert equalized < plain * 0.95, (plain, equalized)  # measured 14-29 % lower
    assert any(n.startswith("cross-layer equalization: 8 convolution pairs") for n in result.notes)
