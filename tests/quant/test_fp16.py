"""FP16 never overflows silently: out-of-range nodes stay FP32, or the stage refuses naming them."""

import numpy as np
import pytest

from deploykit.config import QuantizeConfig
from deploykit.errors import ModelError
from deploykit.graph.run import session_from_onnx
from deploykit.quant.fp16 import overflow_nodes, to_fp16
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.ranges import RangeSettings, collect_ranges
from deploykit.quant.reader import SampleStream
from tests.quant import models


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))


def test_a_plain_fp16_conversion_breaks_the_batchnorm_model():
    """The hazard is real: BatchNorm variance 1e8 is inf in FP16 and the output is garbage."""
    model, x = models.batchnorm_overflow(), models.images(1)[0]
    ref = session_from_onnx(model).infer(x)["head_out"]
    naive = session_from_onnx(to_fp16(model, [])).infer(x)["head_out"]
    assert rel_l2(ref, naive) > 1.0


def test_overflow_nodes_names_weight_and_activation_offenders():
    model = models.batchnorm_overflow()
    ranges = collect_ranges(model, models.images(4), RangeSettings("max"))
    nodes = overflow_nodes(model, ranges, 16384.0)
    assert nodes["bn"].code == "fp16_weight_overflow" and "'bn.var' reaches 1e+08" in str(nodes["bn"])
    assert nodes["conv0"].code == "fp16_activation_overflow" and "'conv0_out'" in str(nodes["conv0"])  # ~2e4
    assert "head" not in nodes


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_out_of_range_nodes_stay_fp32_and_the_result_is_right(precision):
    data = models.images(8)
    result = quantize_model(
        Job(models.batchnorm_overflow(), QuantizeConfig(precision=precision), "tensorrt", SampleStream(data))
    )
    assert {"bn", "conv0"} <= set(result.fp32)
    assert result.check.passed and result.check.metrics["head_out"]["rel_l2"] < 0.02
    fp32_bn = [n for n in result.model.graph.node if n.name == "bn"][0]
    assert fp32_bn.op_type == "BatchNormalization"


def test_refuse_policy_names_the_nodes():
    with pytest.raises(ModelError, match=r"FP16 would overflow in 2 node\(s\): bn: weight 'bn.var'"):
        quantize_model(
            Job(
                models.batchnorm_overflow(),
                QuantizeConfig(precision="fp16", fp16_overflow="refuse"),
                "tensorrt",
                SampleStream(models.images(4)),
            )
        )


def test_activation_overflow_is_found_from_calibration_ranges():
    result = quantize_model(
        Job(models.activation_overflow(), QuantizeConfig(precision="int8"), "tensorrt", SampleStream(models.images(4)))
    )
    why = result.fp32["conv0"]
    assert why.code == "fp16_activation_overflow" and "'conv0_out'" in str(why)
    assert "relu" in result.fp32
    assert result.check.passed


def test_nan_inf_that_the_range_check_missed_is_caught_and_fixed(monkeypatch):
    """If the overflow analysis misses a node, the final check finds the first Inf and keeps that node FP32."""
    import deploykit.quant.fp16 as fp16

    monkeypatch.setattr(fp16, "overflow_nodes", lambda *a, **k: {})
    model = models.activation_overflow()
    assert not np.isfinite(session_from_onnx(to_fp16(model, [])).infer(models.images(1)[0])["head_out"]).all()
    result = quantize_model(Job(model, QuantizeConfig(precision="fp16"), "tensorrt", SampleStream(models.images(4))))
    assert result.fp32["conv0"].code == "fp16_nonfinite"
    assert result.check.passed and not result.check.nonfinite


def test_nan_inf_with_refuse_policy_is_an_error_naming_the_node(monkeypatch):
    import deploykit.quant.fp16 as fp16

    monkeypatch.setattr(fp16, "overflow_nodes", lambda *a, **k: {})
    with pytest.raises(ModelError, match="NaN/Inf in output.*first at node 'conv0'"):
        quantize_model(
            Job(
                models.activation_overflow(),
                QuantizeConfig(precision="fp16", fp16_overflow="refuse"),
                "tensorrt",
                SampleStream(models.images(4)),
            )
        )


