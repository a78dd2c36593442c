"""The onnxruntime flavour: ORT's own QDQ (uint8 activations) with deploykit's ranges, checked as ORT computes."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from deploykit.config import QuantizeConfig
from deploykit.errors import ConfigError
from deploykit.quant import ort_flavour
from deploykit.quant.quantize import Job, quantize_model
from deploykit.quant.reader import SampleStream
from tests.quant import models


def quantize(model, samples=None, **cfg):
    return quantize_model(
        Job(
            model,
            QuantizeConfig(precision="int8", **cfg),
            "onnxruntime",
            SampleStream(samples or models.images(16)),
            reduce_range=ort_flavour.resolve_reduce_range("auto"),
        )
    )


@pytest.mark.parametrize(
    "features, machine, expected",
    [
        (["avx2", "fma"], "x86_64", True),  # AVX2 without VNNI: u8s8 saturates unless 7-bit weights
        (["avx2", "avx512_vnni"], "x86_64", False),
        (["avx2", "avx_vnni"], "x86_64", False),
        ([], "aarch64", False),
    ],
)
def test_reduce_range_follows_the_cpu(monkeypatch, features, machine, expected):
    import deploykit.store.environment as env

    monkeypatch.setattr(env, "cpu_info", lambda: {"features": features, "machine": machine, "model": "x", "cores": 1})
    assert ort_flavour.resolve_reduce_range("auto") is expected
    assert ort_flavour.resolve_reduce_range("on") is True and ort_flavour.resolve_reduce_range("off") is False


def test_activation_scales_and_zero_points_come_from_deploykit_ranges():
    result = quantize(models.cnn((8, 16)), method="entropy")
    inits = {i.name: numpy_helper.to_array(i) for i in result.model.graph.initializer}
    checked = 0
    for node in result.model.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in inits:
            continue
        r = result.ranges[node.input[0].removesuffix("_QuantizeLinear_Input")]
        lo, hi = min(r.lo, 0.0), max(r.hi, 0.0)
        assert inits[node.input[2]].dtype == np.uint8  # unsigned asymmetric activations
        assert float(inits[node.input[1]]) == pytest.approx((hi - lo) / 255, rel=1e-5)
        assert int(inits[node.input[2]]) == round(-lo / ((hi - lo) / 255))
        checked += 1
    assert checked >= 3
    assert "onnxruntime" in result.check.evaluator and "optimization level extended" in result.check.evaluator
    assert result.check.passed


def test_symbolic_shape_inference_failure_is_skipped_and_said():
    samples = [
        {
            "x": np.random.default_rng(i).standard_normal((2, 8)).astype(np.float32),
            "z": np.random.default_rng(i + 99).standard_normal((2, 8)).astype(np.float32),
        }
        for i in range(64)
    ]
    result = quantize(models.unmergeable_dims(), samples)
    assert any("symbolic shape inference failed" in n for n in result.notes)
    assert {n.op_type for n in result.model.graph.node} >= {"QuantizeLinear", "Add", "MatMul"}
    assert result.check.metrics["y"]["cosine"] > 0.98  # held-out samples a little outside the ranges


def test_fp8_is_refused_for_the_onnxruntime_target_and_auto_picks_tensorrt():
    with pytest.raises(ConfigError, match="fp8 with target onnxruntime.*QLinearConv"):
        quantize_model(
            Job(models.cnn((8,)), QuantizeConfig(precision="fp8"), "onnxruntime", SampleStream(models.images(2)))
        )
    assert QuantizeConfig(precision="fp8").flavour("onnxruntime") == "tensorrt"
    assert QuantizeConfig(precision="int8").flavour("onnxruntime") == "onnxruntime"
    assert QuantizeConfig(precision="int8").flavour("tensorrt") == "tensorrt"


def test_relus_fused_into_uint8_quantizers_are_exact():
    """ORT removes Relu in front of an asymmetric uint8 QuantizeLinear (its zero point clamps)."""
    result = quantize(models.cnn((8, 16)))
    assert not any(n.op_type == "Relu" for n in result.model.graph.node)
    assert any(i.data_type == TensorProto.UINT8 for i in result.model.graph.initializer)
    assert result.check.metrics["head_out"]["cosine"] > 0.999


def test_result_does_not_depend_on_modelopt_having_patched_onnxruntime_before():
    """ModelOpt patches onnxruntime.quantization process-wide; code that calls it without restoring
    (another module, a user's notebook) must not change what the onnxruntime flavour produces."""
    from modelopt.onnx.quantization.ort_patching import patch_ort_modules
    from onnxruntime.quantization import calibrate
    from onnxruntime.quantization.registry import QDQRegistry

    from deploykit.quant.modelopt_guard import ort_patch_guard

    before = quantize(models.cnn((8, 16))).model.SerializeToString()
    registry = dict(QDQRegistry)
    with ort_patch_guard():  # undo the deliberate patch below when the test ends
        patch_ort_modules()
        QDQRegistry.pop("Relu", None)
        assert calibrate.MinMaxCalibrater.compute_data.__module__.startswith("modelopt")
        assert quantize(models.cnn((8, 16))).model.SerializeToString() == before
    assert dict(QDQRegistry) == registry


def test_an_excluded_node_reads_float_tensors_while_its_neighbours_stay_quantized():
    """ORT's nodes_to_exclude alone leaves the Q/DQ pairs its quantized neighbours put on shared tensors
    feeding the excluded node; deploykit rewires it to the float tensors (as the tensorrt flavour)."""
    import onnx

    from deploykit.graph.proto import producers
    from deploykit.quant.prepare import quantized_node_names

    result = quantize(models.cnn((8, 16, 16)), exclude_nodes=("conv1",))
    model = result.model
    onnx.checker.check_model(model, full_check=True)
    made_by = producers(model)
    conv1 = next(n for n in model.graph.node if n.name == "conv1")
    assert all(made_by[i].op_type != "DequantizeLinear" for i in conv1.input if i in made_by)
    assert "conv1" not in quantized_node_names(model)
    assert {"conv0", "conv2", "head"} <= quantized_node_names(model)
    # conv1's output still reaches conv2 through a Q/DQ pair: the neighbour decides its own inputs
    conv2 = next(n for n in model.graph.node if n.name == "conv2")
    assert made_by[conv2.input[0]].op_type == "DequantizeLinear"
    # no Q/DQ is left that nothing reads, and no scale or zero point without a reader
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    assert all(
        o in read for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear") for o in n.output
    )
    assert {i.name for i in model.graph.initializer} <= read
    assert result.check.passed


def test_read_float_inputs_restores_a_relu_that_onnxruntime_fused_into_its_quantizer():
    """conv0 -> relu0 -> Q: ORT drops relu0 (uint8 clamps) and names conv0's output relu0, so conv1
    excluded must get a Relu back, or it would read conv0's negative outputs."""
    result = quantize(models.cnn((8, 16)))
    model, reference = result.model, result.reference
    assert not any(n.op_type == "Relu" for n in model.graph.node)
    dq_before = sum(n.op_type == "DequantizeLinear" for n in model.graph.node)
    assert ort_flavour.read_float_inputs(model, reference, ["no-such-node"]) == 0
    assert ort_flavour.read_float_inputs(model, reference, ["conv1"]) == 1  # the activation; weights stay
    relus = [n for n in model.graph.node if n.op_type == "Relu"]
    assert [(r.input[0], r.output[0]) for r in relus] == [("relu0", "relu0__float")]
    assert next(n for n in model.graph.node if n.name == "conv1").input[0] == "relu0__float"
    assert sum(n.op_type == "DequantizeLinear" for n in model.graph.node) == dq_before - 1

    from deploykit.graph.run import session_from_onnx

    x = models.images(1, seed=5)[0]
    fused = session_from_onnx(model, "onnxruntime").infer(x)["head_out"]
    exact = session_from_onnx(reference, "as_written").infer(x)["head_out"]
    assert np.linalg.norm(fused - exact) / np.linalg.norm(exact) < 0.1


def test_an_excluded_node_after_a_fused_clip_gets_the_clip_and_its_bounds_back():
    """Relu6-style Clip(0, 6) in front of a uint8 quantizer is fused away with its bound initializers."""
    import onnx

    model = models.cnn((8, 16))
    graph = model.graph
    relu0 = next(n for n in graph.node if n.name == "relu0")
    relu0.op_type, relu0.name = "Clip", "clip0"
    relu0.input.extend(["clip_lo", "clip_hi"])
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(0.0, np.float32), "clip_lo"),
            numpy_helper.from_array(np.array(0.5, np.float32), "clip_hi"),
        ]
    )
    onnx.checker.check_model(model)
    result = quantize(model, exclude_nodes=("conv1",))
    restored = [n for n in result.model.graph.node if n.op_type == "Clip"]
    assert [n.name for n in restored] == ["clip0__float"]
    assert {"clip_lo", "clip_hi"} <= {t.name for t in result.model.graph.initializer}
    onnx.checker.check_model(result.model, full_check=True)
    assert result.check.passed


