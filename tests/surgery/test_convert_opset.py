"""convert_opset: ONNX's version converter, checked by the runner's numeric comparison."""

import numpy as np
import pytest

from deploykit.errors import ConfigError
from tests.surgery.models import apply, feeds_for, legacy_detector, ort_run


def test_opset11_to_17():
    model = legacy_detector(opset=11, weights_as="initializer")
    out, reports = apply(model, "sanitize", {"convert_opset": 17})
    assert next(o.version for o in out.opset_import if o.domain == "") == 17
    assert out.ir_version >= 8
    assert reports[1]["details"] == {"from": 11, "to": 17} and reports[1]["numerics"].startswith("outputs match")
    feeds = feeds_for(model, batch=3)
    np.testing.assert_allclose(ort_run(out, feeds)["logits"], ort_run(model, feeds)["logits"], rtol=1e-6, atol=1e-6)


def test_same_opset_is_not_a_change():
    _, reports = apply(legacy_detector(opset=12), {"convert_opset": {"opset": 12}})
    assert reports[0]["modified"] is False and "already uses opset 12" in reports[0]["reason"]


def test_unknown_opset_is_a_config_error():
    with pytest.raises(ConfigError, match="opset 99 is outside"):
        apply(legacy_detector(), {"convert_opset": 99})
