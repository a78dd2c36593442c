"""Reasons as data: codes are unique, a reason round-trips through JSON, a stored sentence without a
code (a record written before codes) still reads, a qualified stop keeps every code, and a verdict
explanation keeps its code, subject and metric from the metrics to the run record."""

import json

import numpy as np
import pytest

from deploykit.metrics.reasons import Verdict
from deploykit.quant.reasons import Kept, Reason, as_reason, codes
from deploykit.quant.search import Stop


@pytest.mark.parametrize("kind", [Kept, Stop, Verdict])
def test_every_code_is_unique(kind):
    assert len(set(codes(kind))) == len(kind) and all(c and c == c.lower() for c in codes(kind))


def test_a_reason_is_its_sentence_and_round_trips_through_json():
    why = Kept.MIXED_RANGES(narrow="scores", narrow_span=1.0, wide="boxes", wide_span=640.0, ratio=640.0)
    assert str(why) == (
        "joins 'scores' (range 1) and 'boxes' (range 640), 640x apart: one INT8 scale would "
        "flatten the narrower; kept in float"
    )
    stored = json.loads(json.dumps(why.to_dict()))
    assert stored == {"code": "mixed_ranges", "sentence": str(why)} and as_reason(stored) == why
    assert as_reason("kept FP32 by configuration") == Reason("", "kept FP32 by configuration")  # an old record


def test_a_qualified_stop_keeps_its_code_and_adds_the_qualifications():
    stop = Stop.BUDGET_SPENT(n=8).qualified(
        Stop.TIMED_NOT_FASTER(base="INT8", margin=1 / 0.9, base_ms=3.58, fp32_ms=3.7)
    )
    assert stop.code == "budget_spent" and stop.codes == ("budget_spent", "timed_not_faster")
    assert str(stop).startswith("evaluation budget spent (8); timed after the search, INT8 alone is not 1.1x")
    assert Reason.from_dict(json.loads(json.dumps(stop.to_dict()))) == stop


def test_a_verdict_keeps_its_code_subject_and_metric_through_json_and_reads_old_sentences():
    missed = Verdict.ABOVE_LIMIT(metric="rel_l2", value="0.2", limit="0.1").about("y")
    assert str(missed) == "y: rel_l2 0.2 > 0.1" and missed.bare == "rel_l2 0.2 > 0.1"
    stored = json.loads(json.dumps(missed.to_dict()))
    assert stored == {"code": "above_limit", "sentence": str(missed), "subject": "y", "metric": "rel_l2"}
    assert as_reason(stored) == missed
    vacuous = Verdict.INCONCLUSIVE.restate(Verdict.REFERENCE_ZEROS()).about("head")
    assert str(vacuous) == "head: inconclusive: the reference output is all zeros"
    assert vacuous.codes == ("reference_zeros", "inconclusive") and as_reason(vacuous.to_dict()) == vacuous
    old = as_reason("y: rel_l2 0.2 > 0.1")  # a parity report or summary written before verdicts had codes
    assert (old.code, old.subject, old.sentence) == ("", "", "y: rel_l2 0.2 > 0.1")


def test_the_run_record_carries_the_codes_of_its_checks():
    from deploykit.config import ParityConfig, Tolerance
    from deploykit.metrics.comparison import Comparison
    from deploykit.record.model import RunRecord
    from deploykit.stages.parity import parity_checks

    comparison = Comparison(ParityConfig(), Tolerance(rel_l2=0.1, cosine=0.99), "int8")
    ref = np.linspace(-1.0, 1.0, 32, dtype=np.float32)
    comparison.add({"onnx": {"y": ref, "z": np.zeros(4, np.float32)}}, {"y": -ref, "z": np.zeros(4, np.float32)})
    report = json.loads(json.dumps(comparison.report()))  # as parity.json stores it
    checks = {c.name: c for c in parity_checks(report)}
    assert checks["y vs onnx"].codes == ("above_limit", "below_limit")  # rel_l2 2 > 0.1, cosine -1 < 0.99
    assert checks["y vs onnx"].message == "rel_l2 2 > 0.1; cosine -1 < 0.99"
    assert checks["z vs onnx"].codes == ("reference_zeros",) and checks["z vs onnx"].status == "inconclusive"
    record = RunRecord("m", "int8", "onnxruntime", "", checks=tuple(checks.values()))
    back = RunRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert back.checks == record.checks
    old = record.to_dict()
    for c in old["checks"]:
        del c["codes"]  # a record written before checks had codes
    assert all(c.codes == () for c in RunRecord.from_dict(old).checks)


def test_a_quantize_summary_written_before_codes_still_says_what_each_violation_is_about():
    from deploykit.stages.quantize import QuantCheck, _violations

    old = ["y: rel_l2 0.2 > 0.1", "probability_map[0]: iou 0.9 < 0.97", "something else"]
    check = QuantCheck(False, old, {"y": {"rel_l2": 0.2}}, 4, tasks=[{"label": "probability_map[0]"}])
    assert [(v.code, v.subject, v.bare) for v in _violations(check)] == [
        ("", "y", "rel_l2 0.2 > 0.1"),
        ("", "probability_map[0]", "iou 0.9 < 0.97"),
        ("", "", "something else"),
    ]
