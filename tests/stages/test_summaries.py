"""Typed stage results: each stage's summary is a dataclass beside the stage, stored in the manifest
as the plain dict it always was and read back by field; the stages name their own reports."""

from deploykit.metrics.reasons import Verdict
from deploykit.stages import default_stages, report_files, stage_names
from deploykit.stages.build import BuildSummary
from deploykit.stages.export import ExportCheck, ExportSummary
from deploykit.stages.gate import GateSummary
from deploykit.stages.parity import ParitySummary
from deploykit.stages.quantize import CpuSpeed, QuantCheck, QuantizeSummary, RepairSummary


def test_summaries_round_trip_through_plain_json_values():
    missed = Verdict.ABOVE_LIMIT(metric="rel_l2", value="0.2", limit="0.1").about("y").to_dict()
    summary = QuantizeSummary(
        precision="int8",
        flavour="tensorrt",
        excluded=["a", "b"],
        check=QuantCheck(False, [missed], {"y": {"rel_l2": 0.2, "cosine": None}}, 4),
        repair=RepairSummary(True, 2, ["conv"], "passed", [0.2, None]),
        cpu_speed=CpuSpeed(1.0, 0.5, 5, 10, 1, "ort", 2.0),
    )
    stored = summary.to_dict()
    assert stored["check"] == {
        "passed": False,
        "violations": [{"code": "above_limit", "sentence": "y: rel_l2 0.2 > 0.1", "subject": "y", "metric": "rel_l2"}],
        "metrics": {"y": {"rel_l2": 0.2, "cosine": None}},
        "samples": 4,
        "data": "held-out calibration samples",
        "tasks": [],
    }
    assert stored["repair"]["excluded_nodes"] == ["conv"] and stored["cpu_speed"]["speedup"] == 2.0
    back = QuantizeSummary.from_dict({**stored, "written_by_a_later_version": 1})
    assert back == summary and isinstance(back.check, QuantCheck) and back.repair.iterations == 2
    export = ExportSummary(
        "torchscript", "dynamo exporter failed: x", 18, 3, ExportCheck("ort", ["opt"], 2, 1e-7, "y", "opt")
    )
    assert ExportSummary.from_dict(export.to_dict()) == export
    assert QuantizeSummary.from_dict({}) == QuantizeSummary()  # missing keys take the defaults


def test_the_build_summary_is_stored_flat_as_before():
    summary = BuildSummary("tensorrt", {"plan_bytes": 10, "build_seconds": 1.5}, {"timing_cache_artifact": "abc"})
    stored = summary.to_dict()
    assert stored == {"backend": "tensorrt", "plan_bytes": 10, "build_seconds": 1.5, "timing_cache_artifact": "abc"}
    assert BuildSummary.from_dict(stored) == summary


def test_failures_say_why_a_check_failed():
    assert ParitySummary(True).failure() == ""
    assert (
        ParitySummary(False, "inconclusive", [], ["scores: reference is constant"]).failure()
        == "scores: reference is constant"
    )
    assert GateSummary(False, failures=["fps 3.0 < target 30"]).failure() == "fps 3.0 < target 30"
    assert QuantizeSummary().failure() == ""


def test_stages_declare_their_names_summaries_and_reports():
    stages = default_stages()
    assert stage_names() == ["export", "ingest", "surgery", "quantize", "lint", "build", "parity", "gate"]
    assert all(s.summary_type.__module__ == type(s).__module__ for s in stages)  # declared beside the stage
    assert report_files() == {
        "lint": ("lint.json",),
        "parity": ("parity.json",),
        "gate": ("gate.json",),
    }  # JUnit/Markdown: the run record
