"""Flags that follow trtexec/Polygraphy habits, config merging and blame, the public API's names."""

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from deploykit.api import resolve_config
from deploykit.config import load_config
from deploykit.errors import ConfigError, UsageError
from tests.cli.console import SRC, assert_one_error
from tests.cli.console import deploykit as run
from tests.conftest import TINY_CONFIG


@pytest.fixture
def onnx_model(tmp_path):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "m.onnx")
    return tmp_path / "m.onnx"


def test_shapes_set_the_named_dims_as_trtexec_takes_them(onnx_model, tmp_path):
    cfg = resolve_config(onnx_model, shapes={"x": {"min": (1, 8), "opt": (4, 8), "max": (8, 8)}})
    assert (cfg.dims["batch"].min, cfg.dims["batch"].opt, cfg.dims["batch"].max) == (1, 4, 8)
    fixed = resolve_config(onnx_model, shapes={"x": {"min": (2, 8), "opt": (2, 8), "max": (2, 8)}})
    assert (fixed.dims["batch"].min, fixed.dims["batch"].max) == (2, 2)
    with pytest.raises(UsageError, match="axis 1 of 'x' is fixed at 8"):
        resolve_config(onnx_model, shapes={"x": {"opt": (1, 9)}})
    with pytest.raises(UsageError, match="no input named 'images'; the inputs are x"):
        resolve_config(onnx_model, shapes={"images": {"opt": (1, 8)}})
    yaml_cfg = tmp_path / "tiny" / "deploykit.yaml"
    yaml_cfg.parent.mkdir()
    yaml_cfg.write_text(TINY_CONFIG.replace("EXPORTER", "dynamo"))
    assert (
        resolve_config(yaml_cfg, shapes={"x": {"min": (2, 3, 16, 16), "opt": (2, 3, 16, 16), "max": (3, 3, 16, 16)}})
        .dims["batch"]
        .max
        == 3
    )


def test_shapes_iterations_and_warmup_reach_the_run(onnx_model, tmp_path):
    import json

    proc = run(
        "gate",
        str(onnx_model),
        "-w",
        str(tmp_path / "store"),
        "--shapes",
        "x:2x8",
        "--iterations",
        "7",
        "--warmup",
        "1",
        "--log-format",
        "json",
        "--report-dir",
        str(tmp_path / "r"),
    )
    assert proc.returncode == 0, proc.stderr
    gate = json.loads((tmp_path / "r" / "gate.json").read_text())
    assert gate["iterations"] == 7 and gate["latency"]["n"] == 7 * gate["trials_count"]
    assert gate["fps"] > 0 and len(gate["fps_trials"]) == gate["trials_count"]  # wall-clock throughput
    assert json.loads(proc.stdout)["verdict"] == "PASS"


def test_a_preset_override_merges_into_the_preset(tmp_path):
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text(TINY_CONFIG.replace("EXPORTER", "dynamo"))
    q = load_config(cfg, {"quantize.tolerances.int8.rel_l2": 0.045}).quantize
    assert (q.tolerances.int8.rel_l2, q.tolerances.int8.cosine) == (0.045, 0.995)  # cosine kept from the preset
    proc = run("config", "show", str(cfg), "--set", "quantize.tolerances.int8.rel_l2=0.045")
    assert proc.returncode == 0 and "rel_l2: 0.045\n      cosine: 0.995" in proc.stdout


def test_a_bad_override_is_blamed_on_the_override_not_the_file(tmp_path):
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text(TINY_CONFIG.replace("EXPORTER", "dynamo"))
    with pytest.raises(ConfigError) as e:
        load_config(cfg, {"quantize.precision": "INT8"})
    assert (
        e.value.message.startswith("override quantize.precision='INT8'") and "(did you mean 'int8'?)" in e.value.message
    )
    with pytest.raises(ConfigError, match=r"deploykit.yaml: config.export.exporter"):  # the file's own mistake
        load_config(cfg, {"quantize.precision": "int8"}) if False else _bad_file(cfg)


