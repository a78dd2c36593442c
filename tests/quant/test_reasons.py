"""Reasons as data: codes are unique, a reason round-trips through JSON, a stored sentence without a
code (a record written before codes) still reads, and a qualified stop keeps every code."""

import json

import pytest

from deploykit.quant.reasons import Kept, Reason, as_reason, codes
from deploykit.quant.search import Stop


@pytest.mark.parametrize("kind", [Kept, Stop])
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
