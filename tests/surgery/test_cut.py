"""cut: outputs at inner tensors, the tail dropped; a missing tensor is a config error with close matches."""

import numpy as np
import onnx
import pytest

from deploykit.errors import ConfigError
from tests.conftest import run_cli
from tests.surgery.models import apply, dims, feeds_for, legacy_detector, ops, ort_run


def test_cut_at_inner_tensor_drops_the_tail_and_matches_the_tensor():
    model = legacy_detector(weights_as="initializer")
    out, reports = apply(model, {"cut": {"outputs": ["relu_38", "fc_48"]}})
    assert [o.name for o in out.graph.output] == ["relu_38", "fc_48"]
    assert "MatMul" not in ops(out) and "Transpose" not in ops(out)
    assert len(dims(out.graph.output[1])) == 2  # a computed Reshape hides the dims from inference: rank by running
    assert reports[0]["numerics"] == "outputs match (2 compared)"  # against the inner tensors of the full graph
    feeds = feeds_for(model)
    from deploykit.surgery import ortcheck

    full = ortcheck.run(model, feeds, ["fc_48"])
    np.testing.assert_array_equal(ort_run(out, feeds)["fc_48"], full["fc_48"])


def test_after_sanitize_the_new_output_has_its_full_shape():
    out, _ = apply(legacy_detector(), "sanitize", {"cut": {"outputs": ["fc_48"]}})
    assert dims(out.graph.output[0]) == ["batch", 64]


def test_keep_outputs_adds():
    out, _ = apply(legacy_detector(weights_as="initializer"), {"cut": {"outputs": ["fc_48"], "keep_outputs": True}})
    assert [o.name for o in out.graph.output] == ["logits", "fc_48"]


def test_shorthand_is_the_output_list():
    out, _ = apply(legacy_detector(weights_as="initializer"), {"cut": ["fc_48"]})
    assert [o.name for o in out.graph.output] == ["fc_48"]


def test_missing_tensor_names_close_matches():
    with pytest.raises(ConfigError, match=r"pass 'cut': the graph has no tensor 'fc_4'; did you mean 'fc_48'"):
        apply(legacy_detector(weights_as="initializer"), {"cut": {"outputs": ["fc_4"]}})


def test_cli_cut_at_missing_tensor_exits_2(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(legacy_detector(), path)
    code, _, err = run_cli(
        "surgery",
        str(path),
        "--pass",
        "sanitize",
        "--pass",
        'cut={"outputs": ["boxes_raw"]}',
        "-w",
        str(tmp_path / "s"),
    )
    assert code == 2 and "no tensor 'boxes_raw'" in err