@pytest.mark.parametrize(
    "make, data",
    [
        (models.classifier, lambda: models.images(24)),
        (models.encoder, lambda: models.tokens(24)),
        (lambda: models.depthwise(), lambda: models.images(24, size=32)),
    ],
)
def test_rescaling_the_qdq_graph_gives_what_the_quantizer_writes_for_those_ranges(make, data):
    """Method auto runs ORT's quantizer once and rewrites scales, zero points and int32 biases per
    range set: the result must be the graph the quantizer itself writes for that set, bit for bit."""
    from deploykit.quant import prepare as g
    from deploykit.quant.ranges import RangeSettings, calibrate

    samples = data()
    model = g.infer_shapes(ort_flavour.preprocess(g.prepare(make(), 13, "x")[0], []))
    g.name_nodes(model)
    sets = calibrate(model, samples, RangeSettings("auto"), ("max", "percentile")).sets
    assert sets["max"] != sets["percentile"]
    placed = ort_flavour.quantize(model, samples[0], sets["max"], exclude=[], per_channel=True, reduce_range=True)
    direct = ort_flavour.quantize(
        model, samples[0], sets["percentile"], exclude=[], per_channel=True, reduce_range=True
    )
    rescaled = ort_flavour.rescale(placed, model, sets["percentile"], placed_with=sets["max"])
    want = {i.name: numpy_helper.to_array(i) for i in direct.graph.initializer}
    got = {i.name: numpy_helper.to_array(i) for i in rescaled.graph.initializer}
    assert set(got) == set(want)
    assert all(got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]) for k in want)
    assert [n.SerializeToString() for n in rescaled.graph.node] == [n.SerializeToString() for n in direct.graph.node]
    changed = [
        k
        for k in want
        if not np.array_equal(want[k], numpy_helper.to_array(next(i for i in placed.graph.initializer if i.name == k)))
    ]
    assert any(k.endswith("_scale") for k in changed) and any(k.endswith("bias_quantized") for k in changed)


