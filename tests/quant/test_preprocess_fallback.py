"""ONNX Runtime's symbolic shape inference fails on some graphs with a bare ``assert`` (a Range node
from torch.arange, in a DETR position embedding): an exception whose message is empty. Formatting
it must not crash, and the fallback without symbolic inference must still be tried."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from deploykit.errors import ModelError
from deploykit.quant import ort_flavour
from tests.quant import models


def _patched(monkeypatch, first: BaseException, second: BaseException | None = None) -> list[dict]:
    real = ort_flavour.private_ort_quantization()
    calls: list[dict] = []

    def quant_pre_process(src, dst, **kwargs):
        calls.append(kwargs)
        if not kwargs.get("skip_symbolic_shape"):
            raise first
        if second is not None:
            raise second
        return real.quant_pre_process(src, dst, **kwargs)

    monkeypatch.setattr(
        ort_flavour, "private_ort_quantization", lambda: SimpleNamespace(quant_pre_process=quant_pre_process)
    )
    monkeypatch.setattr(ort_flavour, "preprocess_in_memory", lambda package, model: None)  # as on such a graph
    return calls


def test_the_in_memory_steps_leave_a_failing_symbolic_inference_to_orts_function(monkeypatch):
    """The in-memory steps decline the graph (ORT's function then fails, notes it and retries)."""
    from deploykit.quant.ort_quicker import preprocess_in_memory

    package = ort_flavour.private_ort_quantization()
    inference = package.quant_pre_process.__globals__["SymbolicShapeInference"]

    def fails(*args, **kwargs):
        raise AssertionError()

    monkeypatch.setattr(inference, "infer_shapes", fails)
    assert preprocess_in_memory(package, models.cnn((4,))) is None
    monkeypatch.undo()
    assert preprocess_in_memory(package, models.cnn((4,))) is not None


def test_an_empty_assert_from_symbolic_inference_falls_back(monkeypatch):
    calls = _patched(monkeypatch, AssertionError())
    notes: list[str] = []
    out = ort_flavour.preprocess(models.cnn((4,)), notes)
    assert [c.get("skip_symbolic_shape", False) for c in calls] == [False, True]
    assert len(out.graph.node) >= 3
    assert notes and "symbolic shape inference failed (AssertionError)" in notes[0]


def test_when_the_fallback_fails_too_the_error_names_it(monkeypatch):
    _patched(monkeypatch, AssertionError(), AssertionError(""))
    with pytest.raises(ModelError, match="cannot pre-process the model for quantization: AssertionError"):
        ort_flavour.preprocess(models.cnn((4,)), [])
