"""remove_noops: each rule, the pairs, and the cases that must stay."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from tests.surgery.models import apply, const_node, feeds_for, make, ops, ort_run

F = TensorProto.FLOAT


def chain(*nodes, shape=(2, 3), out_shape=None, opset=17, inits=()):
    """x -> nodes ... -> Relu -> y, so a removed no-op's output is an inner tensor."""
    nodes = [*nodes, helper.make_node("Relu", [nodes[-1].output[0] if nodes else "x"], ["y"], name="relu")]
    return make(nodes, [("x", F, list(shape))], [("y", F, list(out_shape or shape))], inits, opset=opset)


def check(model, expected_ops, **kw):
    out, reports = apply(model, "remove_noops", **kw)
    assert ops(out) == expected_ops, reports[0]
    feeds = feeds_for(model)
    np.testing.assert_array_equal(ort_run(out, feeds)["y"], ort_run(model, feeds)["y"])
    return out, reports[0]


@pytest.mark.parametrize(
    "node",
    [
        helper.make_node("Identity", ["x"], ["a"]),
        helper.make_node("Cast", ["x"], ["a"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["x"], ["a"], perm=[0, 1]),
        helper.make_node("Concat", ["x"], ["a"], axis=0),
        helper.make_node("Max", ["x"], ["a"]),
    ],
)
def test_single_noops_go(node):
    check(chain(node), ["Relu"])


def test_dropout_goes_in_inference_and_stays_in_training():
    check(chain(helper.make_node("Dropout", ["x"], ["a"], ratio=0.3), opset=11), ["Relu"])
    off = helper.make_tensor("off", TensorProto.BOOL, [], [False])
    on = helper.make_tensor("on", TensorProto.BOOL, [], [True])
    model = chain(helper.make_node("Dropout", ["x", "", "off"], ["a"]), opset=13)
    model.graph.initializer.append(off)
    check(model, ["Relu"])
    training = chain(helper.make_node("Dropout", ["x", "", "on"], ["a"]), opset=13)
    training.graph.initializer.append(on)
    _, reports = apply(training, "remove_noops")
    assert reports[0]["modified"] is False


def test_dropout_whose_mask_is_read_stays():
    nodes = [helper.make_node("Dropout", ["x"], ["a", "mask"]), helper.make_node("Relu", ["a"], ["y"])]
    model = make(nodes, [("x", F, [2])], [("y", F, [2]), ("mask", TensorProto.BOOL, [2])], opset=11)
    _, reports = apply(model, "remove_noops")
    assert reports[0]["modified"] is False


def test_reshape_expand_pad_slice_tile_to_the_same_shape_go():
    inits = {
        "shape": np.array([2, 3]),
        "pads": np.zeros(4, np.int64),
        "starts": np.array([0, 0]),
        "ends": np.array([2, 2**62]),
        "reps": np.array([1, 1]),
    }
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["a"]),
        helper.make_node("Expand", ["a", "shape"], ["b"]),
        helper.make_node("Pad", ["b", "pads"], ["c"]),
        helper.make_node("Slice", ["c", "starts", "ends"], ["d"]),
        helper.make_node("Tile", ["d", "reps"], ["e"]),
    ]
    _, report = check(chain(*nodes, inits=inits), ["Relu"])
    assert report["nodes_removed"] == 5


def test_reshape_and_slice_that_change_shape_stay():
    inits = {"shape": np.array([3, 2]), "starts": np.array([1]), "ends": np.array([3]), "axes": np.array([1])}
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["a"]),
        helper.make_node("Slice", ["a", "starts", "ends", "axes"], ["b"]),
    ]
    check(chain(*nodes, inits=inits, out_shape=(3, 1)), ["Reshape", "Slice", "Relu"])


def test_neutral_arithmetic_goes_unless_it_broadcasts():
    inits = {
        "one": np.ones(3, np.float32),
        "zero": np.zeros((1,), np.float32),
        "big_one": np.ones((4, 2, 3), np.float32),
    }
    nodes = [helper.make_node("Mul", ["x", "one"], ["a"]), helper.make_node("Add", ["zero", "a"], ["b"])]
    check(chain(*nodes, inits=inits), ["Relu"])
    broadcasting = chain(helper.make_node("Mul", ["x", "big_one"], ["a"]), inits=inits, out_shape=(4, 2, 3))
    check(broadcasting, ["Mul", "Relu"])


def test_transpose_pairs_cancel_or_merge():
    cancel = [
        helper.make_node("Transpose", ["x"], ["a"], perm=[1, 2, 0]),
        helper.make_node("Transpose", ["a"], ["b"], perm=[2, 0, 1]),
    ]
    _, report = check(chain(*cancel, shape=(2, 3, 4)), ["Relu"])
    assert report["details"]["removed"]["Transpose pair"] == 1
    merge = [
        helper.make_node("Transpose", ["x"], ["a"], perm=[1, 0, 2]),
        helper.make_node("Transpose", ["a"], ["b"], perm=[0, 2, 1]),
    ]
    out, _ = check(chain(*merge, shape=(2, 3, 4), out_shape=(3, 4, 2)), ["Transpose", "Relu"])
    assert list(out.graph.node[0].attribute[0].ints) == [1, 2, 0]


def test_reshape_pair_and_unsqueeze_squeeze_pair():
    inits = {"s1": np.array([6]), "s2": np.array([3, 2]), "axes": np.array([0, 2])}
    reshapes = [helper.make_node("Reshape", ["x", "s1"], ["a"]), helper.make_node("Reshape", ["a", "s2"], ["b"])]
    check(chain(*reshapes, inits=inits, out_shape=(3, 2)), ["Reshape", "Relu"])
    pair = [helper.make_node("Unsqueeze", ["x", "axes"], ["a"]), helper.make_node("Squeeze", ["a", "axes"], ["b"])]
    check(chain(*pair, inits=inits), ["Relu"])


def test_noop_between_graph_input_and_output_stays():
    model = make([helper.make_node("Identity", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    _, reports = apply(model, "remove_noops")
    assert reports[0]["modified"] is False and "connect a graph input to an output" in reports[0]["reason"]


def test_noop_before_graph_output_renames_its_producer():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Identity", ["r"], ["y"]),
        helper.make_node("Neg", ["r"], ["z"]),
    ]
    model = make(nodes, [("x", F, [2])], [("y", F, [2]), ("z", F, [2])])
    out, _ = apply(model, "remove_noops")
    assert ops(out) == ["Relu", "Neg"] and list(out.graph.node[0].output) == ["y"]
    assert list(out.graph.node[1].input) == ["y"]
    feeds = feeds_for(model)
    for k, v in ort_run(model, feeds).items():
        np.testing.assert_array_equal(ort_run(out, feeds)[k], v)


def test_readers_inside_subgraphs_are_rewired():
    branch = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, [2])]
    )
    other = helper.make_graph(
        [helper.make_node("Relu", ["a"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [2])]
    )
    nodes = [
        const_node("cond", np.array(True)),
        helper.make_node("Identity", ["x"], ["a"]),
        helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=other),
    ]
    model = make(nodes, [("x", F, [2])], [("y", F, [2])])
    out, _ = apply(model, "remove_noops")
    assert "Identity" not in ops(out)
    feeds = feeds_for(model)
    np.testing.assert_array_equal(ort_run(out, feeds)["y"], -feeds["x"])
