"""Hostile inputs to ``profile``, ``--plugins`` and calibration folders, and third-party output:

* ``profile --batch`` a model (or an engine folder) cannot take is refused, as the gate refuses it;
* a library passed with ``--plugins`` is checked as ``plugins check`` checks it, whichever backend runs;
* a FIFO (or a socket, a device link) in a calibration folder is never opened, and the run says which;
* what a library logs (ONNX Runtime's tracebacks on a full disk), warns or prints on stderr during a
  stage, ``profile``, ``inspect`` or ``lint`` goes to WORKDIR/third-party.log; deploykit's own lines
  (progress, warnings, verdicts, the error line) still reach the terminal.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import textwrap
import warnings
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


@pytest.mark.parametrize("size", ["450k", pytest.param("400k", marks=pytest.mark.slow)])
def test_a_full_disk_in_quantize_prints_no_library_traceback(tmp_path, size):
    """ONNX Runtime's quant_pre_process logged two tracebacks above the exit-3 line on a full disk (at
    600k and 750k, before its steps ran in memory and wrote less, then 450k and 500k, before its quantizer
    read the model from memory; these sizes fill the disk in quantize now: 480k no longer does)."""
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


CHATTY_PASS = """
import sys
import traceback
import warnings


def chatty(model):
    warnings.warn("declared shape [] contradicts inference (CHATTY-WARN)", UserWarning)
    print('Traceback (most recent call last):\\n  File "shape_inference.py", line 1, in infer\\n'
          'OSError: [Errno 28] No space left on device (CHATTY-PRINT)', file=sys.stderr)
    sys.stderr.write("a line in ")
    sys.stderr.write("two writes (CHATTY-WRITE)\\n")
    return model


def failing(model):
    chatty(model)
    try:
        raise OSError(28, "No space left on device (CHATTY-EXC)")
    except OSError:
        traceback.print_exc()
    raise RuntimeError("the pass gave up")
"""
CHATTY = ("CHATTY-WARN", "CHATTY-PRINT", "CHATTY-WRITE")


def _chatty(cfg: Path, function: str) -> dict[str, str]:
    """The config with a user pass that warns and prints a traceback on stderr; the env that imports it."""
    (cfg.parent / "chatty.py").write_text(textwrap.dedent(CHATTY_PASS))
    cfg.write_text(cfg.read_text() + f"surgery: {{passes: [sanitize, 'chatty:{function}']}}\n")
    return {"PYTHONPATH": os.pathsep.join([str(SRC), str(cfg.parent)])}


def _assert_filed(run, log: Path, marks: tuple[str, ...]) -> str:
    """None of ``marks`` on the terminal, each in the log file; returns the log."""
    assert_no_traceback(run)
    for mark in marks:
        assert mark not in run.out and mark not in run.err, f"{mark} reached the terminal\n{run}"
    text = log.read_text()
    for mark in marks:
        assert mark in text, f"{mark} not in {log}:\n{text}"
    return text


def test_what_third_party_code_warns_or_prints_in_a_stage_goes_to_the_log_file(project):
    cfg, store = project
    run = deploykit("convert", cfg, "-w", store, "--rerun", "surgery", env=_chatty(cfg, "chatty"))
    assert run.code == 0, str(run)
    log = _assert_filed(run, store / "third-party.log", CHATTY)
    assert "chatty WARNING: UserWarning: declared shape [] contradicts inference (CHATTY-WARN)" in log
    assert "chatty STDERR: a line in two writes (CHATTY-WRITE)" in log  # one line, one header
    assert "surgery ran" in run.err and "result: PASS" in run.out  # deploykit's own lines are untouched


def test_a_stage_error_after_third_party_output_is_one_clean_line(project):
    cfg, store = project
    run = deploykit("convert", cfg, "-w", store, env=_chatty(cfg, "failing"))
    line = assert_fails_cleanly(run, 2, "chatty:failing", "the pass gave up")
    assert "CHATTY" not in line and "surgery failed" in run.err
    _assert_filed(run, store / "third-party.log", (*CHATTY, "CHATTY-EXC"))


NOISY_LIBRARY = """
import sys
import warnings

import onnx.shape_inference
import onnxruntime

_infer = onnx.shape_inference.infer_shapes