def test_a_quantizer_holding_another_tensors_parameters_takes_that_tensors_new_range():
    """ORT shares one scale along a MatMul -> Slice -> Reshape chain; rescaling each quantizer from
    its own tensor's range would write a graph the quantizer never writes (the planner example's
    scores went to rel-L2 0.41 that way). Each such quantizer takes the new range of the tensor whose
    parameters it held: the graph is the one the quantizer writes for that range set."""
    from deploykit.quant import prepare as g
    from deploykit.quant.ranges import RangeSettings, calibrate
    from deploykit.quant.scales import activation_quantizers

    samples = models.sliced_token_samples(12)
    model = g.infer_shapes(ort_flavour.preprocess(g.prepare(models.sliced_tokens(), 13, "x")[0], []))
    g.name_nodes(model)
    sets = calibrate(model, samples, RangeSettings("auto"), ("max", "percentile")).sets
    assert sets["max"]["s"].absmax < sets["max"]["h"].absmax / 2
    placed = ort_flavour.quantize(model, samples[0], sets["max"], exclude=[], per_channel=True, reduce_range=True)
    inits = {i.name: numpy_helper.to_array(i) for i in placed.graph.initializer}
    scale = {src: inits[q.input[1]] for q, src in activation_quantizers(placed)}
    assert scale["s"] == scale["r"] == scale["h"]  # the chain shares h's parameters
    from deploykit.quant.ranges import TensorRange

    narrower = {k: TensorRange(r.min, r.max, r.absmax * 0.6, "percentile") for k, r in sets["max"].items()}
    rescaled = ort_flavour.rescale(placed, model, narrower, placed_with=sets["max"])
    direct = ort_flavour.quantize(model, samples[0], narrower, exclude=[], per_channel=True, reduce_range=True)
    want = {i.name: numpy_helper.to_array(i) for i in direct.graph.initializer}
    got = {i.name: numpy_helper.to_array(i) for i in rescaled.graph.initializer}
    assert set(got) == set(want) and all(np.array_equal(got[k], want[k]) for k in want)
    shared = next(q for q, src in activation_quantizers(direct) if src == "s").input[1]
    assert not np.array_equal(want[shared], scale["s"])  # the shared scale did change with the range set
    mixed = dict(narrower, s=sets["max"]["s"])  # s's own range is not what its quantizer reads: no change
    again = ort_flavour.rescale(placed, model, mixed, placed_with=sets["max"])
    assert all(np.array_equal(numpy_helper.to_array(i), want[i.name]) for i in again.graph.initializer)


