"""`deploykit lint` from the command line and the API, and the lint stage inside `convert`: its
verdict is a check of the run record that every view shows, and a TensorRT build without TensorRT
exits 3 only after the lint has run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import onnx
import pytest
from onnx import helper

import deploykit
from deploykit.record.model import RunRecord
from deploykit.report import junit, markdown
from deploykit.report.html import render_fragment
from tests.conftest import run_cli
from tests.lint.graphs import F, init, model, value

CONFIG = """
name: lintme
source: {{onnx: {model}}}
inputs: [{{name: x, shape: [batch, 3, 8, 8]}}]
dims: {{batch: {{min: 1, opt: 2, max: 4}}}}
build: {{backend: {backend}}}
parity: {{samples: 1, inconclusive: warn}}
gate: {{warmup: 1, iterations: 3, trials: 1, allow_missing_target: true}}
"""


def write_model(path: Path, refused: bool) -> Path:
    """y = relu(x) (and Det of x's first 2x2 pixels when ``refused``: ONNX Runtime runs Det, TensorRT does not)."""
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    outputs = [value("y", F, ["batch", 3, 8, 8])]
    inits = []
    if refused:
        nodes += [
            helper.make_node("Slice", ["x", "starts", "ends"], ["corner"], name="corner"),
            helper.make_node("Det", ["corner"], ["d"], name="det"),
        ]
        inits = [init("starts", np.zeros(4, np.int64)), init("ends", np.array([1, 1, 2, 2], np.int64))]
        outputs.append(value("d", F, [1, 1]))
    onnx.save(model(nodes, [value("x", F, ["batch", 3, 8, 8])], outputs, inits), path)
    return path


def config(tmp_path: Path, refused: bool, backend: str = "onnxruntime") -> Path:
    write_model(tmp_path / "model.onnx", refused)
    path = tmp_path / "deploykit.yaml"
    path.write_text(CONFIG.format(model="model.onnx", backend=backend))
    return path


@pytest.mark.parametrize(("refused", "code"), [(False, 0), (True, 4)])
def test_lint_a_model_file_exits_4_on_an_error(tmp_path, refused, code):
    path = write_model(tmp_path / "m.onnx", refused)
    got, out, err = run_cli("lint", str(path), "--dim", "batch=1,2,4", "--json")
    assert got == code, err
    report = json.loads(out)
    assert report["exit_code"] == code and [v["version"] for v in report["verdicts"]] == ["10.13", "11"]
    assert bool(report["findings"]) == refused
    if refused:
        (det,) = report["findings"]
        assert (det["node"], det["rule"], det["versions"]) == (
            "det",
            "op.unsupported",
            ["10.13", "11"],
        ) and det["fix"]
    human = run_cli("lint", str(path), "--for", "tensorrt=11")
    assert human[0] == code and "lint: TensorRT 11: " in human[1] and "10.13" not in human[1].split("lint:")[1]
    assert f"(exit {code})" in human[1]


def test_lint_refuses_a_target_that_is_not_tensorrt(tmp_path):
    code, _, err = run_cli("lint", str(write_model(tmp_path / "m.onnx", False)), "--for", "onnxruntime")
    assert code == 2 and "--for 'onnxruntime'" in err


def test_the_api_lints_a_file_and_a_config_alike(tmp_path):
    cfg = config(tmp_path, refused=True)
    direct = deploykit.lint(tmp_path / "model.onnx", versions=("11",), dims={"batch": (1, 2, 4)})
    piped = deploykit.lint(cfg, versions=("11",), workdir=tmp_path / "store")  # the graph after ingest + surgery
    assert direct.exit_code == piped.exit_code == 4
    assert [(f.rule, f.node) for f in direct.findings] == [(f.rule, f.node) for f in piped.findings]
    code, out, _ = run_cli("lint", str(cfg), "-w", str(tmp_path / "store"), "--json")  # reuses every artifact
    assert code == 4 and json.loads(out)["versions"] == ["10.13", "11"]


def views(record: RunRecord) -> dict[str, str]:
    return {
        "junit": junit.render(record),
        "markdown": markdown.render(record),
        "html": render_fragment(record),
    }


@pytest.mark.parametrize(("refused", "code"), [(False, 0), (True, 1)])
def test_convert_records_the_lint_as_a_check_in_every_view(tmp_path, refused, code):
    cfg = config(tmp_path, refused)
    got, out, err = run_cli(
        "convert",
        str(cfg),
        "-w",
        str(tmp_path / "store"),
        "--set",
        "lint.run=always",
        "--report-dir",
        str(tmp_path / "r"),
    )
    assert got == code, err
    status = "FAIL" if refused else "PASS"
    assert re.search(
        rf"^lint: {status} — TensorRT 10\.13: {int(refused)} errors?, 0 warnings; TensorRT 11: ", out, re.M
    )
    record = RunRecord.from_dict(json.loads((tmp_path / "r" / "run.json").read_text()))
    lint = record.group("lint")
    assert [c.name for c in lint] == ["TensorRT 10.13", "TensorRT 11"] and all(c.passed != refused for c in lint)
    assert record.exit_code == code and record.stage("lint").status == "ran"
    assert {c.group for c in record.failed_checks} <= {"lint", "parity"}
    suite = ET.fromstring(views(record)["junit"].split("?>", 1)[1])
    lint_cases = [c for c in suite.iter("testcase") if c.get("classname") == "deploykit.lintme.lint"]
    assert [c.get("name") for c in lint_cases] == ["TensorRT 10.13", "TensorRT 11"]
    assert [c.find("failure") is not None for c in lint_cases] == [refused, refused]
    assert re.search(rf"^### TensorRT lint — {status}$", views(record)["markdown"], re.M)
    assert ("det" in views(record)["markdown"]) == refused and "<h2>TensorRT lint</h2>" in views(record)["html"]


def test_a_tensorrt_build_without_tensorrt_exits_3_after_the_lint(tmp_path):
    from deploykit.backends.tensorrt import TensorRTBackend

    if TensorRTBackend().availability().available:
        pytest.skip("TensorRT works on this machine")
    cfg = config(tmp_path, refused=False, backend="tensorrt")
    code, out, err = run_cli("convert", str(cfg), "-w", str(tmp_path / "store"), "--report-dir", str(tmp_path / "r"))
    assert code == 3 and "tensorrt" in err.lower()
    assert "lint: PASS — TensorRT 10.13: 0 errors, 0 warnings; TensorRT 11: 0 errors, 0 warnings" in out
    record = RunRecord.from_dict(json.loads((tmp_path / "r" / "run.json").read_text()))
    assert [s.stage for s in record.stages][-2:] == ["lint", "build"] and record.stage("build").status == "failed"
    assert record.error_code == 3 and len(record.group("lint")) == 2


def test_the_lint_stage_is_skipped_for_graphs_not_bound_for_tensorrt(tmp_path):
    cfg = config(tmp_path, refused=True)
    result = deploykit.convert(cfg, workdir=tmp_path / "store")
    assert "lint" not in [s.stage for s in result.stages] and result.record.exit_code == 0


def test_lint_versions_per_target_key_the_stage(tmp_path):
    """A matrix target that sets lint.versions gets its own lint, shared by targets of the same versions."""
    from deploykit.config import load_config
    from deploykit.matrix.plan import shared_chain
    from deploykit.store.artifacts import Store

    cfg = config(tmp_path, refused=False, backend="tensorrt")
    store = Store(tmp_path / "store")

    def key(versions: list[str]) -> str:
        return dict(shared_chain(load_config(cfg, {"lint.versions": versions}), store))["lint"]

    assert key(["11"]) != key(["10.13"]) and key(["11"]) == key(["11"])
    assert "lint" in dict(shared_chain(load_config(cfg), store))  # device-independent: a shared step


def conv_config(tmp_path: Path) -> Path:
    """A conv net (ONNX source) on the CPU backend with 8 seeded calibration samples: quantizable."""
    w = np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    m = model(nodes, [value("x", F, ["batch", 3, 8, 8])], [value("y", F, ["batch", 4, 8, 8])], [init("w", w)])
    onnx.save(m, tmp_path / "model.onnx")
    rng = np.random.default_rng(3)
    (tmp_path / "calib").mkdir()
    for i in range(8):
        np.save(tmp_path / "calib" / f"s{i}.npy", rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
    path = tmp_path / "deploykit.yaml"
    path.write_text(
        CONFIG.format(model="model.onnx", backend="onnxruntime")
        + "calibration: {files: calib, samples: 8}\nquantize: {check_samples: 2}\n"
    )
    return path


def test_convert_lints_a_tensorrt_flavour_quantization_on_the_cpu_backend_unasked(tmp_path):
    """lint.run stays at its default (auto): the tensorrt-flavour INT8 graph is bound for TensorRT, so
    convert lints it on the ONNX Runtime backend; the FP32 run of the same config is not linted."""
    pytest.importorskip("modelopt", reason="the tensorrt flavour quantizes with NVIDIA ModelOpt")
    from deploykit.config import load_config

    cfg = conv_config(tmp_path)
    assert load_config(cfg).lint.run == "auto"
    store = str(tmp_path / "store")
    loose = ("quantize.tolerances.int8.rel_l2=0.5", "quantize.tolerances.int8.cosine=0.5")
    code, out, err = run_cli(
        "convert",
        str(cfg),
        "-w",
        store,
        "--precision",
        "int8",
        "--set",
        "quantize.target=tensorrt",
        *(a for s in loose for a in ("--set", s)),
        "--report-dir",
        str(tmp_path / "int8"),
    )
    assert "lint: PASS — TensorRT 10.13: 0 errors" in out, (code, out, err)
    record = RunRecord.from_dict(json.loads((tmp_path / "int8" / "run.json").read_text()))
    assert record.precision == "int8" and record.stage("lint").status == "ran"
    assert [c.name for c in record.group("lint")] == ["TensorRT 10.13", "TensorRT 11"]
    assert all(c.passed for c in record.group("lint"))
    stages = [s.stage for s in record.stages]
    assert stages.index("quantize") < stages.index("lint") < stages.index("build")  # the quantized graph

    code, out, err = run_cli("convert", str(cfg), "-w", store, "--report-dir", str(tmp_path / "fp32"))
    assert code == 0, err
    fp32 = RunRecord.from_dict(json.loads((tmp_path / "fp32" / "run.json").read_text()))
    assert fp32.precision == "fp32" and "lint" not in [s.stage for s in fp32.stages]
    assert fp32.group("lint") == [] and "lint:" not in out
