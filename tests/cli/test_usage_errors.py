"""Usage errors through the installed console script: one ``error:`` line (plus the usage as the
hint), exit 2, never a traceback — and never an import of ``click`` (typer >= 0.29 vendors it)."""

import json

import pytest

import deploykit
from tests.cli.console import assert_one_error
from tests.cli.console import deploykit as run


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("convert", "x.yaml", "--precison", "int8"), ("no such option --precison", "did you mean --precision?")),
        (("convrt",), ("No such command 'convrt'", "Did you mean 'convert'?")),
        (("gate", "--fps", "abc", "x.yaml"), ("'--fps'", "valid number")),
        (("convert", "x.yaml", "--precision", "INT8"), ("--precision 'INT8'", "(did you mean 'int8'?)", "fp16 | int8")),
        (("convert", "x.yaml", "--precision", "int9"), ("--precision 'int9'", "(did you mean 'int8'?)")),
        (("convert", "x.yaml", "--backend", "tensorrtt"), ("--backend 'tensorrtt'", "(did you mean 'tensorrt'?)")),
        (("quantize", "x.yaml", "--precision", "fp32"), ("--precision 'fp32'", "fp16 | int8 | fp8 | int4")),
        (("convert", "x.yaml", "--shapes", "x:1xax3"), ("--shapes 'x:1xax3'", "input:DxDx")),
        (("convert", "x.yaml", "--dim", "batch=4,1"), ("--dim 'batch=4,1'",)),
        (("convert", "x.yaml", "--shapes", "x:1x0x3"), ("--shapes 'x:1x0x3'", "from 1 to 2147483647")),
        (("convert", "x.yaml", "--dim", "batch=1,1,99999999999"), ("--dim 'batch=1,1,99999999999'", "<= 2147483647")),
    ],
)
def test_a_usage_error_is_one_line_and_exit_2(args, needles):
    proc = run(*args)
    assert_one_error(proc, 2, *needles)
    assert f"deploykit {args[0]} --help" in proc.stderr or "see `deploykit --help`" in proc.stderr  # where help is


def test_the_cli_never_imports_click(tmp_path):
    """A fresh resolve of typer >= 0.29 has no top-level click: importing it must never be needed."""
    (tmp_path / "click").mkdir()
    (tmp_path / "click" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'click'\")\n")
    proc = run("convert", "x.yaml", "--precison", "int8", extra_path=(tmp_path,))
    assert_one_error(proc, 2, "did you mean --precision?")
    assert run("--version", extra_path=(tmp_path,)).returncode == 0


def test_version():
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"deploykit {deploykit.__version__}"


def test_bare_deploykit_prints_the_help_and_exits_2():
    proc = run()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "Usage: deploykit" in proc.stdout and "convert" in proc.stdout and "--version" in proc.stdout


def test_json_log_format_reports_a_usage_error_as_json():
    proc = run("convert", "x.yaml", "--precision", "int9", "--log-format", "json")
    assert proc.returncode == 2
    result = json.loads(proc.stdout)  # stdout holds exactly one JSON object
    assert result["exit_code"] == 2 and "did you mean 'int8'" in result["error"]
    event = json.loads(proc.stderr.strip().splitlines()[-1])
    assert event["event"] == "error" and event["exit_code"] == 2


CRASH = """
import ctypes
from torch import nn


def build():
    ctypes.string_at(0)  # SIGSEGV in native code: only the supervising parent is left to say so
    return nn.Identity()
"""


def test_json_log_format_reports_a_crash_the_supervisor_saw_as_json(tmp_path):
    (tmp_path / "crash.py").write_text(CRASH)
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text('name: crash\nsource: {factory: "crash:build"}\ninputs: [{name: x, shape: [1, 4]}]\n')
    proc = run(
        "export", str(cfg), "-w", str(tmp_path / "store"), "--log-format", "json", cwd=tmp_path, extra_path=(tmp_path,)
    )
    assert proc.returncode == 70 and "Traceback" not in proc.stderr, proc.stderr
    result = json.loads(proc.stdout)  # stdout holds exactly one JSON object: the error
    assert result["schema"] == "deploykit.error/1" and result["exit_code"] == 70
    assert "native code crashed (SIGSEGV)" in result["error"] and "stage export" in result["error"]
    event = json.loads(proc.stderr.strip().splitlines()[-1])
    assert event["event"] == "error" and event["exit_code"] == 70


def test_a_missing_config_is_blamed_on_the_file_and_a_bad_override_on_the_override(tmp_path):
    assert_one_error(run("convert", str(tmp_path / "nope.yaml")), 2, "nope.yaml: config file not found")
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text("name: m\nsource: {onnx: m.onnx}\ninputs: [{name: x, shape: [1, 3]}]\n")
    line = assert_one_error(run("config", "show", str(cfg), "--set", "quantize.precision=int9"), 2)
    assert line.startswith("error: override quantize.precision='int9'") and "(did you mean 'int8'?)" in line
    assert str(cfg) not in line


def test_build_with_a_missing_plugin_library_is_a_usage_error_and_makes_nothing(tmp_path):
    store = tmp_path / "store"
    proc = run("build", str(tmp_path / "m.onnx"), "-w", str(store), "--plugins", str(tmp_path / "nonexistent.so"))
    assert_one_error(proc, 2, "--plugins", "nonexistent.so: no such file")
    assert not (store / "objects").exists() or not list((store / "objects").iterdir())


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("convert x.yaml --precision i", ["int8", "int4"]),
        ("build m.onnx --backend t", ["tensorrt"]),
        ("quantize m.onnx --target o", ["onnxruntime"]),
    ],
)
def test_choices_complete_in_the_shell(words, expected):
    env = {
        "_DEPLOYKIT_COMPLETE": "complete_bash",
        "COMP_WORDS": f"deploykit {words}",
        "COMP_CWORD": str(len(words.split())),
    }
    proc = run(env=env)
    assert proc.returncode == 0 and proc.stdout.split() == expected, proc.stderr
