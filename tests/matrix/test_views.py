"""The matrix's table, reports and JSON log render one result the same way (no run needed)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from xml.etree import ElementTree as ET

from deploykit.matrix.report import markdown, write
from deploykit.matrix.result import CellResult, JobResult, MatrixResult
from deploykit.matrix.results import StageRun
from deploykit.matrix.table import JsonView, html_table, rows, text_table


def _result(tmp_path: Path) -> MatrixResult:
    shared = JobResult(
        "m:ingest+surgery:abc",
        "shared",
        ("ingest", "surgery"),
        (StageRun("ingest", "ran", 0.1, "d1"), StageRun("surgery", "ran", 0.2, "d2")),
        0,
        "",
        1,
        "n1",
        0.3,
        2,
    )
    stages = (
        StageRun("ingest", "reused", 0, "d1"),
        StageRun("surgery", "reused", 0, "d2"),
        StageRun("build", "ran", 0.1, "d3"),
        StageRun("parity", "ran", 0.1, "d4"),
        StageRun("gate", "ran", 1, "d5"),
    )
    ok = CellResult(
        "m/fp32/cpu",
        "m",
        "fp32",
        "cpu",
        "passed",
        0,
        attempts=2,
        node="n1",
        seconds=1.5,
        stages=stages,
        shared=(shared.id,),
        gate={"fps": 123.4, "passed": True},
    )
    slow = CellResult(
        "m/fp32/edge",
        "m",
        "fp32",
        "edge",
        "failed",
        1,
        error="gate failed: fps 3 < 30 | see <x>",
        attempts=1,
        stages=stages,
        shared=(shared.id,),
        gate={"fps": 3.0, "passed": False},
    )
    bad = CellResult("m/int8/cpu", "m", "int8", "cpu", "error", 2, error="quantize.precision int8 needs calibration")
    return MatrixResult("demo", "local", tmp_path, 4.2, (ok, slow, bad), (shared,))


def test_rows_show_shared_work_own_stages_and_tries(tmp_path):
    result = _result(tmp_path)
    first = rows(result)[0]
    assert first[:8] == (
        "m",
        "fp32",
        "cpu",
        "passed",
        "ingest+surgery ran ×2",
        "build:ran parity:ran gate:ran",
        "123.4",
        "2",
    )
    assert result.exit_code == 2 and not result.passed  # an error outranks a failed gate
    assert result.work() == {"cell_stages": 10, "ran": 8, "shared_ran": 2, "cell_ran": 6, "reused": 2}
    text = text_table(result)
    assert "MatrixResult('demo', passed=False, exit_code=2)" in text and "3 cells (1 error, 1 failed, 1 passed)" in text
    html = html_table(result)
    assert "&lt;x&gt;" in html and "<x>" not in html and html.count("<tr>") == 4


def test_reports_have_one_testcase_per_cell(tmp_path):
    result = _result(tmp_path)
    files = write(result, tmp_path / "r")
    assert [f.name for f in files] == ["matrix.json", "junit.xml", "summary.md"]
    suite = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    case = next(c for c in suite.iter("testcase") if c.get("name") == "fp32 on edge")
    assert case.find("failure").get("message").startswith("gate failed: fps 3 < 30")
    attempts = {
        c.get("name"): c.find("properties/property[@name='attempts']").get("value") for c in suite.iter("testcase")
    }
    assert attempts == {"fp32 on cpu": "2", "fp32 on edge": "1", "int8 on cpu": "0"}
    data = json.loads((tmp_path / "r" / "matrix.json").read_text())
    assert data["schema"] == "deploykit.matrix/1" and data["exit_code"] == 2 and len(data["cells"]) == 3
    md = markdown(result)
    assert "| m | fp32 | edge | **failed** |" in md and "\\| see <x>" in md  # a pipe in a note stays in its cell


def test_json_view_logs_each_status_change_once(tmp_path):
    out = io.StringIO()
    view = JsonView(out)
    result = _result(tmp_path)
    view.update(result)
    view.update(result)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(e["cell"], e["status"]) for e in lines] == [
        ("m/fp32/cpu", "passed"),
        ("m/fp32/edge", "failed"),
        ("m/int8/cpu", "error"),
    ]
