"""The one session factory: a graph as written (FP16 emulated), and as ONNX Runtime computes it (FP8-safe)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploykit.graph.emulate import FP8_UNSAFE_OPTIMIZERS, emulate_fp16, has_float8, ort_disabled_optimizers
from deploykit.graph.run import session_from_onnx
from tests.quant import models


def fp16_graph():
    """x(fp32) -> Cast fp16 -> Add 1.0 -> Mul 1000 -> Cast fp32: rounding and overflow are visible."""
    one = numpy_helper.from_array(np.array(1.0, np.float16), "one")
    big = numpy_helper.from_array(np.array(1000.0, np.float16), "big")
    nodes = [
        helper.make_node("Cast", ["x"], ["xh"], name="to16", to=TensorProto.FLOAT16),
        helper.make_node("Add", ["xh", "one"], ["a"], name="add"),
        helper.make_node("Mul", ["a", "big"], ["m"], name="mul"),
        helper.make_node("Cast", ["m"], ["y"], name="to32", to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [one, big],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_fp16_tensors_are_rounded_and_overflow_as_the_graph_says():
    x = np.array([[1e-4, 2.0, 100.0]], np.float32)
    y = session_from_onnx(fp16_graph()).infer({"x": x})["y"]
    assert y[0, 0] == 1000.0  # 1 + 1e-4 rounds to 1.0 in FP16 (FP32 would give 1000.1)
    assert y[0, 1] == 3000.0
    assert np.isinf(y[0, 2])  # 101 * 1000 overflows FP16: the emulation must not hide it


def test_emulation_matches_the_onnx_reference_evaluator_on_a_converted_cnn():
    from onnx.reference import ReferenceEvaluator

    from deploykit.quant.fp16 import to_fp16

    model = to_fp16(models.cnn((8, 8), size=8), [])
    x = models.images(1, size=8, seed=3)[0]
    ours = session_from_onnx(model).infer(x)
    ref = ReferenceEvaluator(model).run(None, x)[0]
    fp32 = session_from_onnx(models.cnn((8, 8), size=8)).infer(x)
    name = next(iter(ours))
    assert np.allclose(ours[name], ref, rtol=2e-3, atol=2e-3)
    assert not np.array_equal(ours[name], fp32[name])  # FP16 rounding happened


def test_emulated_graph_keeps_tensor_names_for_diagnosis():
    graph = emulate_fp16(fp16_graph())
    produced = {o for n in graph.graph.node for o in n.output}
    assert {"xh", "a", "m", "y"} <= produced
    assert all(i.data_type == TensorProto.FLOAT for i in graph.graph.initializer)
    session = session_from_onnx(fp16_graph(), expose=("a",))
    assert session.run_all({"x": np.ones((1, 3), np.float32)})["a"].tolist() == [[2.0, 2.0, 2.0]]


def test_fp16_inputs_and_outputs_keep_their_declared_type():
    node = helper.make_node("Add", ["x", "x"], ["y"], name="add")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2])],
    )
    session = session_from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    out = session.infer({"x": np.array([1.5, 40000.0], np.float16)})["y"]
    assert out.dtype == np.float16 and out[0] == 3.0 and np.isinf(out[1])
    assert [i.dtype for i in session.inputs] == ["float16"]


def fp8_relu_graph():
    """x -> Relu -> QuantizeLinear(FP8 E4M3, symmetric) -> DequantizeLinear -> y."""
    scale = numpy_helper.from_array(np.array(0.01, np.float32), "s")
    zp = helper.make_tensor("zp", TensorProto.FLOAT8E4M3FN, [], [0])
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "s", "zp"], ["q"], name="q"),
        helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [scale, zp],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_fp8_graphs_disable_relu_quant_rewrite_and_match_the_graph():
    model = fp8_relu_graph()
    assert has_float8(model) and ort_disabled_optimizers(model) == FP8_UNSAFE_OPTIMIZERS
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    written = session_from_onnx(model).infer({"x": x})["y"]
    assert written.min() >= 0  # the Relu is there
    for level in ("extended", "all"):
        computed = session_from_onnx(model, "onnxruntime", level=level).infer({"x": x})["y"]
        np.testing.assert_array_equal(computed, written)


def test_without_the_guard_onnx_runtime_drops_the_relu_in_front_of_fp8():
    """Canary for the measured ORT bug the guard exists for; skips once ORT no longer has it."""
    import onnxruntime as ort

    from deploykit.graph.run import session_options

    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    session = ort.InferenceSession(
        fp8_relu_graph().SerializeToString(), session_options("extended"), providers=["CPUExecutionProvider"]
    )
    y = session.run(None, {"x": x})[0]
    if y.min() >= 0:
        pytest.skip(f"onnxruntime {ort.__version__} no longer rewrites Relu -> FP8 QuantizeLinear")
    assert y.min() < 0


def test_int8_graphs_need_no_disabled_optimizer():
    assert ort_disabled_optimizers(models.cnn((4,))) == ()
    assert not has_float8(onnx.ModelProto())


def _relu_model(shape=(2, 3)):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", shape[1]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", shape[1]])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("evaluator", ["as_written", "onnxruntime"])
@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        ({"x": np.zeros((2, 3), np.float64)}, "input 'x' is float64, the model expects float32"),
        ({"x": np.zeros((2, 3, 1), np.float32)}, "input 'x' has shape [2, 3, 1], the model expects rank 2"),
        ({"x": np.zeros((2, 4), np.float32)}, "input 'x' axis 1 is 4, the model was built for 3"),
        ({"images": np.zeros((2, 3), np.float32)}, "feeds ['images'] do not match the model's inputs ['x']"),
    ],
)
def test_every_session_checks_feeds_and_names_the_tensor(evaluator, feeds, message):
    from deploykit.errors import DataError

    session = session_from_onnx(_relu_model(), evaluator)
    with pytest.raises(DataError) as info:
        session.infer(feeds)
    assert message in info.value.message
    with pytest.raises(DataError):
        session.timed_runner(feeds)


def test_graph_sessions_ignore_extra_feeds_and_engine_sessions_refuse_them(tmp_path):
    from deploykit.errors import DataError
    from deploykit.graph.run import session_from_engine

    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    graph = session_from_onnx(_relu_model())
    np.testing.assert_array_equal(graph.infer({"x": x, "other": x})["y"], np.maximum(x, 0))  # dynamic batch
    onnx.save(_relu_model(), tmp_path / "m.onnx")
    engine = session_from_engine(tmp_path / "m.onnx", "test")
    assert engine.inputs[0].shape == ("batch", 3) and engine.inputs[0].dtype == "float32"
    np.testing.assert_array_equal(engine.infer({"x": x})["y"], np.maximum(x, 0))
    with pytest.raises(DataError, match=r"do not match the engine's inputs \['x'\]"):
        engine.infer({"x": x, "other": x})


def test_a_refused_graph_is_a_session_error_with_what_onnx_runtime_said():
    from deploykit.graph.run import SessionError

    model = _relu_model()
    model.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(SessionError) as info:
        session_from_onnx(model, "onnxruntime", failure="cannot run it", hint="fix it")
    assert info.value.message.startswith("cannot run it: ") and info.value.hint == "fix it"
    assert "NoSuchOp" in info.value.detail and info.value.detail in info.value.message


@pytest.mark.parametrize("value, threads", [("", 0), ("0", 0), ("3", 3)])
def test_sessions_made_without_a_thread_count_take_the_environments(monkeypatch, value, threads):
    from deploykit.graph.run import THREADS_ENV, session_options

    monkeypatch.setenv(THREADS_ENV, value)
    assert session_options("basic").intra_op_num_threads == threads
    assert session_options("basic", 2).intra_op_num_threads == 2  # a count given wins


@pytest.mark.parametrize("value", ["many", "-1", "2000", "1.5"])
def test_a_bad_thread_count_in_the_environment_is_a_usage_error(monkeypatch, value):
    from deploykit.errors import UsageError
    from deploykit.graph.run import THREADS_ENV, session_options

    monkeypatch.setenv(THREADS_ENV, value)
    with pytest.raises(UsageError, match=THREADS_ENV):
        session_options("basic")


def test_sessions_that_alternate_with_python_work_do_not_spin():
    from deploykit.graph.run import session_options

    assert session_options("extended", spin=False).get_session_config_entry("session.intra_op.allow_spinning") == "0"
    default = session_options("extended")
    with pytest.raises(RuntimeError, match="allow_spinning"):  # not set: ONNX Runtime's default (spinning) applies
        default.get_session_config_entry("session.intra_op.allow_spinning")


def _float8_moved(op: str, opset: int):
    """x -> QuantizeLinear (FLOAT8E4M3FN) -> ``op`` -> DequantizeLinear: FP8 moved between Q and DQ, as
    ModelOpt writes it for TensorRT (a DPT-style readout slices its tokens, a Swin-style block squeezes)."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s"),
        helper.make_tensor("z", TensorProto.FLOAT8E4M3FN, [], [0.0]),
    ]
    inits += [
        numpy_helper.from_array(np.array(v, np.int64), n)
        for n, v in (("st", [1]), ("en", [5]), ("ax", [1]), ("sq", [0]))
    ]
    mid = (
        helper.make_node("Slice", ["q", "st", "en", "ax"], ["m"])
        if op == "Slice"
        else helper.make_node("Squeeze", ["q", "sq"], ["m"])
    )
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
        mid,
        helper.make_node("DequantizeLinear", ["m", "s", "z"], ["y"], name="dq"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize(("op", "opset"), [("Slice", 19), ("Squeeze", 21)])
def test_fp8_moved_between_q_and_dq_is_evaluated_as_written(op, opset):
    """ONNX Runtime has no float8 Slice and no Squeeze(21) for it; the evaluator moves those values as
    FP32 (exact) and the graph itself is unchanged."""
    import ml_dtypes

    model = _float8_moved(op, opset)
    before = model.SerializeToString()
    x = np.random.default_rng(0).standard_normal((1, 8, 4)).astype(np.float32)
    got = session_from_onnx(model, "as_written").infer({"x": x})["y"]
    values = (x / np.float32(0.05)).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) * np.float32(0.05)
    want = values[:, 1:5] if op == "Slice" else values[0]
    np.testing.assert_array_equal(got, want)
    assert model.SerializeToString() == before


