"""The ONNX-function path: a plugin node with its model-local body, run by ONNX Runtime on the CPU."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploykit.errors import ModelError
from deploykit.plugins.onnx_functions import attach_bodies, function_body, plugin_nodes
from tests.plugins.conftest import (
    BEV_CASES,
    BEV_NAMES,
    PILLAR_CASES,
    PILLAR_NAMES,
    bev_pool_reference,
    make_bev_inputs,
    make_pillar_inputs,
    pillar_scatter_reference,
    plugin_model,
    run_onnx,
)


@pytest.mark.parametrize("messy", [False, True], ids=["clean", "messy"])
@pytest.mark.parametrize("case", BEV_CASES.values(), ids=BEV_CASES.keys())
def test_bev_pool_function_matches_reference(case, messy):
    *sizes, bev_shape = case
    inputs = make_bev_inputs(np.random.default_rng(0), *sizes, bev_shape, keep=0.8, messy=messy)
    model = plugin_model("BEVPoolV2", {"bev_shape": list(bev_shape)})
    onnx.checker.check_model(model, full_check=True)
    got = run_onnx(model, dict(zip(BEV_NAMES, inputs, strict=True)))
    np.testing.assert_allclose(got, bev_pool_reference(*inputs, bev_shape), rtol=1e-5, atol=1e-5)


def test_bev_pool_function_without_points_or_intervals_is_zero():
    model = plugin_model("BEVPoolV2", {"bev_shape": [1, 3, 3]})
    depth, feat = np.ones((1, 2, 3, 2, 2), np.float32), np.ones((1, 2, 2, 2, 4), np.float32)
    empty, zeros = np.zeros(0, np.int32), np.zeros(2, np.int32)
    for starts in (empty, zeros):
        got = run_onnx(model, dict(zip(BEV_NAMES, (depth, feat, empty, empty, empty, starts, starts), strict=True)))
        assert got.shape == (1, 1, 3, 3, 4) and not got.any()


def test_one_body_serves_nodes_with_different_attributes():
    """The body reads bev_shape through an attribute reference: two grids, one function."""
    model = plugin_model("BEVPoolV2", {"bev_shape": [1, 3, 3]}, bodies=False)
    second = onnx.NodeProto()
    second.CopyFrom(model.graph.node[0])
    second.name, second.output[0] = "plugin2", "out2"
    second.attribute[0].CopyFrom(helper.make_attribute("bev_shape", [1, 4, 2]))
    model.graph.node.append(second)
    model.graph.output.append(helper.make_tensor_value_info("out2", TensorProto.FLOAT, None))
    model, added = attach_bodies(model)
    assert added == ["BEVPoolV2"] and len(model.functions) == 1
    inputs = make_bev_inputs(np.random.default_rng(1), 1, 2, 3, 2, 2, 4, (1, 2, 4))
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got, got2 = session.run(None, dict(zip(BEV_NAMES, inputs, strict=True)))
    assert got.shape == (1, 1, 3, 3, 4) and got2.shape == (1, 1, 4, 2, 4)
    np.testing.assert_allclose(got2, bev_pool_reference(*inputs, (1, 4, 2)), rtol=1e-5, atol=1e-5)


def test_float16_node_runs_on_the_cpu_provider():
    """ORT's CPU provider has no float16 ScatterND(add): the body sums in float32 and casts back."""
    inputs = make_bev_inputs(np.random.default_rng(2), 1, 2, 8, 4, 6, 16, (1, 8, 8))
    model = plugin_model("BEVPoolV2", {"bev_shape": [1, 8, 8]}, float_type=TensorProto.FLOAT16)
    half = (inputs[0].astype(np.float16), inputs[1].astype(np.float16), *inputs[2:])
    got = run_onnx(model, dict(zip(BEV_NAMES, half, strict=True)))
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), bev_pool_reference(*half, (1, 8, 8)), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(
    ("index", "value", "node", "reported"),
    [
        (2, 24, "gather_ranks_depth", "idx=24"),
        (2, -1, "gather_ranks_depth", "idx=-25"),  # a negative index is moved out of range, not wrapped
        (3, 8, "gather_ranks_feat", "idx=8"),
        (4, 18, "scatter_ranks_bev", "indice = 18"),
    ],
)
def test_bev_pool_function_fails_on_ranks_out_of_range(index, value, node, reported):
    inputs = list(make_bev_inputs(np.random.default_rng(3), 1, 2, 3, 2, 2, 4, (2, 3, 3), keep=1.0))
    inputs[index][0] = value  # the first point starts the first interval, so every rank of it is read
    with pytest.raises(Exception, match=rf"{node}.*{reported}"):
        run_onnx(plugin_model("BEVPoolV2", {"bev_shape": [2, 3, 3]}), dict(zip(BEV_NAMES, inputs, strict=True)))


