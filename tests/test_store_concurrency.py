"""The store under kills and concurrent writers, through the console script.

- SIGKILL at a random point of each stage (the kill lands a random delay after the stage starts, so
  every stage is hit, fresh or reused), then a rerun: it completes, every artifact verifies, the
  deterministic stages give the digests of an undisturbed run, and no temporary is left anywhere.
- 2 and 4 converts at once on one workdir agree digest for digest and leave a store that verifies.
- Converts in separate PID namespaces (as containers sharing a workdir are) beside a process that
  keeps listing the store: nobody's temporaries are removed under them.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.hostile import models
from tests.hostile.harness import CONSOLE_SCRIPT, SRC, assert_no_traceback, deploykit

DETERMINISTIC = ("ingest", "surgery", "quantize", "build", "parity")
STAGES = ("ingest", "surgery", "quantize", "build", "parity", "gate")
CONFIG = """
name: killed
source: {onnx: model.onnx}
inputs:
  - {name: x, shape: [batch, 3, 8, 8]}
dims: {batch: {min: 1, opt: 1, max: 2}}
quantize: {precision: int8, method: max, check_samples: 1}
calibration: {files: calib, samples: 3}
parity: {samples: 1, default: {rel_l2: .inf, cosine: -.inf}}  # numerics are not the point here
gate: {warmup: 1, warmup_s: 0, iterations: 20, trials: 2, targets: {default: {fps: 1}}}
"""


def _project(folder: Path, quantized: bool) -> Path:
    models.save(models.conv(), folder / "model.onnx")
    (folder / "calib").mkdir(parents=True)
    for i in range(4):
        np.save(folder / "calib" / f"s{i}.npy", np.random.default_rng(i).random((1, 3, 8, 8), np.float32))
    cfg = folder / "deploykit.yaml"
    text = textwrap.dedent(CONFIG)
    cfg.write_text(text if quantized else text.replace("precision: int8", "precision: fp32"))
    return cfg


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "TMPDIR": str(tmp), "NO_COLOR": "1"}


def _digests(stderr: str) -> dict[str, str]:
    """Stage -> artifact digest from a --log-format json run's events."""
    out = {}
    for line in stderr.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("event") == "stage_end" and event.get("digest"):
                out[event["stage"]] = event["digest"]
    return out


def _convert(cfg: Path, store: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CONSOLE_SCRIPT), "convert", str(cfg), "-w", str(store), "--log-format", "json", *extra],
        capture_output=True,
        text=True,
        env=_env(tmp),
        timeout=600,
    )


def _kill_during(cfg: Path, store: Path, tmp: Path, stage: str, rng: random.Random) -> str:
    """Start a convert, SIGKILL it a random delay after ``stage`` starts; return what was running."""
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "convert", str(cfg), "-w", str(store), "--log-format", "json", "--rerun", stage],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_env(tmp),
    )
    running = "not reached"
    for line in proc.stderr:
        if line.startswith("{") and json.loads(line).get("event") == "stage_start":
            running = json.loads(line)["stage"]
            if running == stage:
                time.sleep(rng.uniform(0.0, 0.4))
                break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return running


def _no_temporaries(store: Path, tmp: Path) -> None:
    assert list((store / "tmp").iterdir()) == [], list((store / "tmp").iterdir())
    assert list(tmp.iterdir()) == [], f"left in $TMPDIR: {list(tmp.iterdir())}"


def _verify(store: Path, tmp: Path) -> None:
    run = deploykit("artifacts", "verify", "-w", store, env={"TMPDIR": str(tmp)})
    assert run.code == 0, str(run)


def _reference(root: Path, quantized: bool) -> tuple[Path, dict[str, str]]:
    cfg = _project(root / "project", quantized)
    (root / "tmp").mkdir()
    done = _convert(cfg, root / "store", root / "tmp")
    assert done.returncode == 0, done.stderr
    return cfg, _digests(done.stderr)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The FP32 project (no quantize stage: fast) and the digests of an undisturbed run."""
    return _reference(tmp_path_factory.mktemp("reference"), quantized=False)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The INT8 project: every stage runs."""
    return _reference(tmp_path_factory.mktemp("quantized"), quantized=True)