def infer_shapes(*args, **kwargs):
    warnings.warn("a declared shape contradicts inference (LIB-WARN)", UserWarning)
    print("Traceback (most recent call last):\\nRuntimeError: shape inference (LIB-PRINT)", file=sys.stderr)
    return _infer(*args, **kwargs)


class InferenceSession(onnxruntime.InferenceSession):
    def __init__(self, *args, **kwargs):
        warnings.warn("session options ignored (LIB-SESSION-WARN)", UserWarning)
        sys.stderr.write("Traceback (most recent call last):\\nRuntimeError: session (LIB-SESSION-PRINT)\\n")
        super().__init__(*args, **kwargs)


onnx.shape_inference.infer_shapes = infer_shapes
onnxruntime.InferenceSession = InferenceSession
"""


def _noisy_library(folder: Path) -> dict[str, str]:
    """An env whose interpreters start with onnx's shape inference and ONNX Runtime's sessions warning
    and printing a traceback on stderr (as a library does, from its own module)."""
    site = folder / "site"
    site.mkdir()
    (site / "noisylib.py").write_text(textwrap.dedent(NOISY_LIBRARY))
    (site / "sitecustomize.py").write_text("import noisylib  # noqa: F401\n")
    return {"PYTHONPATH": os.pathsep.join([str(SRC), str(site)])}


@pytest.mark.parametrize("command", ["inspect", "lint", "profile"])
def test_what_a_library_says_outside_the_pipeline_goes_to_the_log_file(project, tmp_path, command):
    """profile (its timing runs after the pipeline), inspect and lint of an .onnx run library code themselves."""
    cfg, store = project
    model = cfg.parent / "model.onnx"
    args, log, own = {
        "inspect": (("inspect", model), tmp_path / ".deploykit" / "third-party.log", "ONNX Runtime (CPU): loads"),
        "lint": (("lint", model, "-w", store), store / "third-party.log", "result: PASS"),
        "profile": (_profile(cfg, store), store / "third-party.log", "sum of layer times"),
    }[command]
    run = deploykit(*args, cwd=tmp_path, env=_noisy_library(tmp_path))
    assert run.code == 0, str(run)
    said = _assert_filed(run, log, ("LIB-SESSION-WARN", "LIB-SESSION-PRINT") if command != "lint" else ())
    if command != "profile":  # profile reuses the stored graph: no shape inference
        _assert_filed(run, log, ("LIB-WARN", "LIB-PRINT"))
    assert "noisylib WARNING: UserWarning:" in log.read_text() and own in run.out, f"{said}\n{run}"


def test_the_speaker_is_read_from_the_stack_not_from_the_warnings_file(tmp_path, capsys):
    """A library's warning attributed to deploykit's line (stacklevel=2) is still the library's; deploykit's
    own warnings and writes pass on to whoever shows them (here pytest), and the hooks go when the block ends."""
    from deploykit.safety import thirdparty

    def module(name: str, body: str) -> dict:
        scope = {"__name__": name, "sys": sys, "warnings": warnings}
        exec(compile(textwrap.dedent(body), f"<{name}>", "exec"), scope)
        return scope

    lib = module(
        "somelib", "def speak():\n    warnings.warn('LIB', stacklevel=2)\n    sys.stderr.write('LIB-OUT\\n')\n"
    )
    own = module(
        "deploykit.fake",
        "def speak(lib):\n    lib()\n    warnings.warn('OWN', UserWarning)\n    sys.stderr.write('OWN-OUT\\n')\n",
    )
    stderr, show = sys.stderr, warnings.showwarning
    with pytest.warns(UserWarning) as caught, thirdparty.logged_to(tmp_path):
        own["speak"](lib["speak"])
        with thirdparty.logged_to(tmp_path / "."):  # nested on the same file (profile around its build)
            logging.getLogger("somelib").warning("LIB-LOG")
    assert [str(w.message) for w in caught] == ["OWN"]
    assert capsys.readouterr().err == "OWN-OUT\n"
    log = (tmp_path / "third-party.log").read_text()
    assert "somelib WARNING: UserWarning: LIB (<deploykit.fake>:" in log and "somelib STDERR: LIB-OUT" in log
    assert "OWN" not in log and log.count("LIB-LOG") == 1
    assert sys.stderr is stderr and warnings.showwarning is show
