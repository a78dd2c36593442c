"""graph.declared: which declarations inference contradicts, and the repair."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from deploykit.graph import declared
from deploykit.graph.run import session_from_onnx
from tests.hostile import models


def _shape(vi: onnx.ValueInfoProto) -> list:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in vi.type.tensor_type.shape.dim]


@pytest.mark.parametrize("shape", [(), [1, 24], [1, 4, 5], [2, 4, 6]])
def test_a_contradicted_output_shape_is_replaced_by_the_inferred_one(shape):
    model = models.misdeclared(shape=shape)
    with pytest.raises(onnx.shape_inference.InferenceError):
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    fixed, found = declared.repair(model)
    assert [d.tensor for d in found] == ["y"] and _shape(fixed.graph.output[0]) == [1, 4, 6]
    onnx.shape_inference.infer_shapes(fixed, strict_mode=True)  # the passes' check now holds
    x = np.random.default_rng(1).random((1, 4, 8), np.float32)
    want = session_from_onnx(model, "onnxruntime", level="disabled").infer({"x": x})
    got = session_from_onnx(fixed, "onnxruntime", level="disabled").infer({"x": x})
    np.testing.assert_array_equal(next(iter(want.values())), next(iter(got.values())))


def test_declarations_that_agree_or_say_less_are_left_alone():
    for model in (
        models.misdeclared(shape=[1, 4, 6]),
        models.misdeclared(shape=None),
        models.misdeclared(shape=["b", 4, "c"]),
    ):
        fixed, found = declared.repair(model)
        assert found == [] and fixed is model


def test_a_declared_dim_name_survives_the_repair():
    model = models.misdeclared(shape=["n", 4, 5], batch="n")
    fixed, found = declared.repair(model)
    assert found and _shape(fixed.graph.output[0]) == ["n", 4, 6]


def test_a_wrong_type_and_a_stale_value_info_are_repaired():
    fixed, found = declared.repair(models.misdeclared(shape=[1, 4, 6], elem=TensorProto.INT64, stale_value_info=True))
    assert {(d.where, d.tensor) for d in found} == {("output", "y"), ("value_info", "m")}
    assert fixed.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert [vi.name for vi in fixed.graph.value_info] == []
