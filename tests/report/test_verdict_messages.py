"""Verdict lines and notes say what failed, with true comparisons (issue 28, part 4); and one switch
judges by the configured task checks alone."""

import numpy as np
import pytest

from deploykit.config import DetectionCheck, PackedDetections, ParityConfig, TaskChecks, Tolerance
from deploykit.metrics.comparison import Comparison
from deploykit.metrics.reasons import as_reason
from deploykit.record.model import Check, RunRecord
from deploykit.report.markdown import _parity, _quantize
from deploykit.stages.parity import parity_checks

INT8 = Tolerance(rel_l2=0.1, cosine=0.995)


def _packed(rng, n=40, classes=3):
    """A YOLO-style [1, 4 + classes, n] output: boxes in pixels, scores in [0, 1]."""
    boxes = np.concatenate([rng.uniform(20, 200, (2, n)), rng.uniform(10, 40, (2, n))])
    scores = rng.uniform(0, 1, (classes, n)) ** 3
    return np.concatenate([boxes, scores])[None].astype(np.float32)


def _comparison(parity, ref, got):
    c = Comparison(parity, INT8, "int8")
    c.add({"onnx": {"out": ref}}, {"out": got})
    return c.report()


def test_a_recall_failure_is_named_by_recall_not_by_a_limit_switched_off():
    rng = np.random.default_rng(0)
    ref = _packed(rng)
    got = ref.copy()
    got[0, 4:, ::3] *= 0.2  # a third of the boxes lose their scores: recall drops, matched stays high-ish
    check = DetectionCheck(
        packed=PackedDetections("out"),
        min_matched=0.0,
        min_recall=0.99,
        min_mean_iou=0.0,
        max_score_delta=1.0,
        max_class_flips=1.0,
    )
    report = _comparison(ParityConfig(tasks=TaskChecks(detection=(check,))), ref, got)
    [task] = [c for c in parity_checks(report) if c.group == "task"]
    assert not task.passed and task.metric == "recall"
    assert task.verdict_line().startswith("recall ") and " < 0.99" in task.verdict_line()


def test_an_inconclusive_check_never_prints_a_false_comparison():
    c = Check(
        "task",
        "segmentation[0] vs onnx",
        "inconclusive",
        False,
        "pixel_agreement",
        1.0,
        0.99,
        ">=",
        "the reference argmax is class 0 everywhere",
    )
    line = c.verdict_line()
    assert "1 >= 0.99" in line and "<" not in line and "inconclusive: the reference argmax" in line
    assert Check("parity", "x", "fail", False, "rel_l2", 0.3, 0.1, "<=").verdict_line() == "rel_l2 0.3 > 0.1"
    reported = Check("quantize", "sigmoid_0.tmp_0", "pass", True, "rel_l2", 0.0312, None, "<=").verdict_line()
    assert reported == "rel_l2 0.0312 (reported, no limit)"  # a metric, not a bare "pass"


def test_judge_tasks_judges_the_limits_a_check_sets_and_reports_the_rest():
    rng = np.random.default_rng(1)
    ref = _packed(rng)
    got = ref.copy()
    unscored = ref[0, 4:].max(axis=0) < 0.2  # boxes no side counts: moving them costs rel-L2, not recall
    got[0, :4, unscored] += 60.0
    check = DetectionCheck(packed=PackedDetections("out"), min_recall=0.5)  # recall only; the other limits default
    judged = _comparison(ParityConfig(tasks=TaskChecks(detection=(check,)), judge="tasks"), ref, got)
    everything = _comparison(ParityConfig(tasks=TaskChecks(detection=(check,))), ref, got)
    entry = judged["outputs"]["out"]["onnx"]
    assert everything["outputs"]["out"]["onnx"]["violations"]  # rel-L2/cosine miss the INT8 preset...
    assert not entry["violations"] and entry["reported"] and entry["status"] == "pass"  # ...reported, not judged
    assert all(as_reason(r).codes[1:] == ("judged_by_tasks",) for r in entry["reported"])
    task = judged["tasks"][0]
    assert [lim["metric"] for lim in task["limits"] if lim["judged"]] == ["recall"]
    assert judged["passed"] == (task["metrics"]["recall"] >= 0.5) and not task["violations"]
    assert all(as_reason(r).codes[-1] == "not_judged" for r in task["reported"])
    plain = DetectionCheck(packed=PackedDetections("out"))  # sets no limit: judged by all of its defaults
    report = _comparison(ParityConfig(tasks=TaskChecks(detection=(plain,)), judge="tasks"), ref, got)
    assert all(lim["judged"] for lim in report["tasks"][0]["limits"])