def test_a_session_takes_an_in_memory_graph_whole_and_a_graph_marked_for_external_data_through_a_file(monkeypatch):
    """One serialization for an in-memory graph; a graph with a tensor marked for external data goes
    through a file, and computes the same."""
    from onnx.external_data_helper import set_external_data

    from deploykit.graph import files

    model = fp16_graph()
    assert files.proto_bytes(model) == model.SerializeToString()
    serialized = []
    real = onnx.ModelProto.SerializeToString
    size = onnx.ModelProto.ByteSize  # upb serializes the whole model to size it
    monkeypatch.setattr(onnx.ModelProto, "SerializeToString", lambda m, *a, **k: serialized.append("bytes") or real(m))
    monkeypatch.setattr(onnx.ModelProto, "ByteSize", lambda m: serialized.append("size") or size(m))
    session_from_onnx(model, "onnxruntime")
    assert serialized == ["bytes"]
    monkeypatch.undo()

    marked = onnx.ModelProto()
    marked.CopyFrom(model)
    set_external_data(marked.graph.initializer[0], location="weights.bin")
    assert files.proto_bytes(marked) is None
    through = []
    real_as_file = files.as_file
    monkeypatch.setattr(files, "as_file", lambda m: through.append(1) or real_as_file(m))
    x = np.array([[1e-4, 2.0, 100.0]], np.float32)
    expected = session_from_onnx(model, "onnxruntime").infer({"x": x})["y"]
    assert np.array_equal(session_from_onnx(marked, "onnxruntime").infer({"x": x})["y"], expected, equal_nan=True)
    assert through == [1]


