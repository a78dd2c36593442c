"""The detector example runs end to end, as `make demo` runs it."""

from pathlib import Path

import deploykit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "detector" / "deploykit.yaml"


def test_detector_example_converts_and_passes(tmp_path):
    result = deploykit.convert(EXAMPLE, workdir=tmp_path / "store", report_dir=tmp_path / "reports")
    assert result.passed
    assert [r.status for r in result.stages] == ["ran"] * 5
    parity = result.parity
    assert set(parity["outputs"]) == {"boxes", "scores"}
    assert parity["outputs"]["scores"]["torch"]["metrics"]["max_abs"] < 1e-4
    assert parity["data"]["kind"] == "validation" and parity["data"]["samples"] == 8
    assert {p.name for p in (tmp_path / "reports").iterdir()} == {"parity.json", "gate.json", "junit.xml", "summary.md"}
    again = deploykit.convert(EXAMPLE, workdir=tmp_path / "store")
    assert [r.status for r in again.stages] == ["reused"] * 5
    assert "<table>" in again._repr_html_() and "reused" in repr(again)