def test_judge_tasks_needs_a_task_check():
    with pytest.raises(ValueError, match="judge: tasks needs a task check"):
        ParityConfig(judge="tasks")


def test_a_large_error_on_an_output_that_varies_is_not_called_input_independent():
    from deploykit.quant.check import weak_signal

    class Ref:
        signal = {"varies": 0.941, "flat": 0.002}

    said = {r.subject: r for r in weak_signal({"varies": {"rel_l2": 0.598}, "flat": {"rel_l2": 0.01}}, Ref())}
    varies, flat = said["varies"], said["flat"]
    assert varies.code == "signal_lost" and flat.code == "weak_signal"
    assert str(varies).startswith("varies: the error (rel-L2 0.598) is 0.635x how much the output changes")


def test_summary_names_the_diagnosis_and_the_calibration_samples_that_set_the_ranges():
    diagnosis = {
        "status": "ran",
        "threshold": 0.05,
        "first_exceeding": [{"tensor": "conv3_out", "node": "conv3", "op_type": "Conv", "rel_l2": 0.21}],
    }
    record = RunRecord(
        "m",
        "int8",
        "onnxruntime",
        "onnxruntime",
        checks=(Check("parity", "y vs onnx", "fail", False, "rel_l2", 0.3, 0.1, "<="),),
        details={
            "parity": {"diagnosis": diagnosis, "outputs": {}},
            "quantize": {
                "samples": 64,
                "range_samples": 48,
                "precision": "int8",
                "check": {"samples": 16, "data": "16 held-out calibration samples"},
            },
        },
    )
    text = "\n".join(_parity(record))
    assert "First diverging tensor: `conv3_out` (node `conv3`, Conv, rel-L2 0.21)" in text and "ran: _" not in text
    none = {**diagnosis, "first_exceeding": []}
    quiet = RunRecord(
        "m",
        "int8",
        "onnxruntime",
        "onnxruntime",
        checks=record.checks,
        details={"parity": {"diagnosis": none, "outputs": {}}},
    )
    assert "_per-layer diagnosis ran: no tensor exceeds rel-L2 0.05_" in "\n".join(_parity(quiet))
    quantize = RunRecord(
        "m",
        "int8",
        "onnxruntime",
        "onnxruntime",
        checks=(Check("quantize", "y", "pass", True, "rel_l2", 0.02, 0.1, "<="),),
        details=record.details,
    )
    assert "ranges from 48 of 64 samples read" in "\n".join(_quantize(quantize))


def test_the_cpu_speed_reason_comes_from_the_model():
    from onnx import TensorProto, helper, numpy_helper

    from deploykit.quant.speed import why_not_faster
    from tests.quant import models

    assert "depthwise convolutions take" in why_not_faster(models.depthwise())
    rng = np.random.default_rng(0)
    w, r = (
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
        for n, s in (("W", (1, 24, 8)), ("R", (1, 24, 8)))
    )
    gru = helper.make_graph(
        [helper.make_node("GRU", ["x", "W", "R"], ["y", "h"], hidden_size=8, name="gru")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 8])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, None)],
        [w, r],
    )
    said = why_not_faster(helper.make_model(gru, opset_imports=[helper.make_opsetid("", 17)]))
    assert "GRU" in said and "depthwise" not in said.lower()


def test_the_spent_budget_hint_offers_high_precision_only_where_the_flavour_reads_it():
    from pathlib import Path

    from deploykit.stages.quantize import QuantizeSummary, RepairSummary, _hint

    spent = RepairSummary(False, 8, ["a"], "evaluation budget spent (8)")
    ort = _hint(QuantizeSummary(flavour="onnxruntime", repair=spent), Path("precision.json"))
    trt = _hint(QuantizeSummary(flavour="tensorrt", repair=spent), Path("precision.json"))
    assert "high_precision" not in ort and "max_iterations" in ort  # its float rest is FP32 whatever it says
    assert "use quantize.high_precision: fp32" in trt


def test_the_quantize_line_names_the_metric_of_an_output_with_no_limit():
    from deploykit.report.terminal import verdict_lines

    record = RunRecord(
        "m",
        "int8",
        "onnxruntime",
        "onnxruntime",
        checks=(Check("quantize", "sigmoid_0.tmp_0", "pass", True, "rel_l2", 0.0312, None, "<="),),
    )
    line = next(x for x in verdict_lines(record) if x.startswith("quantize:"))
    assert line == "quantize: PASS — worst: sigmoid_0.tmp_0 rel_l2 0.0312 (reported, no limit) (1 checks)"