def test_quantizers_sharing_a_chains_initializers_take_the_owners_new_range():
    """ORT gives the outputs of MaxPool and Resize their input's scale and zero point initializers (named
    after the tensor that owns them), while each output's own range differs from its input's.
    Rescaled per range set, every quantizer on those initializers takes the owner's new range: the graph
    is the one the quantizer writes for that set, and the quantizer does not run again (on YOLOv8n it
    ran again for 3 of 4 range sets, and a Resize output's own range overwrote its input's scale)."""
    from deploykit.quant import prepare as g
    from deploykit.quant.ranges import RangeSettings, TensorRange, calibrate
    from deploykit.quant.scales import activation_quantizers

    samples = models.images(12)
    model = g.infer_shapes(ort_flavour.preprocess(g.prepare(models.pooled_concat(), 13, "x")[0], []))
    g.name_nodes(model)
    placed_with = calibrate(model, samples, RangeSettings("max"), ("max",)).sets["max"]
    placed = ort_flavour.quantize(model, samples[0], placed_with, exclude=[], per_channel=True, reduce_range=True)
    owner = {src: q.input[1].removesuffix("_scale") for q, src in activation_quantizers(placed)}
    assert {owner[t] for t in ("pooled", "up", "down")} == {"c1_out"}  # one owner
    rng = np.random.default_rng(1)  # every tensor its own narrower range: the chain's ranges all differ
    narrower = {
        k: TensorRange(r.min, r.max, r.absmax * float(rng.uniform(0.5, 0.9)), "percentile")
        for k, r in placed_with.items()
    }
    rescaled = ort_flavour.rescale(placed, model, narrower, placed_with=placed_with)
    assert rescaled is not None
    direct = ort_flavour.quantize(model, samples[0], narrower, exclude=[], per_channel=True, reduce_range=True)
    want = {i.name: numpy_helper.to_array(i) for i in direct.graph.initializer}
    got = {i.name: numpy_helper.to_array(i) for i in rescaled.graph.initializer}
    assert set(got) == set(want) and all(np.array_equal(got[k], want[k]) for k in want)
    assert not np.array_equal(
        want["c1_out_scale"],
        numpy_helper.to_array(next(i for i in placed.graph.initializer if i.name == "c1_out_scale")),
    )


def test_orts_own_calibration_does_not_run(monkeypatch):
    """deploykit's ranges are the calibration: ORT builds no augmented graph and runs no sample."""
    calls = []
    import onnxruntime

    real = onnxruntime.InferenceSession.__init__
    monkeypatch.setattr(
        onnxruntime.InferenceSession, "__init__", lambda self, *a, **k: calls.append(1) or real(self, *a, **k)
    )
    from deploykit.quant import prepare as g
    from deploykit.quant.ranges import RangeSettings, collect_ranges

    model = g.prepare(models.cnn((8, 16)), 13, "x")[0]
    ranges = collect_ranges(model, models.images(4), RangeSettings("max"))
    calls.clear()
    out = ort_flavour.quantize(model, models.images(1)[0], ranges, exclude=[], per_channel=True, reduce_range=False)
    assert calls == [] and any(n.op_type == "QuantizeLinear" for n in out.graph.node)


QUICKER_MODELS = pytest.mark.parametrize(
    "make, data",
    [
        (lambda: models.encoder(), lambda: models.tokens(4)),
        (lambda: models.mobile_detector(size=32), lambda: models.images(4, size=32)),
    ],
    ids=["encoder", "mobile_detector"],
)


