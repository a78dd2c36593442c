"""The matrix in the local process pool: shared work, per-cell errors, reports, reruns, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

import deploykit
from deploykit.store.artifacts import Store
from tests.conftest import run_cli
from tests.matrix.helpers import write_matrix, write_model


def test_local_matrix_shares_work_reports_every_cell_and_reruns_nothing(tmp_path):
    good = write_model(tmp_path / "good", "good", seed=1)
    nocal = write_model(tmp_path / "nocal", "nocal", seed=2)
    nocal.write_text(nocal.read_text().replace("calibration: {files: calib, samples: 12}\n", ""))
    targets = [{"name": "cpu"}, {"name": "orin", "resources": {"orin": 1}}]
    matrix = write_matrix(tmp_path / "matrix.yaml", [good, nocal], ["fp32", "int8"], targets)
    code, out, err = run_cli(
        "matrix", str(matrix), "-w", str(tmp_path / "store"), "-j", "2", "--report-dir", str(tmp_path / "report")
    )
    report = json.loads((tmp_path / "report" / "matrix.json").read_text())
    cells = {c["id"]: c for c in report["cells"]}
    assert {k: c["status"] for k, c in cells.items()} == {
        "good/fp32/cpu": "passed",
        "good/fp32/orin": "error",
        "good/int8/cpu": "passed",
        "good/int8/orin": "error",
        "nocal/fp32/cpu": "passed",
        "nocal/fp32/orin": "error",
        "nocal/int8/cpu": "error",
        "nocal/int8/orin": "error",
    }
    # The invalid cell says why in its row; the unschedulable target was refused before it ran.
    assert cells["nocal/int8/cpu"]["exit_code"] == 2 and "needs calibration data" in cells["nocal/int8/cpu"]["error"]
    assert cells["good/fp32/orin"]["exit_code"] == 3 and cells["good/fp32/orin"]["attempts"] == 0
    assert "no node has CPU: 1, orin: 1 (nodes: this machine: CPU 2" in cells["good/fp32/orin"]["error"]
    assert code == 3 and "5 of 8 cells did not pass; first: good/fp32/orin: error" in " ".join(err.split())
    # Shared work: one ingest+surgery per model, one quantize for good/int8; the cells reuse them.
    assert report["work"]["shared_ran"] == 5 and report["work"]["cell_ran"] == 9
    good_int8 = cells["good/int8/cpu"]
    assert [(s["stage"], s["status"]) for s in good_int8["stages"]] == [
        ("ingest", "reused"),
        ("surgery", "reused"),
        ("quantize", "reused"),
        ("build", "ran"),
        ("parity", "ran"),
        ("gate", "ran"),
    ]
    assert good_int8["gate"]["fps"] > 0 and good_int8["parity"]["passed"]
    # JUnit: one testcase per model x precision x target.
    suite = ET.parse(tmp_path / "report" / "junit.xml").getroot()
    assert suite.get("tests") == "8" and suite.get("errors") == "5" and suite.get("failures") == "0"
    names = {(c.get("classname"), c.get("name")) for c in suite.iter("testcase")}
    assert ("deploykit.matrix.good", "int8 on cpu") in names and len(names) == 8
    summary = (tmp_path / "report" / "summary.md").read_text()
    assert "## deploykit matrix: matrix — FAIL" in summary and "| good | int8 | cpu | passed |" in summary
    assert "deploykit matrix: matrix" in out
    # The driver's store names every finished cell; a rerun finds everything and runs nothing.
    store = Store(tmp_path / "store")
    assert store.run_refs("good.int8.cpu")["gate"] == good_int8["stages"][-1]["digest"]
    again = deploykit.matrix(matrix, workdir=tmp_path / "store", jobs=2)
    assert again.work()["ran"] == 0
    assert again.cell("good", "int8", "cpu").stage("gate").digest == good_int8["stages"][-1]["digest"]
    assert "good" in again._repr_html_() and "<table>" in again._repr_html_()


HANG = """
import time
from pathlib import Path

import numpy as np

HANG = Path({hang!r})


def samples():
    while HANG.exists():  # the test interrupts the driver while this cell waits here
        time.sleep(0.2)
    rng = np.random.default_rng(0)
    for _ in range(2):
        yield {{"x": rng.random((1, 3, 16, 16), dtype=np.float32)}}
"""


@pytest.mark.slow  # ~40 s: `make test` runs it in its second step with the Ray tests
def test_ctrl_c_keeps_finished_cells_and_the_next_run_reuses_them(tmp_path):
    quick = write_model(tmp_path / "quick", "quick", seed=3)
    slow = write_model(tmp_path / "slow", "slow", seed=4)
    hang = tmp_path / "hang"
    hang.write_text("")
    (slow.parent / "hang_data.py").write_text(textwrap.dedent(HANG.format(hang=str(hang))))
    slow.write_text(
        slow.read_text().replace(
            "validation: {files: calib, samples: 2}", "validation: {function: 'hang_data:samples', samples: 2}"
        )
    )
    matrix = write_matrix(tmp_path / "matrix.yaml", [quick, slow], ["fp32"], [{"name": "cpu"}])
    store = tmp_path / "store"
    cmd = [
        sys.executable,
        "-c",
        "from deploykit.cli.app import main; main()",
        "matrix",
        str(matrix),
        "-w",
        str(store),
        "-j",
        "2",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    # SIGINT at its default, as under a terminal: a test run started in the background by a
    # non-interactive shell inherits SIGINT ignored, and the Ctrl-C below would never arrive
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 240
        while not (store / "runs" / "quick.fp32.cpu.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(1.0)
        # Ctrl-C as a terminal sends it, to the whole process group: the command's work runs in a
        # supervised child (the parent ignores SIGINT and reports the child's exit)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    report = json.loads((tmp_path / "report" / "matrix.json").read_text())
    assert report["interrupted"] and {c["id"]: c["status"] for c in report["cells"]} == {
        "quick/fp32/cpu": "passed",
        "slow/fp32/cpu": "interrupted",
    }
    hang.unlink()
    again = deploykit.matrix(matrix, workdir=store, jobs=2)
    assert again.passed
    assert {s.status for s in again.cell("quick", "fp32", "cpu").stages} == {"reused"}
    statuses = {s.stage: s.status for s in again.cell("slow", "fp32", "cpu").stages}
    assert statuses["parity"] == "ran" and statuses["gate"] == "ran" and statuses["build"] == "reused"
    assert Path(store / "runs" / "slow.fp32.cpu.json").is_file()
