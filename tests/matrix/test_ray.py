"""The matrix on a real two-node Ray cluster (no mock): same results as the local pool, artifacts
moved without a shared filesystem, a killed worker retried, reruns, and unsatisfiable targets.

Marked ``ray``: the default suite skips them; ``make test`` runs them in a second step."""

from __future__ import annotations

import json
import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest

import deploykit
from deploykit.errors import UsageError
from deploykit.store.artifacts import Store
from tests.matrix.helpers import two_by_two, write_matrix, write_model

pytestmark = pytest.mark.ray

FAR = [{"name": "far", "backend": "onnxruntime", "resources": {"far": 1}}]
SHARED = ("ingest", "surgery", "quantize")


def _shared_digests(result) -> dict[tuple[str, str, str], str]:
    return {(c.model, c.precision, s.stage): s.digest for c in result.cells for s in c.stages if s.stage in SHARED}


def test_two_by_two_on_ray_equals_the_local_pool(ray_cluster, tmp_path):
    matrix = two_by_two(tmp_path / "m", targets=FAR)
    on_ray = deploykit.matrix(
        matrix, ray=ray_cluster.address, workdir=tmp_path / "ray-store", report_dir=tmp_path / "report"
    )
    # The same cells in the local pool: this machine has no `far` resource, so the target asks for none.
    here = write_matrix(
        matrix.with_name("here.yaml"),
        [matrix.parent / "a" / "deploykit.yaml", matrix.parent / "b" / "deploykit.yaml"],
        ["fp32", "int8"],
        [{"name": "far"}],
    )
    local = deploykit.matrix(here, workdir=tmp_path / "local-store", jobs=2)
    assert on_ray.passed and local.passed, (on_ray, local)
    assert [c.id for c in on_ray.cells] == [c.id for c in local.cells] and len(on_ray.cells) == 4
    # Device-independent artifacts are identical, byte for byte (the digest covers every file).
    assert _shared_digests(on_ray) == _shared_digests(local) and len(_shared_digests(local)) == 10
    for ray_cell, local_cell in zip(on_ray.cells, local.cells, strict=True):
        assert ray_cell.parity["passed"] and local_cell.parity["passed"]
        assert ray_cell.stage("build").digest == local_cell.stage("build").digest  # same CPU, same ORT
    # Every cell ran on the far node, whose private store got its inputs through the object store...
    far = Store(ray_cluster.far_dir / "store")
    for c in on_ray.cells:
        assert c.stage("gate").status == "ran" and c.transfer["in_bytes"] > 0
        assert far.get(c.stage("gate").digest).kind == "bench-report"
        assert far.get(c.stage("surgery").digest).digest == c.stage("surgery").digest
    # ... and the driver's store holds every artifact, imported and verified, with run names.
    driver = Store(tmp_path / "ray-store")
    for c in on_ray.cells:
        for s in c.stages:
            assert driver.get(s.digest).digest == s.digest
        assert driver.run_refs(c.id.replace("/", "."))["gate"] == c.stage("gate").digest
    # The shared work ran once per (model, precision): 2 ingest+surgery jobs, 2 quantize jobs.
    assert sorted(j.summary() for j in on_ray.jobs) == ["ingest+surgery ran ×2"] * 2 + ["quantize ran ×1"] * 2
    report = json.loads((tmp_path / "report" / "matrix.json").read_text())
    assert report["executor"] == "ray" and len(report["cells"]) == 4 and report["exit_code"] == 0


SLOW_DATA = '''
import os
import time
from pathlib import Path

import numpy as np

PID = Path({pid!r})


def samples():
    """The first call records its process and hangs (the test kills it); later calls just yield."""
    if not PID.exists():
        PID.write_text(str(os.getpid()))
        time.sleep(120)
    rng = np.random.default_rng(0)
    for _ in range(2):
        yield {{"x": rng.random((1, 3, 16, 16), dtype=np.float32)}}
'''


def test_a_killed_worker_is_retried_and_the_retry_is_reported(ray_cluster, tmp_path):
    config = write_model(tmp_path / "m" / "slow", "slow", seed=3)
    pid_file = tmp_path / "worker.pid"
    (config.parent / "slow_data.py").write_text(textwrap.dedent(SLOW_DATA.format(pid=str(pid_file))))
    config.write_text(
        config.read_text().replace(
            "validation: {files: calib, samples: 2}", "validation: {function: 'slow_data:samples', samples: 2}"
        )
    )
    matrix = write_matrix(tmp_path / "m" / "matrix.yaml", [config], ["fp32"], FAR, retries=2)
    killed: list[int] = []

    def kill_when_hung() -> None:
        deadline = time.monotonic() + 240
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        if pid_file.exists():
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGKILL)  # the Ray worker process running the cell's parity stage
            killed.append(pid)

    killer = threading.Thread(target=kill_when_hung, daemon=True)
    killer.start()
    result = deploykit.matrix(
        matrix, ray=ray_cluster.address, workdir=tmp_path / "store", report_dir=tmp_path / "report"
    )
    killer.join(timeout=5)
    assert killed, "the cell never reached the slow data function"
    cell = result.cells[0]
    assert cell.status == "passed" and cell.parity["passed"], cell
    assert cell.attempts == 2  # the first worker was killed; Ray ran the task again
    assert cell.stage("parity").status == "ran"
    junit = (tmp_path / "report" / "junit.xml").read_text()
    assert '<property name="attempts" value="2"' in junit
    assert json.loads((tmp_path / "report" / "matrix.json").read_text())["cells"][0]["attempts"] == 2


