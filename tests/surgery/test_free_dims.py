"""free_dims: free fixed dims under a name; a graph that bakes the old size in fails, naming the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from deploykit.errors import ConfigError, ModelError
from tests.surgery.models import apply, dims, feeds_for, make, ort_run

F = TensorProto.FLOAT


def batch_agnostic():
    inits = {"w": np.arange(12, dtype=np.float32).reshape(4, 3)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    return make(nodes, [("x", F, [1, 4])], [("y", F, [1, 3])], inits)


def test_batch_name_frees_axis_0_and_outputs_follow():
    out, reports = apply(batch_agnostic(), {"free_dims": {"batch": "N"}})
    assert dims(out.graph.input[0]) == ["N", 4] and dims(out.graph.output[0]) == ["N", 3]
    feeds = feeds_for(out, batch=5)
    np.testing.assert_array_equal(
        ort_run(out, feeds)["y"], np.maximum(feeds["x"] @ np.arange(12, dtype=np.float32).reshape(4, 3), 0)
    )
    assert reports[0]["numerics"].startswith("outputs match")


def test_shorthand_gives_names_per_axis():
    out, _ = apply(batch_agnostic(), {"free_dims": {"x": ["N", 4]}})
    assert dims(out.graph.input[0]) == ["N", 4]


def test_graph_baking_the_size_in_fails_naming_the_node():
    inits = {"shape": np.array([1, 6])}
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="flatten_fixed"),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    model = make(nodes, [("x", F, [1, 2, 3])], [("y", F, [1, 6])], inits)
    with pytest.raises(ModelError, match="pass 'free_dims'.*flatten_fixed") as e:
        apply(model, {"free_dims": {"batch": "N"}})
    assert "re-export with dynamic axes" in e.value.hint


def test_changing_a_size_is_not_freeing():
    with pytest.raises(ConfigError, match="axis 1 is 4; free_dims keeps sizes as they are"):
        apply(batch_agnostic(), {"free_dims": {"x": ["N", 5]}})


def test_missing_input_is_a_config_error():
    with pytest.raises(ConfigError, match="no input 'y'; its inputs are: x"):
        apply(batch_agnostic(), {"free_dims": {"y": ["N", 3]}})
