"""ONNX Runtime's integer kernels checked node by node: a fused node that disagrees with its Q/DQ
definition is named and kept in float, whatever CPU the suite runs on."""

import numpy as np
import pytest

from deploykit.config import QuantizeConfig
from deploykit.graph import run
from deploykit.graph.run import session_from_onnx
from deploykit.metrics import compare
from deploykit.quant import kernel_check
from deploykit.quant import prepare as g
from deploykit.quant.kernel_check import miscomputed
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.reader import SampleStream
from tests.quant import models


class _TailChannelFault:
    """Test double of a faulty fused kernel (the onnxruntime#26324 shape): the output channels after
    the first 16 come back 40 steps off; every other evaluator is the real one."""

    def __init__(self, real):
        self.real = real

    def __call__(self, model, evaluator="as_written", **kw):
        session = self.real(model, evaluator, **kw)
        if evaluator != "onnxruntime" or model.graph.name != "kernel_check":
            return session
        outer = self

        class Faulty:
            def infer(self, feeds):
                out = session.infer(feeds)
                return {k: outer.corrupt(v) for k, v in out.items()}

        return Faulty()

    @staticmethod
    def corrupt(value):
        value = value.copy()
        if value.ndim >= 2 and value.shape[1] > 16:
            value[:, 16:] += 40 * max(float(np.abs(value).max()) / 127, 1e-3)
        return value


def _placed(model, samples, monkeypatch):
    """The onnxruntime flavour's Q/DQ graph with every node quantized (the check itself off)."""
    with monkeypatch.context() as m:
        m.setattr(kernel_check, "miscomputed", lambda *a: {})
        result = quantize_model(Job(model, QuantizeConfig(precision="int8"), "onnxruntime", SampleStream(samples)))
    return g.infer_shapes(result.model)


def test_a_kernel_wrong_on_tail_channels_is_named_and_a_faithful_one_is_not(monkeypatch):
    samples = models.images(8)
    placed = _placed(models.cnn((24,), batch=1), samples, monkeypatch)
    assert {"conv0", "head"} <= g.quantized_node_names(placed)
    monkeypatch.setattr(
        run,
        "session_from_onnx",
        lambda m, evaluator="as_written", **kw: session_from_onnx(
            m, "as_written", **{k: v for k, v in kw.items() if k != "level"}
        ),
    )  # "fused" = the Q/DQ graph itself
    assert miscomputed(placed, "extended") == {}
    monkeypatch.setattr(run, "session_from_onnx", _TailChannelFault(session_from_onnx))
    found = miscomputed(placed, "extended")
    assert set(found) == {"conv0"}  # 24 output channels; the head has 4
    assert found["conv0"].code == "kernel_miscomputes" and found["conv0"].sentence.startswith(
        "ONNX Runtime's integer kernel on this CPU computes it wrong (Conv, "
    )
    assert miscomputed(placed, "disabled") == {}  # nothing is fused there


def test_quantize_keeps_a_miscomputed_node_in_float_and_says_so(monkeypatch):
    monkeypatch.setattr(run, "session_from_onnx", _TailChannelFault(session_from_onnx))
    result = quantize_model(
        Job(
            models.cnn((24, 8), batch=1),
            QuantizeConfig(precision="int8"),
            "onnxruntime",
            SampleStream(models.images(8)),
        )
    )
    assert result.excluded["conv0"].code == "kernel_miscomputes"
    assert "conv0" not in g.quantized_node_names(result.model) and "conv1" in g.quantized_node_names(result.model)
    assert any(
        n.startswith("ONNX Runtime's integer kernels on this CPU compute 1 quantized node(s) wrong (conv0)")
        for n in result.notes
    )


@pytest.mark.parametrize("channels", [(24, 20), (17, 48)])
def test_on_this_cpu_the_onnxruntime_flavour_computes_what_its_graph_says(channels):
    # channel counts that are not multiples of 16: the faulty VNNI/AMX kernels get them wrong, so
    # without the check this fails on such a CPU; elsewhere it holds because the kernels are right
    model = models.cnn(channels, batch=1, size=24)
    result = quantize_model(
        Job(model, QuantizeConfig(precision="int8"), "onnxruntime", SampleStream(models.images(16, size=24)))
    )
    fused, written = session_from_onnx(result.model, "onnxruntime"), session_from_onnx(result.model, "as_written")
    for sample in models.images(4, size=24, seed=7):
        a, b = fused.infer(sample), written.infer(sample)
        assert all(compare(b[k], a[k])["rel_l2"] < 0.02 for k in a)


def test_nodes_that_run_the_same_kernel_on_the_same_shapes_are_checked_once(monkeypatch):
    samples = models.images(8)
    placed = _placed(models.cnn((24, 24, 24), batch=1), samples, monkeypatch)

    def faithful(m, evaluator="as_written", **kw):  # "fused" = the Q/DQ graph itself, then the fault on top
        return session_from_onnx(m, "as_written", **{k: v for k, v in kw.items() if k != "level"})

    fault = _TailChannelFault(faithful)
    opened = []
    monkeypatch.setattr(run, "session_from_onnx", lambda m, *a, **k: opened.append(1) or fault(m, *a, **k))
    found = miscomputed(placed, "extended")
    assert set(found) == {"conv0", "conv1", "conv2"}  # conv1 and conv2 (24 -> 24) share one run, both named
    assert found["conv1"] == found["conv2"]
    assert len(opened) == 2 * 3  # as written and fused, for conv0, conv1 (= conv2) and the head
