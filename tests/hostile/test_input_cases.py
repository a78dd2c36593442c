"""Hostile inputs to ``profile``, ``--plugins`` and calibration folders, and third-party output:

* ``profile --batch`` a model (or an engine folder) cannot take is refused, as the gate refuses it;
* a library passed with ``--plugins`` is checked as ``plugins check`` checks it, whichever backend runs;
* a FIFO (or a socket, a device link) in a calibration folder is never opened, and the run says which;
* what a library logs (ONNX Runtime's tracebacks on a full disk) goes to WORKDIR/third-party.log.
"""

from __future__ import annotations

import os
import socket
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.hostile import models
from tests.hostile.harness import SRC, Suite, assert_fails_cleanly, assert_no_traceback, deploykit
from tests.hostile.test_environment_cases import tmpfs

suite = Suite()


def _static(folder: Path) -> Path:
    """The conv model with its batch fixed at 1 (as a PP-OCR export or a TensorRT-ready graph is)."""
    model = models.conv()
    for vi in (*model.graph.input, *model.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = 1
    return models.save(model, folder / "static.onnx")


def _profile(source: Path, store: Path, *args: str) -> tuple:
    return ("profile", source, "-w", store, "--iterations", "2", "--warmup", "1", "--no-roofline", *args)


for _batch, _names in (
    ("0", ("--batch", "batch range [1, 1]")),
    ("100000000", ("--batch", "100000000", "'x'")),
    ("2", ("--batch", "'x'")),
    ("-1", ("--batch",)),
):
    suite.case(f"profile-static-batch-{_batch}", 2, *_names, slow=_batch not in ("0", "100000000"))(
        lambda folder, cfg, store, files, _b=_batch: [_profile(_static(folder), store, "--batch", _b)]
    )
for _batch in ("0", "3", "100000000"):  # the config's dims: batch 1..2
    suite.case(f"profile-config-batch-{_batch}", 2, "--batch", "batch range [1, 2]", slow=True)(
        lambda folder, cfg, store, files, _b=_batch: [_profile(cfg, store, "--batch", _b)]
    )


def _engine(folder: Path, store: Path, model: Path) -> Path:
    """An engine folder (as `deploykit build -o DIR` writes it) built from ``model``."""
    import shutil

    import deploykit

    shutil.copytree(deploykit.build(model, workdir=store).artifacts["engine"].path, folder / "engine")
    return folder / "engine"


@suite.case("profile-engine-fixed-batch", 2, "--batch 4", "fixed batch of 1")
def _engine_fixed(folder, cfg, store, files):
    return [_profile(_engine(folder, store, _static(folder)), store, "--batch", "4")]


@suite.case("profile-engine-batch-0", 2, "--batch 0", "at least 1", slow=True)
def _engine_zero(folder, cfg, store, files):
    return [_profile(_engine(folder, store, _static(folder)), store, "--batch", "0")]


@suite.case("profile-engine-dynamic-huge-batch", 2, "--batch 100000000", "MiB", slow=True)
def _engine_huge(folder, cfg, store, files):
    return [_profile(_engine(folder, store, cfg.parent / "model.onnx"), store, "--batch", "100000000")]


# -- --plugins on the ONNX Runtime backend ------------------------------------------------------------

PLUGIN_FILES = {
    "empty": b"",
    "text": b"not a library\n",
    "script": b"#!/bin/sh\necho hi\n",
    "elf-header-only": b"\x7fELF\x02\x01",
    "elf-32-bit": b"\x7fELF\x01\x01" + b"\0" * 80,
    "elf-no-symbols": b"\x7fELF\x02\x01\x01" + b"\0" * 0x3D,
}


def _plugin_case(kind: str, content: bytes) -> None:
    @suite.case(f"plugins-ort-{kind}", 4, "libplugin.so", slow=kind not in ("empty", "text"))
    def make(folder, cfg, store, files):
        lib = folder / "libplugin.so"
        lib.write_bytes(content)
        return [
            ("convert", cfg, "-w", store, "--plugins", lib),
            ("build", cfg, "-w", store, "--plugins", lib),
            ("plugins", "check", lib),
        ]


for _kind, _content in PLUGIN_FILES.items():
    _plugin_case(_kind, _content)


@suite.case("plugins-in-config-text-file", 4, "build.plugins", "libplugin.so", slow=True)
def _plugins_config(folder, cfg, store, files):
    (folder / "project" / "libplugin.so").write_text("text\n")
    cfg.write_text(cfg.read_text() + "build: {plugins: [libplugin.so]}\n")
    return [("convert", cfg, "-w", store)]


# -- calibration data that is not a regular file ------------------------------------------------------


@suite.case("calib-files-is-a-fifo", 4, "calib.npy", "named pipe", timeout=60)
def _calib_fifo(folder, cfg, store, files):
    os.mkfifo(folder / "calib.npy")
    return [("quantize", cfg, "--precision", "int8", "--calib-data", folder / "calib.npy", "-w", store)]


@suite.case("calib-config-files-is-a-fifo", 4, "calib.npz", "named pipe", timeout=60, slow=True)
def _calib_cfg_fifo(folder, cfg, store, files):
    os.mkfifo(folder / "project" / "calib.npz")
    cfg.write_text(cfg.read_text() + "calibration: {files: calib.npz}\nquantize: {precision: int8}\n")
    return [("convert", cfg, "-w", store)]


suite.in_default_suite(
    {
        "profile-static-batch-0",
        "profile-static-batch-100000000",
        "profile-engine-fixed-batch",
        "plugins-ort-empty",
        "plugins-ort-text",
        "calib-files-is-a-fifo",
    }
)


@pytest.fixture(scope="module")
def outcomes(request, built, tmp_path_factory):
    return suite.run_selected(request, tmp_path_factory.mktemp("input-cases"), built)


@pytest.mark.parametrize("case", suite.params())
def test_hostile_input(case, outcomes):
    suite.check(outcomes[case])


def _image(path: Path, seed: int) -> None:
    from PIL import Image

    Image.fromarray((np.random.default_rng(seed).random((8, 8, 3)) * 255).astype(np.uint8)).save(path)


SPECIAL = {
    "fifo": lambda p: os.mkfifo(p),
    "socket": lambda p: socket.socket(socket.AF_UNIX).bind(str(p)),
    "dangling-link": lambda p: p.symlink_to(p.parent / "gone.png"),
    "link-to-fifo": lambda p: (os.mkfifo(p.parent / "pipe"), p.symlink_to(p.parent / "pipe")),
    "link-to-dev-zero": lambda p: p.symlink_to("/dev/zero"),
}


@pytest.mark.parametrize(
    "kind",
    [pytest.param(k, marks=[] if k in ("fifo", "link-to-dev-zero") else [pytest.mark.slow]) for k in SPECIAL],
)
def test_a_calibration_folder_entry_that_is_not_a_file_is_skipped_and_named(project, tmp_path, kind):
    cfg, store = project
    calib = tmp_path / "calib"
    calib.mkdir()
    _image(calib / "a.png", 0)
    _image(calib / "c.png", 1)
    SPECIAL[kind](calib / "b.png")
    run = deploykit("quantize", cfg, "--precision", "int8", "--calib-data", calib, "-w", store, timeout=120)
    assert run.code == 0, str(run)
    assert_no_traceback(run)
    said = [ln for ln in run.err.splitlines() if "skipped 1 entry" in ln]
    assert len(said) == 1 and str(calib / "b.png") in said[0], run.err


# -- third-party output ---------------------------------------------------------------------------------

NOISY_PASS = """
import logging
import traceback


def noisy(model):
    try:
        raise OSError(28, "No space left on device")
    except OSError:
        logging.getLogger("onnxruntime.quantization.shape_inference").error(traceback.format_exc())
    return model
"""


def _noisy(cfg: Path) -> dict[str, str]:
    """The config with a user pass that logs as ONNX Runtime does on a full disk; the env that imports it."""
    (cfg.parent / "noisy.py").write_text(textwrap.dedent(NOISY_PASS))
    cfg.write_text(cfg.read_text() + "surgery: {passes: [sanitize, 'noisy:noisy']}\n")
    return {"PYTHONPATH": os.pathsep.join([str(SRC), str(cfg.parent)])}


def test_what_a_library_logs_goes_to_the_log_file_not_the_terminal(project):
    cfg, store = project
    run = deploykit("convert", cfg, "-w", store, env=_noisy(cfg))
    assert run.code == 0, str(run)
    assert_no_traceback(run)
    log = (store / "third-party.log").read_text()
    assert "onnxruntime.quantization.shape_inference ERROR" in log and "No space left on device" in log


def test_the_log_file_is_never_written_through_a_link(project, tmp_path):
    cfg, store = project
    env = _noisy(cfg)
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (store / "third-party.log").symlink_to(victim)
    run = deploykit("convert", cfg, "-w", store, env=env)
    assert run.code == 0, str(run)
    assert victim.read_text() == "mine\n"


@pytest.mark.parametrize("size", ["600k", pytest.param("750k", marks=pytest.mark.slow)])
def test_a_full_disk_in_quantize_prints_no_library_traceback(tmp_path, size):
    """ONNX Runtime's quant_pre_process logged two tracebacks above the exit-3 line at these sizes."""
    model = models.save(models.wide(), tmp_path / "wide.onnx")
    shape = [d.dim_value or 1 for d in onnx.load(str(model)).graph.input[0].type.tensor_type.shape.dim]
    (tmp_path / "calib").mkdir()
    for i in range(4):
        np.save(tmp_path / "calib" / f"s{i}.npy", np.random.default_rng(i).random([1, *shape[1:]], np.float32))
    with tmpfs(tmp_path / "small", size) as disk:
        run = deploykit(
            "quantize", model, "--precision", "int8", "--calib-data", tmp_path / "calib", "-w", disk / "store"
        )
        assert_fails_cleanly(run, 3, "disk full")