def _kill_trials(reference, tmp_path: Path, stages: tuple[str, ...], seeds: range) -> list[str]:
    cfg, expected = reference
    hits = []
    for seed in seeds:
        rng = random.Random(seed)
        store, tmp = tmp_path / f"store-{seed}", tmp_path / f"tmp-{seed}"
        tmp.mkdir()
        done = _convert(cfg, store, tmp)  # a complete run first: each kill then hits a stage that reruns
        assert done.returncode == 0, done.stderr
        for stage in stages:
            hits.append(_kill_during(cfg, store, tmp, stage, rng))
            rerun = _convert(cfg, store, tmp)
            assert rerun.returncode == 0, rerun.stderr
            got = _digests(rerun.stderr)
            assert {s: got[s] for s in DETERMINISTIC if s in got} == {s: expected[s] for s in DETERMINISTIC if s in got}
            _verify(store, tmp)
            _no_temporaries(store, tmp)
    return hits


@pytest.mark.serial
def test_sigkill_during_build_then_rerun(reference, tmp_path):
    assert _kill_trials(reference, tmp_path, ("build",), range(1)) == ["build"]


@pytest.mark.slow
def test_sigkill_at_random_points_of_every_stage(quantized, tmp_path):
    hits = _kill_trials(quantized, tmp_path, STAGES, range(3))
    assert hits == list(STAGES) * 3  # every stage was hit, with 3 seeds: 18 trials, 0 corruptions


def _concurrent(reference, tmp_path: Path, n: int) -> None:
    cfg, expected = reference
    store, tmp = tmp_path / "store", tmp_path / "tmp"
    tmp.mkdir()
    results: list[subprocess.CompletedProcess] = [None] * n  # type: ignore[list-item]

    def go(i: int) -> None:
        results[i] = _convert(cfg, store, tmp)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for done in results:
        assert done.returncode == 0, done.stderr
        got = _digests(done.stderr)
        assert {s: got[s] for s in DETERMINISTIC if s in got} == {s: expected[s] for s in DETERMINISTIC if s in got}
    _verify(store, tmp)
    _no_temporaries(store, tmp)


@pytest.mark.serial
def test_two_concurrent_converts_on_one_workdir(reference, tmp_path):
    _concurrent(reference, tmp_path, 2)


@pytest.mark.slow
def test_four_concurrent_quantized_converts_on_one_workdir(quantized, tmp_path):
    _concurrent(quantized, tmp_path, 4)


def _unshare_works() -> bool:
    if os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-p", "-f", "--mount-proc", "true"], capture_output=True).returncode == 0


@pytest.mark.slow  # tests/test_artifacts.py checks the same liveness across namespaces in a second
@pytest.mark.skipif(not _unshare_works(), reason="needs root and `unshare -p` (PID namespaces)")
def test_converts_in_two_pid_namespaces_beside_a_lister(reference, tmp_path):
    cfg, expected = reference
    store, tmp = tmp_path / "store", tmp_path / "tmp"
    tmp.mkdir()
    command = [str(CONSOLE_SCRIPT), "convert", str(cfg), "-w", str(store), "--log-format", "json", "--rerun", "gate"]
    procs = [
        subprocess.Popen(
            ["unshare", "-p", "-f", "--kill-child", "--mount-proc", *command],
            env=_env(tmp),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    listings = 0
    while any(p.poll() is None for p in procs):  # what deleted another container's folder before
        run = deploykit("artifacts", "ls", "-w", store, env={"TMPDIR": str(tmp)})
        assert_no_traceback(run)
        listings += 1
        time.sleep(1.0)
    for p in procs:
        err = p.stderr.read()
        assert p.wait() == 0, err
        got = _digests(err)
        assert {s: got[s] for s in DETERMINISTIC if s in got} == {s: expected[s] for s in DETERMINISTIC if s in got}
    assert listings >= 1
    _verify(store, tmp)
    _no_temporaries(store, tmp)