def _bad_file(cfg):
    cfg.write_text(TINY_CONFIG.replace("EXPORTER", "dynamoo"))
    return load_config(cfg, {"quantize.precision": "int8"})


def test_a_missing_plugin_library_in_the_config_fails_before_anything_runs(onnx_model, tmp_path):
    import deploykit

    with pytest.raises(ConfigError, match=r"build.plugins: .*nonexistent.so: no such file"):
        deploykit.convert(onnx_model, workdir=tmp_path / "store", overrides={"build.plugins": ["/nonexistent.so"]})
    assert not list((tmp_path / "store" / "objects").iterdir())


def test_a_timing_cache_file_is_refused_for_a_backend_without_one(onnx_model, tmp_path):
    proc = run("build", str(onnx_model), "-w", str(tmp_path / "s"), "--timing-cache", str(tmp_path / "t.cache"))
    assert_one_error(proc, 2, "build.tensorrt.timing_cache_file", "onnxruntime backend keeps no timing cache")


def test_surgery_errors_name_the_users_file_once(onnx_model, tmp_path):
    proc = run("surgery", str(onnx_model), "-w", str(tmp_path / "s"), "--pass", 'set_dims={"x": [1, 8, 3]}')
    line = assert_one_error(proc, 2, str(onnx_model), "pass 'set_dims'")
    assert "objects/" not in proc.stderr + proc.stdout
    assert (proc.stdout + proc.stderr).count("pass 'set_dims'") == 1, proc.stdout + proc.stderr
    assert "result: ERROR (exit 2)" in proc.stdout and line