@pytest.mark.parametrize("case", PILLAR_CASES.values(), ids=PILLAR_CASES.keys())
def test_pillar_scatter_function_matches_reference(case):
    b, p, c, grid, counts, duplicates = case
    inputs = make_pillar_inputs(np.random.default_rng(4), b, p, c, grid, counts, duplicates=duplicates)
    model = plugin_model("PillarScatter", {"grid": list(grid)})
    onnx.checker.check_model(model, full_check=True)
    got = run_onnx(model, dict(zip(PILLAR_NAMES, inputs, strict=True)))
    np.testing.assert_allclose(got, pillar_scatter_reference(*inputs, grid), rtol=1e-6, atol=1e-6)


def test_pillar_scatter_function_fails_on_a_live_pillar_off_the_grid():
    features, coords, counts = make_pillar_inputs(np.random.default_rng(5), 2, 8, 3, (10, 12), [8, 5])
    model = plugin_model("PillarScatter", {"grid": [10, 12]})
    coords[1, 6] = (0, 0, -3, 99)  # padding: ignored
    run_onnx(model, dict(zip(PILLAR_NAMES, (features, coords, counts), strict=True)))
    coords[1, 3, 2] = 10
    with pytest.raises(Exception, match=r"scatter_coords.*indice = 240"):  # one past the 2 x 10 x 12 canvas
        run_onnx(model, dict(zip(PILLAR_NAMES, (features, coords, counts), strict=True)))


def test_missing_required_attribute_is_named():
    model = plugin_model("BEVPoolV2", {}, bodies=False)
    with pytest.raises(
        ModelError,
        match=r"BEVPoolV2 node 'plugin': missing required attribute 'bev_shape' "
        r"\(3 positive ints: Z, Y, X\)",
    ):
        attach_bodies(model)
    with pytest.raises(ModelError, match=r"missing required attribute 'grid' \(2 positive ints: ny, nx\)"):
        attach_bodies(plugin_model("PillarScatter", {}, bodies=False))


@pytest.mark.parametrize("value", [[1, 8], [1, 0, 8]])
def test_malformed_attribute_is_named(value):
    with pytest.raises(
        ModelError,
        match=rf"attribute 'bev_shape' = \[{', '.join(map(str, value))}\] must be "
        r"3 positive ints",
    ):
        attach_bodies(plugin_model("BEVPoolV2", {"bev_shape": value}, bodies=False))


def test_static_shapes_and_dtypes_are_checked_when_known():
    """Ranks are usually initializers: a P that differs, or int64 ranks, is caught before anything runs."""
    model = plugin_model("BEVPoolV2", {"bev_shape": [1, 3, 3]}, bodies=False)
    model.graph.initializer.extend(
        [
            numpy_helper.from_array(np.zeros(10, np.int32), "ranks_depth"),
            numpy_helper.from_array(np.zeros(9, np.int32), "ranks_feat"),
        ]
    )
    with pytest.raises(ModelError, match=r"ranks_feat has P = 9 but ranks_depth has P = 10"):
        attach_bodies(model)
    del model.graph.initializer[1]
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(10, np.int64), "ranks_feat"))
    with pytest.raises(ModelError, match=r"input ranks_feat \('ranks_feat'\) is int64, must be int32"):
        attach_bodies(model)


def test_attach_bodies_is_idempotent_and_fixes_the_domain():
    model = plugin_model("PillarScatter", {"grid": [4, 4]}, bodies=False)
    model.graph.node[0].domain = ""  # a hand-made node: TensorRT ignores the domain, ORT needs one
    once, added = attach_bodies(model)
    assert added == ["PillarScatter"] and once.graph.node[0].domain == "deploykit"
    twice, added = attach_bodies(once)
    assert added == [] and len(twice.functions) == 1
    assert [n.name for n in plugin_nodes(twice.graph)] == ["plugin"]


def test_nodes_keep_what_tensorrt_reads():
    node = plugin_model("BEVPoolV2", {"bev_shape": [1, 2, 3]}).graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert (node.op_type, node.domain) == ("BEVPoolV2", "deploykit")
    assert attrs == {"bev_shape": [1, 2, 3], "plugin_version": b"1", "plugin_namespace": b"deploykit"}


def test_shape_inference_sees_through_the_body():
    model = plugin_model("PillarScatter", {"grid": [10, 12]})
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    dims = inferred.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims][2:] == [10, 12]


def test_bodies_use_only_standard_ops_of_the_model_opset():
    for op_type in ("BEVPoolV2", "PillarScatter"):
        body = function_body(op_type, 17)
        assert {n.domain for n in body.node} == {""}
        assert [(o.domain, o.version) for o in body.opset_import] == [("", 17)]
        assert "ScatterND" in {n.op_type for n in body.node}