def _value_info(name, dims):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def test_the_fp16_graph_declares_no_dim_name_its_source_did_not():
    """AutoCast writes the placeholder ``unk`` over the declared dims it re-derives and leaves it where
    inference cannot (a Reshape to a shape computed at run time): one name over dims of different
    sizes, which ONNX Runtime's memory planner reads as one size. Those dims become unknown; the
    source's own names stay."""
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Reshape", ["x", "shape"], ["r"]),
        helper.make_node("ReduceMean", ["r", "axis"], ["m"], keepdims=1),
        helper.make_node("Mul", ["r", "m"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [_value_info("x", ["N", 64])],
        [_value_info("y", ["N", 64])],
        [helper.make_tensor("axis", TensorProto.INT64, [1], [1])],
        value_info=[_value_info("r", [2, 64]), _value_info("m", [2, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    converted = to_fp16(model, [])
    declared = [v for v in (*converted.graph.value_info, *converted.graph.output)]
    names = {d.dim_param for v in declared for d in v.type.tensor_type.shape.dim if d.dim_param}
    assert names <= {"N"} and [d.dim_param for d in converted.graph.input[0].type.tensor_type.shape.dim] == ["N", ""]
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    got = session_from_onnx(converted, "onnxruntime", level="extended").infer({"x": x})["y"]
    np.testing.assert_allclose(got, x * x.mean(axis=1, keepdims=True), rtol=2e-3, atol=2e-3)


def test_forgetting_invented_dims_reaches_subgraphs_and_keeps_the_source_names():
    from onnx import TensorProto, helper

    from deploykit.quant.fp16 import forget_invented_dims

    branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["b"])], "branch", [], [_value_info("b", ["unk", "N"])]
    )
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
    graph = helper.make_graph(
        [node],
        "g",
        [_value_info("x", ["N", 4]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [_value_info("y", ["unk", 4])],
        value_info=[_value_info("t", ["unk", "unk__3", "N"])],
    )
    source = helper.make_model(helper.make_graph([], "s", [_value_info("x", ["N", 4])], []))
    assert forget_invented_dims(model := helper.make_model(graph), source) == 5
    dims = [
        [d.dim_param or d.dim_value or None for d in v.type.tensor_type.shape.dim]
        for v in (*model.graph.value_info, *model.graph.output, *model.graph.node[0].attribute[0].g.output)
    ]
    assert dims == [[None, None, "N"], [None, 4], [None, "N"]]


@pytest.mark.slow
def test_fp16_of_a_dynamo_exported_detr_style_detector_runs_in_onnx_runtime(tmp_path):
    """Issue 28 part 5: FP16 of a DETR-style detector's dynamo graph failed in ONNX Runtime at level
    extended (``Non-zero status code ... Mul node ... OutputMLValue``: ``Shape mismatch attempting to
    re-use buffer {1,1,8} != {1,8,8}``), because the conversion left 239 dims named ``unk``; converted
    through the whole pipeline, it now passes quantize and parity."""
    import shutil
    from pathlib import Path

    import deploykit

    shutil.copy(Path(__file__).with_name("detr_style.py"), tmp_path / "detr_style.py")
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text(
        "name: detr\nsource: {factory: 'detr_style:build'}\n"
        "inputs: [{name: images, shape: [N, 3, 128, 128], kind: image}]\n"
        "dims: {N: {min: 1, opt: 1, max: 2}}\noutputs: [logits, boxes]\nexport: {exporter: dynamo}\n"
        "quantize: {precision: fp16, target: onnxruntime}\nbuild: {optimization_level: extended}\n"
    )
    record = deploykit.convert(cfg, workdir=tmp_path / "store", until="parity").record
    assert record.exit_code == 0 and {c.group for c in record.checks} >= {"quantize", "parity"}
