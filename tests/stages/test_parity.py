"""The parity stage on small ONNX models built in code: task metrics, inconclusive references,
validation data, bad input, and the per-layer diagnosis on failure."""

import json
import sys
import textwrap
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deploykit
from deploykit.config import ParityConfig, QuantizeConfig, parity_preset
from deploykit.errors import ConfigError, DataError, ParityFailed
from deploykit.metrics.comparison import Comparison
from tests.conftest import run_cli

CONFIG = """
name: m
source: {onnx: model.onnx}
inputs: [{name: x, shape: [batch, 8]}]
dims: {batch: {min: 1, opt: 2, max: 2}}
parity: {samples: 2, diagnose_top: 3}
gate: {warmup: 1, warmup_s: 0, iterations: 5, trials: 2, targets: {default: {fps: 1}}}
"""


def mlp(extra_nodes=(), extra_outputs=(), extra_inits=()):
    """x (batch, 8) -> MatMul -> h1 -> Relu -> h2 -> MatMul -> logits (batch, 10)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32), "w2"),
        *extra_inits,
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="fc1"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("MatMul", ["h2", "w2"], ["logits"], name="fc2"),
        *extra_nodes,
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10]), *extra_outputs]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def write(tmp_path, model, extra=""):
    onnx.save(model, tmp_path / "model.onnx")
    (tmp_path / "deploykit.yaml").write_text(CONFIG + textwrap.dedent(extra))
    return tmp_path / "deploykit.yaml"


def convert(cfg, tmp_path, **kw):
    return deploykit.convert(cfg, workdir=tmp_path / "store", until="parity", **kw)


def test_task_and_elementwise_parity_are_both_reported(tmp_path):
    cfg = write(tmp_path, mlp())
    cfg.write_text(
        cfg.read_text().replace(
            "parity: {samples: 2, diagnose_top: 3}",
            "parity: {samples: 2, tasks: {classification: [{output: logits, k: 3}]}}",
        )
    )
    report = convert(cfg, tmp_path).parity
    assert report["status"] == "pass" and report["passed"]
    assert report["outputs"]["logits"]["onnx"]["status"] == "pass"
    [task] = report["tasks"]
    assert task["label"] == "classification[0]" and task["reference"] == "onnx"
    assert (
        task["metrics"]["top1"] == 1.0 and task["metrics"]["rows"] == 6
    )  # 2 samples at batch 2 (opt), 2 at batch 1 (min)
    assert report["data"]["kind"] == "random" and "no validation data" in report["data"]["note"]


def zero_head():
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    node = helper.make_node("Mul", ["logits", "zero"], ["head"], name="zero_head")
    return mlp([node], [helper.make_tensor_value_info("head", TensorProto.FLOAT, ["batch", 10])], [zero])


def test_all_zero_reference_output_is_inconclusive_not_pass(tmp_path):
    cfg = write(tmp_path, zero_head())
    with pytest.raises(ParityFailed, match="parity inconclusive: head vs onnx: the reference output is all zeros") as e:
        convert(cfg, tmp_path)
    report = e.value.result.parity
    assert report["status"] == "inconclusive" and report["passed"] is False
    assert [(r["code"], r["subject"]) for r in report["inconclusive"]] == [("reference_zeros", "head vs onnx")]
    assert report["outputs"]["head"]["onnx"]["status"] == "inconclusive"
    assert report["outputs"]["head"]["onnx"]["inconclusive"]["code"] == "reference_zeros"
    assert report["outputs"]["logits"]["onnx"]["status"] == "pass"
    warned = convert(cfg, tmp_path, parity__inconclusive="warn").parity  # opted out: passes, still says so
    assert warned["passed"] and warned["status"] == "inconclusive"


def detector(score_scale):
    """boxes (batch, 5, 4) and scores (batch, 5) = sigmoid(...) * score_scale."""
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 20)).astype(np.float32), "wb"),
        numpy_helper.from_array(rng.standard_normal((8, 5)).astype(np.float32), "ws"),
        numpy_helper.from_array(np.array([-1, 5, 4], np.int64), "shape"),
        numpy_helper.from_array(np.array(score_scale, np.float32), "scale"),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "wb"], ["b0"]),
        helper.make_node("Abs", ["b0"], ["b1"]),
        helper.make_node("Reshape", ["b1", "shape"], ["boxes"]),
        helper.make_node("MatMul", ["x", "ws"], ["s0"]),
        helper.make_node("Sigmoid", ["s0"], ["s1"]),
        helper.make_node("Mul", ["s1", "scale"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "det",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["batch", 5, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 5]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


DETECTION = "parity: {samples: 2, tasks: {detection: [{boxes: boxes, scores: scores, box_format: xywh}]}}"


def test_detection_task_passes_on_an_identical_engine(tmp_path):
    cfg = write(tmp_path, detector(1.0))
    cfg.write_text(cfg.read_text().replace("parity: {samples: 2, diagnose_top: 3}", DETECTION))
    [task] = convert(cfg, tmp_path).parity["tasks"]
    assert task["status"] == "pass" and task["metrics"]["matched"] == 1.0 and task["metrics"]["reference_boxes"] > 0


def test_detection_with_no_box_above_threshold_is_inconclusive(tmp_path):
    cfg = write(tmp_path, detector(0.1))  # every score < 0.1 < score_threshold 0.3
    cfg.write_text(cfg.read_text().replace("parity: {samples: 2, diagnose_top: 3}", DETECTION))
    with pytest.raises(ParityFailed, match=r"detection\[0\] vs onnx: no reference box scores >= 0.3") as e:
        convert(cfg, tmp_path)
    [task] = e.value.result.parity["tasks"]
    assert task["status"] == "inconclusive" and task["inconclusive"]["code"] == "no_reference_boxes"


def test_task_on_an_output_of_the_wrong_shape_exits_4(tmp_path):
    cfg = write(tmp_path, mlp())
    cfg.write_text(
        cfg.read_text().replace(
            "parity: {samples: 2, diagnose_top: 3}", "parity: {tasks: {detection: [{boxes: logits, scores: logits}]}}"
        )
    )
    code, _, err = run_cli("parity", str(cfg), "-w", str(tmp_path / "store"))
    assert code == 4
    assert "parity.tasks.detection[0] expects boxes (..., N, 4); output 'logits' has shape [2, 10]" in err


def test_tolerance_for_an_output_the_model_lacks_is_a_config_error(tmp_path):
    cfg = write(tmp_path, mlp())
    with pytest.raises(ConfigError, match="parity.outputs names 'logit', which the model does not have"):
        convert(cfg, tmp_path, parity__outputs={"logit": {"max_abs": 1.0}})


def test_validation_data_replaces_random_inputs(tmp_path):
    cfg = write(tmp_path, mlp(), "validation: {files: val.npz, samples: 3}\n")
    np.savez(tmp_path / "val.npz", x=np.ones((2, 8), np.float32))
    with pytest.warns(UserWarning, match="1 samples available, 3 requested"):
        report = convert(cfg, tmp_path).parity
    assert report["data"]["kind"] == "validation" and report["data"]["samples"] == 1  # one file, one sample
    assert "validation data (files val.npz)" in report["data"]["note"]


@pytest.mark.parametrize(
    "array, message",
    [
        (np.ones((2, 7), np.float32), "input 'x' has shape [2, 7], the model expects ['batch', 8]"),
        (np.ones((2, 8), np.float64), "input 'x' has dtype float64, the model expects float32"),
        # [3, 8] would be a stack of 3 samples (3 is no batch the model takes); [1, 3, 8] is one sample of batch 3
        (np.ones((1, 3, 8), np.float32), "input 'x' axis 0 is 3, outside dim 'batch' range [1, 2]"),
    ],
)
def test_validation_data_that_does_not_match_the_inputs_exits_4(tmp_path, array, message):
    cfg = write(tmp_path, mlp(), "validation: {files: val.npy}\n")
    np.save(tmp_path / "val.npy", array)
    code, _, err = run_cli("parity", str(cfg), "-w", str(tmp_path / "store"))
    assert code == 4 and message in err


def test_precision_picks_the_tolerance_preset():
    ref = {"onnx": {"y": np.random.default_rng(0).standard_normal((4, 100)).astype(np.float32)}}
    got = {"y": ref["onnx"]["y"] * 1.01}
    for precision, passed in (("fp32", False), ("fp16", True), ("int8", True)):
        c = Comparison(ParityConfig(), parity_preset(QuantizeConfig(precision=precision)), precision)
        c.add(ref, got)
        assert c.report()["passed"] is passed, precision


# -- per-layer diagnosis ------------------------------------------------------------------------------

PLANT = '''
import onnx
from onnx import helper
from deploykit.surgery.base import Pass, PassResult


class PlantBadLayer(Pass):
    """Scales h1 (the first MatMul's output) by 1.05: a planted bad layer."""
    name = "plant_bad_layer"
    description = "test pass that breaks one layer"
    changes_numerics = True

    def run(self, model):
        model = onnx.ModelProto.FromString(model.SerializeToString())
        model.graph.initializer.append(helper.make_tensor("k", onnx.TensorProto.FLOAT, [], [1.05]))
        for node in model.graph.node:
            node.output[:] = ["h1_pre" if o == "h1" else o for o in node.output]
        model.graph.node.insert(1, helper.make_node("Mul", ["h1_pre", "k"], ["h1"], name="planted"))
        return PassResult(model, True)
'''


def compare_graphs(reference, candidate, feeds, top=10):
    """A minimal tensor-by-name comparison of two graphs (what deploykit.metrics.divergence is asked to do)."""
    import onnxruntime as ort

    def run_all(path):
        m = onnx.load(str(path))
        names = [o for n in m.graph.node for o in n.output]
        del m.graph.output[:]
        m.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in names)
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return dict(zip(names, s.run(names, feeds), strict=True))

    ref, cand = run_all(reference), run_all(candidate)
    rows = [
        {"name": n, "rel_l2": float(np.linalg.norm(cand[n] - r) / (np.linalg.norm(r) or 1))}
        for n, r in ref.items()
        if n in cand
    ]
    return {
        "first": [r for r in rows if r["rel_l2"] > 1e-3][:1],
        "tensors": rows,
        "threshold": 1e-3,
        "top": sorted(rows, key=lambda r: -r["rel_l2"])[:top],
    }


def test_failure_runs_the_per_layer_diagnosis_on_the_onnx_candidate(tmp_path, monkeypatch):
    cfg = write(tmp_path, mlp())
    (tmp_path / "plant.py").write_text(textwrap.dedent(PLANT))
    monkeypatch.syspath_prepend(str(tmp_path))
    calls = []

    def spy(reference, candidate, feeds, top=10):
        calls.append((reference, candidate, top))
        return compare_graphs(reference, candidate, feeds, top)

    monkeypatch.setitem(sys.modules, "deploykit.metrics.divergence", types.SimpleNamespace(compare_graphs=spy))
    with pytest.raises(ParityFailed, match="logits vs onnx"):
        convert(cfg, tmp_path, surgery__passes=["plant:PlantBadLayer"])
    [(reference, candidate, top)] = calls
    assert reference != candidate and top == 3
    store = tmp_path / "store"
    report = json.loads(next(store.rglob("parity.json")).read_text())
    d = report["diagnosis"]
    assert d["status"] == "ran" and "surgery/quantization" in d["candidate"]
    assert d["first"][0]["name"] == "h1"  # the planted layer, not the outputs downstream of it


def test_diagnosis_says_why_when_it_cannot_run(tmp_path, monkeypatch):
    cfg = write(tmp_path, mlp())
    (tmp_path / "plant.py").write_text(textwrap.dedent(PLANT))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "deploykit.metrics.divergence", None)  # import fails
    with pytest.raises(ParityFailed) as e:
        convert(cfg, tmp_path, surgery__passes=["plant:PlantBadLayer"])
    assert e.value.result.parity["diagnosis"]["status"] == "unavailable"


def test_diagnosis_can_be_switched_off(tmp_path, monkeypatch):
    cfg = write(tmp_path, mlp())
    (tmp_path / "plant.py").write_text(textwrap.dedent(PLANT))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ParityFailed) as e:
        convert(cfg, tmp_path, surgery__passes=["plant:PlantBadLayer"], parity__diagnose=False)
    assert "diagnosis" not in e.value.result.parity


def test_bad_validation_config_is_not_random_fallback(tmp_path):
    cfg = write(tmp_path, mlp(), "validation: {files: missing.npz}\n")
    with pytest.raises(DataError, match="validation folder not found"):
        convert(cfg, tmp_path)


def test_a_diagnosis_that_breaks_is_recorded_not_raised(tmp_path, monkeypatch):
    cfg = write(tmp_path, mlp())
    (tmp_path / "plant.py").write_text(textwrap.dedent(PLANT))
    monkeypatch.syspath_prepend(str(tmp_path))

    def broken(*args, **kwargs):
        raise RuntimeError("cannot expose intermediate tensors")

    monkeypatch.setitem(sys.modules, "deploykit.metrics.divergence", types.SimpleNamespace(compare_graphs=broken))
    with pytest.raises(ParityFailed, match="parity failed: logits vs onnx"):
        convert(cfg, tmp_path, surgery__passes=["plant:PlantBadLayer"])
    d = json.loads(next((tmp_path / "store").rglob("parity.json")).read_text())["diagnosis"]
    assert d == {
        "status": "failed",
        "candidate": d["candidate"],
        "reason": "RuntimeError: cannot expose intermediate tensors",
    }


def test_validation_data_equal_to_calibration_data_is_flagged(tmp_path):
    cfg = write(tmp_path, mlp(), "validation: {files: val.npz}\ncalibration: {files: val.npz}\n")
    np.savez(tmp_path / "val.npz", x=np.ones((2, 8), np.float32))
    with pytest.warns(UserWarning):
        report = convert(cfg, tmp_path).parity
    assert "is the calibration data" in report["data"]["warning"]


def test_surgery_that_cuts_outputs_is_compared_against_the_fp32_graph_after_surgery(tiny):
    """The export has outputs the cut graph lacks: parity compares with the FP32 graph after
    surgery (which the surgery stage checked pass by pass), says so, and leaves torch out."""
    cfg, store = tiny
    cfg.write_text(cfg.read_text() + "surgery: {passes: [sanitize, {cut: {outputs: [features]}}]}\n")
    result = deploykit.convert(cfg, workdir=store)
    parity = result.parity
    assert result.passed and set(parity["outputs"]) == {"features"} and set(parity["outputs"]["features"]) == {"onnx"}
    assert parity["reference_note"].startswith("surgery changed the outputs (features, pooled -> features)")
    assert parity["outputs"]["features"]["onnx"]["metrics"]["ref_absmax"] > 0