@pytest.mark.parametrize(
    "first",
    [
        "import deploykit.surgery.runner; import deploykit",
        "import deploykit; import deploykit.surgery.registry",
        "from deploykit import surgery as deploykit_surgery; import deploykit",
    ],
)
def test_deploykit_surgery_is_the_api_function_whatever_was_imported_first(first):
    code = (
        f"{first}\nfrom deploykit.errors import ConfigError\n"
        "try:\n    deploykit.surgery('/nonexistent/deploykit.yaml')\n"
        "except ConfigError as e:\n    print('api:', e.message)\n"
        "print(deploykit.surgery.registry.__name__ if hasattr(deploykit.surgery, 'registry') else 'lazy')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "api: /nonexistent/deploykit.yaml: config file not found" in proc.stdout


NO_MODELOPT = """
import importlib.abc, importlib.util, sys

_find_spec = importlib.util.find_spec


class _NoModelOpt(importlib.abc.MetaPathFinder):  # a plain `pip install deploykit`: no ModelOpt to import
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "modelopt":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoModelOpt())
importlib.util.find_spec = lambda name, package=None: (
    None if name.split(".")[0] == "modelopt" else _find_spec(name, package))
"""


@pytest.mark.parametrize(
    "flags",
    [("--precision", "fp8"), ("--precision", "int8", "--set", "quantize.target=tensorrt"), ("--precision", "fp16")],
)
def test_without_modelopt_a_quantizer_that_needs_it_is_one_line_exit_3(onnx_model, tmp_path, flags):
    """Through the console script of an install without the quant extra (ModelOpt hidden from it)."""
    (tmp_path / "hide").mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(NO_MODELOPT)
    proc = run(
        "convert",
        str(onnx_model),
        "-w",
        str(tmp_path / "s"),
        "--set",
        "calibration.files=calib",
        *flags,
        extra_path=(tmp_path / "hide",),
    )
    assert_one_error(proc, 3, "needs NVIDIA ModelOpt")
    assert "hint: pip install 'deploykit[quant]'" in proc.stderr
    assert not (tmp_path / "s" / "objects").exists() or not list((tmp_path / "s" / "objects").iterdir())


def test_duration_sets_the_timed_seconds(onnx_model, tmp_path):
    import json

    proc = run(
        "gate",
        str(onnx_model),
        "-w",
        str(tmp_path / "store"),
        "--iterations",
        "5",
        "--warmup",
        "1",
        "--duration",
        "1.0",
        "--report-dir",
        str(tmp_path / "r"),
    )
    assert proc.returncode == 0, proc.stderr
    gate = json.loads((tmp_path / "r" / "gate.json").read_text())
    assert gate["iterations"] > 50 and gate["latency"]["n"] == gate["iterations"] * gate["trials_count"]


@pytest.mark.e2e
def test_every_stage_command_takes_rerun(onnx_model, tmp_path):
    """``--rerun STAGE`` on each stage command runs that stage again where the store already holds it."""
    import json

    calib = tmp_path / "calib"
    calib.mkdir()
    for i in range(8):
        np.save(calib / f"s{i}.npy", np.random.default_rng(i).standard_normal((1, 8)).astype(np.float32))
    common = ("-w", str(tmp_path / "store"), "--log-format", "json")
    quant = ("--precision", "int8", "--calib-data", str(calib), "--set", "quantize.check_samples=2")
    assert run("gate", str(onnx_model), *common).returncode == 0
    assert run("quantize", str(onnx_model), *common, *quant).returncode == 0
    for command, stage, extra in (
        ("surgery", "surgery", ()),
        ("build", "build", ()),
        ("parity", "parity", ()),
        ("gate", "gate", ()),
        ("quantize", "quantize", quant),
    ):
        proc = run(command, str(onnx_model), *common, *extra, "--rerun", stage)
        assert proc.returncode == 0, (command, proc.stderr)
        status = {s["stage"]: s["status"] for s in json.loads(proc.stdout)["stages"]}
        assert status[stage] == "ran" and status["ingest"] == "reused", (command, status)


def test_profile_and_matrix_pass_overrides_as_given(onnx_model, tmp_path):
    """--set reaches `profile` and `matrix` as dotted keys, unchanged: a key holding ``__`` (a target
    named edge__box) is not split into two levels by a re-encoding on the way."""
    import json

    edge = ("--set", "gate.targets.edge__box.fps=1")
    proc = run(
        "profile",
        str(onnx_model),
        "-w",
        str(tmp_path / "store"),
        "--dim",
        "batch=1,2,2",
        "--iterations",
        "3",
        "--warmup",
        "1",
        "--no-roofline",
        "--json",
        *edge,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["layers"][0]["op_type"] == "MatMul"
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "deploykit.yaml").write_text(
        "name: net\nsource: {onnx: ../m.onnx}\ninputs: [{name: x, shape: [batch, 8]}]\n"
        "dims: {batch: {min: 1, opt: 1, max: 2}}\nparity: {samples: 1}\n"
        "gate: {warmup: 1, warmup_s: 0.0, iterations: 5, trials: 1, targets: {default: {fps: 1}}}\n"
    )
    (tmp_path / "matrix.yaml").write_text(
        "models: [net/deploykit.yaml]\nprecisions: [fp32]\ntargets: [{name: cpu, backend: onnxruntime}]\n"
    )
    proc = run(
        "matrix",
        str(tmp_path / "matrix.yaml"),
        "-w",
        str(tmp_path / "store"),
        "-j",
        "1",
        "--report-dir",
        str(tmp_path / "report"),
        "--log-format",
        "json",
        *edge,
    )
    assert proc.returncode == 0, proc.stderr
    [cell] = json.loads((tmp_path / "report" / "matrix.json").read_text())["cells"]
    assert cell["status"] == "passed", cell
    assert_one_error(
        run("profile", str(onnx_model), "-w", str(tmp_path / "store"), "--set", "gate.targets.edge.box=1"),
        2,
        "gate.targets.edge",
    )  # the same key split in two is an invalid config, as it was