@QUICKER_MODELS
@pytest.mark.parametrize("reduce_range", [False, True], ids=["8bit", "7bit"])
def test_the_quicker_quantizer_helpers_write_the_graph_orts_own_write(monkeypatch, make, data, reduce_range):
    """The private quantizer's faster helpers (:mod:`deploykit.quant.ort_quicker`) change its speed only:
    the placed graph is byte for byte the one ORT's own helpers place, and per-channel weights no longer
    go through ORT's per-channel loop."""
    from deploykit.quant import prepare as g
    from deploykit.quant.ranges import RangeSettings, collect_ranges

    model = g.prepare(make(), 13, "x")[0]
    samples = data()
    ranges = collect_ranges(model, samples, RangeSettings("max"))
    calls = []

    written = []  # the models saved for the quantizer to read: none where the quicker loader reads from memory
    save = onnx.save_model

    def placed() -> bytes:
        ort_flavour.private_ort_quantization.cache_clear()  # a fresh private import, patched or not
        qdq = ort_flavour.private_ort_quantization().qdq_quantizer
        real = qdq.compute_data_quant_params
        calls.clear()
        written.clear()
        with monkeypatch.context() as m:
            m.setattr(qdq, "compute_data_quant_params", lambda *a, **k: calls.append(1) or real(*a, **k))
            m.setattr(
                onnx, "save_model", lambda model, path, **k: written.append(Path(path).name) or save(model, path, **k)
            )
            out = ort_flavour.quantize(
                model, samples[0], ranges, exclude=[], per_channel=True, reduce_range=reduce_range
            )
        return out.SerializeToString()

    quick = placed()
    quick_calls = len(calls)
    assert "in.onnx" not in written
    with monkeypatch.context() as m:
        m.setattr(ort_flavour, "_quicker", lambda package: None)
        own = placed()
    own_calls = len(calls)
    assert "in.onnx" in written  # ORT's own loader reads the file
    ort_flavour.private_ort_quantization.cache_clear()
    assert quick == own
    assert quick_calls < own_calls  # ORT's loop computes a weight's parameters once per channel


@QUICKER_MODELS
def test_preprocessing_in_memory_writes_what_orts_own_function_writes(make, data):
    """:func:`ort_flavour.preprocess` runs quant_pre_process's steps in memory: the same bytes as ORT's
    function on files."""
    from deploykit.quant import prepare as g

    model = g.prepare(make(), 13, "x")[0]
    notes_by_file, notes_in_memory = [], []
    by_file = ort_flavour._preprocess_by_file(model, notes_by_file)
    in_memory = ort_flavour.preprocess(model, notes_in_memory)
    assert in_memory.SerializeToString() == by_file.SerializeToString()
    assert notes_by_file == notes_in_memory == []


def test_a_packed_detector_output_keeps_its_scores(monkeypatch):
    """Box pixels and class scores joined in one tensor: one INT8 scale for it rounds every score to a
    few levels (recall 0.0 on a real YOLOv8n). The Concat stays float; each input keeps its own scale."""
    import onnxruntime as ort

    from deploykit.quant import exclusions

    model, calib, fresh = models.packed_detector(), models.images(16), models.images(4, seed=7)
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    def score_error(quantized):
        session = ort.InferenceSession(quantized.SerializeToString(), providers=["CPUExecutionProvider"])
        return max(
            float(np.abs(session.run(None, s)[0][:, 4:] - reference.run(None, s)[0][:, 4:]).max()) for s in fresh
        )

    result = quantize(model, calib)
    assert result.excluded["pack"].code == "mixed_ranges"
    assert score_error(result.model) < 0.05  # a 1/255 step of [0, 1], with rounding through the convs
    monkeypatch.setattr(exclusions, "MIXED_RANGE_RATIO", float("inf"))  # an inner join, out of the tail rule
    monkeypatch.setattr(exclusions, "output_tail", lambda m: {})
    assert score_error(quantize(model, calib).model) > 0.5  # the scores share the pixels' scale


def test_the_output_tail_after_the_last_compute_op_stays_float(monkeypatch):
    """Q/DQ after the last Conv/MatMul buys no speed and rounds the outputs themselves."""
    from deploykit.quant import exclusions

    def writer(model):
        return {o: n for n in model.graph.node for o in n.output}[model.graph.output[0].name].op_type

    model = models.cnn((8, 16), head="sigmoid")
    result = quantize(model)
    assert result.excluded["sigmoid"].code == "output_tail"
    assert "relu0" not in result.excluded and "head" not in result.excluded  # the convs stay INT8
    assert writer(result.model) == "Sigmoid"  # the output is the float Sigmoid's, not a DequantizeLinear's
    monkeypatch.setattr(exclusions, "output_tail", lambda m: {})
    assert writer(quantize(model).model) == "DequantizeLinear"
