"""The machine's problems are exit 3 and say so: a full disk (a real small tmpfs), a read-only
workdir, a stage past its time limit; plugin libraries that are not ELF files are exit 4."""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.hostile import models
from tests.hostile.harness import assert_fails_cleanly, assert_no_traceback, deploykit, snapshot


@contextlib.contextmanager
def tmpfs(where: Path, size: str):
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs was refused: {done.stderr.strip()[:200]}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


# The wide model's run needs ~700 KB: these sizes fail in ingest, surgery, build and publishing.
SIZES = [
    pytest.param("100k"),
    pytest.param("250k", marks=pytest.mark.slow),
    pytest.param("400k"),
    pytest.param("500k", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("size", SIZES)
def test_a_full_disk_is_exit_3_and_leaves_a_store_that_verifies(size, tmp_path):
    model = models.save(models.wide(), tmp_path / "wide.onnx")
    with tmpfs(tmp_path / "small", size) as disk:
        store = disk / "store"
        run = deploykit("convert", model, "-w", store, "--set", "gate.iterations=5", "--set", "gate.warmup_s=0")
        assert_fails_cleanly(run, 3, "disk full")
        verify = deploykit("artifacts", "verify", "-w", store)
        assert verify.code == 0, str(verify)
        assert [p for p in (store / "tmp").iterdir()] == []  # no temporary of the failed run is left


@pytest.mark.e2e
def test_temporaries_of_the_quantizers_live_in_the_workdir(project, tmp_path):
    """$TMPDIR points into the store while a run lasts: ORT's and ModelOpt's temp folders go there."""
    cfg, store = project
    (tmp_path / "calib").mkdir()
    import numpy as np

    for i in range(3):
        np.save(tmp_path / "calib" / f"s{i}.npy", np.random.default_rng(i).random((1, 3, 8, 8), np.float32))
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    run = deploykit(
        "quantize",
        cfg,
        "--precision",
        "int8",
        "--calib-data",
        tmp_path / "calib",
        "-w",
        store,
        env={"TMPDIR": str(system_tmp)},
    )
    assert run.code == 0, str(run)
    assert list(system_tmp.iterdir()) == []
    assert list((store / "tmp").iterdir()) == []


@pytest.mark.skipif(
    os.geteuid() == 0 and subprocess.run(["which", "chattr"], capture_output=True).returncode,
    reason="root without chattr cannot make a read-only folder",
)
def test_a_read_only_workdir_is_exit_3(project, tmp_path):
    cfg, _ = project
    ro = tmp_path / "ro"
    ro.mkdir()
    made = (
        subprocess.run(["chattr", "+i", str(ro)], capture_output=True).returncode == 0
        if os.geteuid() == 0
        else not ro.chmod(0o555)
    )
    if not made:
        pytest.skip("this filesystem has no immutable attribute")
    try:
        assert_fails_cleanly(deploykit("convert", cfg, "-w", ro / "store"), 3, "not writable")
    finally:
        subprocess.run(["chattr", "-i", str(ro)], capture_output=True)
        ro.chmod(0o755)


def test_a_stage_past_its_time_limit_is_exit_3(project):
    cfg, store = project
    before = snapshot(store)
    run = deploykit(
        "convert",
        cfg,
        "-w",
        store,
        "--rerun",
        "gate",
        "--set",
        "gate.iterations=10000000",
        "--set",
        "limits.stage_timeouts={gate: 2}",
        timeout=120,
    )
    assert_fails_cleanly(run, 3, "stage gate", "time limit of 2 s")
    assert snapshot(store) == before


@pytest.mark.parametrize(
    "content",
    [b"", b"\x7fELF\x02\x01", b"\x7fELF\x02\x01" + b"\0" * 60 + b"\xff" * 100, b"#!/bin/sh\necho hi\n"],
    ids=["empty", "header-only", "garbage", "script"],
)
def test_a_plugin_library_that_is_not_one(tmp_path, content):
    lib = tmp_path / "libplugin.so"
    lib.write_bytes(content)
    assert_fails_cleanly(deploykit("plugins", "check", lib), 4, str(lib))


def test_a_plugin_path_that_is_a_folder(tmp_path):
    assert_fails_cleanly(deploykit("plugins", "check", tmp_path), 4, str(tmp_path))


def test_a_reused_gate_says_when_it_was_measured(project):
    cfg, store = project
    run = deploykit("convert", cfg, "-w", store)
    assert run.code == 0, str(run)
    assert_no_traceback(run)
    assert "measurement from" in run.out and "reused" in run.out
