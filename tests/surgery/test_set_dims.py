"""set_dims: pin dims by full shape or by name; every misuse is a config error (exit 2) naming the input."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from deploykit.errors import ConfigError
from tests.conftest import run_cli
from tests.surgery.models import apply, dims, feeds_for, legacy_detector, make, ort_run

F = TensorProto.FLOAT


def test_shorthand_pins_the_input_and_outputs_follow():
    model = legacy_detector()
    out, reports = apply(model, {"set_dims": {"images": [2, 3, 32, 32]}})
    assert dims(out.graph.input[0]) == [2, 3, 32, 32]
    assert dims(out.graph.output[0]) == [2, 10]
    assert reports[0]["details"]["symbols"] == {"batch": 2}
    assert reports[0]["numerics"].startswith("outputs match")


def test_a_named_dim_is_pinned_everywhere_and_the_check_uses_the_new_shape():
    nodes = [helper.make_node("Add", ["a", "b"], ["y"])]
    model = make(nodes, [("a", F, ["n", 4]), ("b", F, ["n", 4])], [("y", F, ["n", 4])])
    out, reports = apply(model, {"set_dims": {"dims": {"n": 3}}}, feeds=feeds_for(model, batch=1))
    assert [dims(v) for v in [*out.graph.input, *out.graph.output]] == [[3, 4]] * 3
    assert reports[0]["numerics"].startswith("outputs match")  # fed batch 1, checked at the pinned 3
    feeds = feeds_for(out)
    np.testing.assert_array_equal(ort_run(out, feeds)["y"], feeds["a"] + feeds["b"])


def test_unchanged_when_already_pinned():
    model = make([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1, 2])], [("y", F, [1, 2])])
    _, reports = apply(model, {"set_dims": {"x": [1, 2]}})
    assert reports[0]["modified"] is False


@pytest.mark.parametrize(
    "params, message",
    [
        ({"image": [1, 3, 32, 32]}, "no input 'image'; its inputs are: images"),
        ({"images": [1, 3, 32]}, "input 'images' has rank 4 [batch, 3, 32, 32], but 3 dims were given"),
        ({"images": [1, 4, 32, 32]}, "axis 1 is fixed to 3 in the model"),
        ({"images": [0, 3, 32, 32]}, "neither a size >= 1 nor a dim name"),
        ({"dims": {"height": 2}}, "no input has a dim named 'height'"),
        ({"shapes": {"images": [1, 3, 32, 32]}, "dimz": {}}, "unknown key 'dimz' (did you mean 'dims'?)"),
    ],
)
def test_bad_parameters_are_config_errors(params, message):
    with pytest.raises(ConfigError, match="pass 'set_dims'" if "unknown" not in message else "set_dims") as e:
        apply(legacy_detector(), {"set_dims": params})
    assert message in str(e.value)


def test_wrong_param_type_names_the_field():
    with pytest.raises(ConfigError, match=r"surgery.set_dims.dims.batch: expected an integer, got 'one'"):
        apply(legacy_detector(), {"set_dims": {"dims": {"batch": "one"}}})


def test_cli_bad_set_dims_exits_2(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(legacy_detector(), path)
    code, _, err = run_cli(
        "surgery", str(path), "--pass", 'set_dims={"image": [1, 3, 32, 32]}', "-w", str(tmp_path / "s")
    )
    assert code == 2, err
    assert "pass 'set_dims'" in err and "no input 'image'" in err
    code, _, err = run_cli(
        "surgery",
        str(path),
        "--pass",
        'set_dims={"images": [1, 3, 32, 32]}',
        "-o",
        str(tmp_path / "out.onnx"),
        "-w",
        str(tmp_path / "s"),
    )
    assert code == 0, err
    assert dims(onnx.load(tmp_path / "out.onnx").graph.input[0]) == [1, 3, 32, 32]