def test_a_rerun_after_one_cell_failed_reruns_only_that_cell(ray_cluster, tmp_path):
    good = write_model(tmp_path / "m" / "good", "good", seed=4)
    bad = write_model(tmp_path / "m" / "bad", "bad", seed=5)
    bad.write_text(bad.read_text().replace("validation: {files: calib,", "validation: {files: held_out,"))
    matrix = write_matrix(tmp_path / "m" / "matrix.yaml", [good, bad], ["fp32"], FAR)
    first = deploykit.matrix(matrix, ray=ray_cluster.address, workdir=tmp_path / "store")
    assert first.cell("good", "fp32", "far").status == "passed"
    failed = first.cell("bad", "fp32", "far")
    assert failed.status == "error" and failed.exit_code == 4 and "held_out" in failed.error
    assert first.exit_code == 4
    (bad.parent / "calib").rename(bad.parent / "held_out")  # the data the cell lacked
    second = deploykit.matrix(matrix, ray=ray_cluster.address, workdir=tmp_path / "store")
    assert second.passed, second
    again = second.cell("good", "fp32", "far")
    assert {s.status for s in again.stages} == {"reused"}
    fixed = second.cell("bad", "fp32", "far")
    statuses = {s.stage: s.status for s in fixed.stages}
    assert statuses == {"ingest": "reused", "surgery": "reused", "build": "reused", "parity": "ran", "gate": "ran"}


def test_an_unsatisfiable_target_fails_at_once(ray_cluster, tmp_path):
    config = write_model(tmp_path / "m" / "a", "a", seed=6)
    targets = [{"name": "orin", "backend": "onnxruntime", "resources": {"orin": 1}}, FAR[0]]
    matrix = write_matrix(tmp_path / "m" / "matrix.yaml", [config], ["fp32"], targets)
    start = time.monotonic()
    result = deploykit.matrix(matrix, ray=ray_cluster.address, workdir=tmp_path / "store")
    orin = result.cell("a", "fp32", "orin")
    assert orin.status == "error" and orin.exit_code == 3 and orin.attempts == 0
    assert "target orin cannot be scheduled: no node has CPU: 1, orin: 1" in orin.error
    assert result.cell("a", "fp32", "far").status == "passed"  # the other target still ran
    assert result.exit_code == 3 and time.monotonic() - start < 120


def test_cli_on_ray_prints_the_table_and_exits_with_the_failure(ray_cluster, tmp_path):
    from tests.conftest import run_cli

    config = write_model(tmp_path / "m" / "a", "a", seed=7)
    targets = [{"name": "orin", "resources": {"orin": 1}}, FAR[0]]
    matrix = write_matrix(tmp_path / "m" / "matrix.yaml", [config], ["fp32"], targets)
    code, out, err = run_cli(
        "matrix",
        str(matrix),
        "--ray",
        ray_cluster.address,
        "-w",
        str(tmp_path / "store"),
        "--report-dir",
        str(tmp_path / "r"),
    )
    assert code == 3, err
    assert "a/fp32/orin: error" in err and "cannot be scheduled" in err
    assert "deploykit matrix: matrix" in out and "passed" in out
    assert Path(tmp_path / "r" / "junit.xml").is_file()


def test_transfer_shared_lets_every_node_use_the_store_path_itself(ray_cluster, tmp_path):
    config = write_model(tmp_path / "m" / "a", "shared_fs", seed=8)
    matrix = write_matrix(
        tmp_path / "m" / "matrix.yaml", [config], ["fp32"], FAR, transfer="shared", store="shared-store"
    )
    result = deploykit.matrix(matrix, ray=ray_cluster.address)
    cell = result.cells[0]
    assert cell.status == "passed" and cell.transfer == {}  # nothing went through the object store
    store = Store(tmp_path / "m" / "shared-store")  # the file's `store`, relative to the matrix file
    far = Store(ray_cluster.far_dir / "store")
    for s in cell.stages:
        assert store.get(s.digest).digest == s.digest
        with pytest.raises(UsageError):
            far.get(s.digest)  # the far node wrote into the shared store, not its own
