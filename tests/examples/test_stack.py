"""The example stack (examples/stack/stack.yaml) runs its three trained models together on the CPU, and
every view agrees with the exit code. Whether this machine meets the deadlines is not asserted (that is
bench/bench_stack.py's business): the verdict must follow from the numbers, whichever it is."""

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from tests.conftest import run_cli

STACK = Path(__file__).resolve().parents[2] / "examples" / "stack" / "stack.yaml"


@pytest.mark.e2e
def test_the_example_stack_runs_and_its_views_agree(tmp_path):
    code, out, err = run_cli(
        "stack",
        str(STACK),
        "-w",
        str(tmp_path / "store"),
        "--duration",
        "2",
        "--alone",
        "0.5",
        "--report-dir",
        str(tmp_path / "r"),
    )
    result = json.loads((tmp_path / "r" / "stack.json").read_text())
    failed = [c for c in result["checks"] if not c["passed"]]
    assert code == result["exit_code"] == (1 if failed else 0), err
    assert set(result["models"]) == {"detector", "segmenter", "planner"}
    for name, m in result["models"].items():
        rate = result["models"]["detector" if name == "planner" else name]["rate_hz"]
        if name != "planner":
            assert m["completed"] + m["dropped"] == round(rate * 2)  # every released frame ran or was dropped
        assert m["alone"]["frames"] > 0 and m["slowdown"]["p50"] > 0 and "(ran)" in m["source"]
        for c in (c for c in result["checks"] if c["name"] == f"{name}: deadline {m['deadline']['deadline_ms']:g} ms"):
            assert c["passed"] == (m["deadline"]["miss_rate"] <= m["max_miss_rate"])  # the verdict follows the numbers
    assert "detector -> planner" in result["chains"]
    suite = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    assert int(suite.get("failures")) == len(failed) and int(suite.get("tests")) == len(result["checks"])
    assert f"— {result['verdict']} (exit {result['exit_code']})" in (tmp_path / "r" / "summary.md").read_text()
    assert out.splitlines()[-1].startswith(f"result: {result['verdict']} (exit {result['exit_code']})")