def test_large_weights_reach_a_session_as_arrays_beside_the_graph_s_bytes(monkeypatch):
    """session_source leaves weights of APART_BYTES and more out of the bytes (external-data references)
    and hands them over as arrays; the session computes what it computes from the whole model's bytes."""
    from deploykit.graph import files

    rng = np.random.default_rng()
    w = rng.standard_normal((256, 256)).astype(np.float32)  # 256 KiB
    q = rng.integers(-127, 128, (256, 256), dtype=np.int8)  # 64 KiB, dequantized in the graph
    b = rng.standard_normal(256).astype(np.float32)  # 1 KiB: stays in the bytes
    nodes = [
        helper.make_node("DequantizeLinear", ["q", "qs"], ["qf"], name="dq"),
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm1"),
        helper.make_node("MatMul", ["h", "qf"], ["h2"], name="mm2"),
        helper.make_node("Add", ["h2", "b"], ["y"], name="add"),
    ]
    inits = [numpy_helper.from_array(v, n) for v, n in ((w, "w"), (q, "q"), (np.float32(0.01), "qs"), (b, "b"))]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 256])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    data, weights = files.session_source(model)
    assert sorted(weights) == ["q", "w"]
    assert np.array_equal(weights["w"], w) and np.array_equal(weights["q"], q)
    assert len(data) < 4096 < w.nbytes  # the weights are not in the bytes
    x = {"x": rng.standard_normal((2, 256)).astype(np.float32)}
    got = session_from_onnx(model, "onnxruntime", level="all").infer(x)["y"]
    monkeypatch.setattr(files, "APART_BYTES", 2**40)  # every weight in the bytes, as before
    assert files.session_source(model)[1] == {}
    assert np.array_equal(got, session_from_onnx(model, "onnxruntime", level="all").infer(x)["y"])
    assert np.allclose(got, x["x"] @ w @ (q.astype(np.float32) * 0.01) + b, rtol=1e-4, atol=1e-3)
