"""The pipeline over the tiny model: caching, invalidation, failures that still write reports."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import deploykit
from deploykit.errors import ParityFailed, TargetMissed
from tests.conftest import run_cli


def statuses(result):
    return {r.stage: r.status for r in result.stages}


def test_rerun_reuses_every_stage(tiny):
    cfg, store = tiny
    result = deploykit.convert(cfg, workdir=store)
    assert statuses(result) == dict.fromkeys(["export", "surgery", "build", "parity", "gate"], "reused")
    assert result.passed and result.gate["fps"] > 0
    assert result.parity["passed"] and set(result.parity["references"]) == {"onnx", "torch"}


def test_changing_the_gate_target_reruns_only_the_gate(tiny):
    cfg, store = tiny
    result = deploykit.convert(cfg, workdir=store, gate__targets={"default": {"fps": 2}})
    assert statuses(result) == {
        "export": "reused",
        "surgery": "reused",
        "build": "reused",
        "parity": "reused",
        "gate": "ran",
    }


def test_changing_build_options_reruns_build_and_what_follows(tiny):
    cfg, store = tiny
    result = deploykit.convert(cfg, workdir=store, build__optimization_level="basic")
    assert statuses(result) == {"export": "reused", "surgery": "reused", "build": "ran", "parity": "ran", "gate": "ran"}
    assert json.loads(result.artifacts["engine"].file("engine.json").read_text())["optimization_level"] == "basic"


def test_editing_the_factory_source_reexports(tiny):
    cfg, store = tiny
    module = cfg.parent / "tiny_model.py"
    module.write_text(module.read_text().replace("nn.Conv2d(8, 4, 1)", "nn.Conv2d(8, 4, 1, bias=False)"))
    sys.modules.pop("tiny_model", None)
    result = deploykit.convert(cfg, workdir=store, until="export")
    assert statuses(result) == {"export": "ran"}


def test_gate_miss_exits_1_and_still_writes_reports(tiny, tmp_path):
    cfg, store = tiny
    code, out, err = run_cli(
        "convert",
        str(cfg),
        "-w",
        str(store),
        "--set",
        "gate.targets.default.fps=1e9",
        "--report-dir",
        str(tmp_path / "reports"),
    )
    assert code == 1
    assert "gate failed: fps" in err and "< target 1e+09" in err
    junit = (tmp_path / "reports" / "junit.xml").read_text()
    assert 'failures="1"' in junit and "<failure" in junit
    assert "**FAIL**" in (tmp_path / "reports" / "summary.md").read_text()
    assert json.loads((tmp_path / "reports" / "gate.json").read_text())["passed"] is False
    with pytest.raises(TargetMissed) as e:  # the same failure from the API, result attached
        deploykit.convert(cfg, workdir=store, gate__targets={"default": {"fps": 1e9}})
    assert statuses(e.value.result)["gate"] == "reused"


SCALE_PASS = '''
import onnx
from onnx import helper
from deploykit.surgery.base import Pass, PassResult


class ScaleFirstOutput(Pass):
    """A deliberately wrong pass: multiplies the first output by 1.01."""
    name = "scale_first_output"
    description = "test pass that changes numerics"
    changes_numerics = True

    def run(self, model):
        model = onnx.ModelProto.FromString(model.SerializeToString())
        out = model.graph.output[0]
        model.graph.initializer.append(helper.make_tensor("k", onnx.TensorProto.FLOAT, [], [1.01]))
        model.graph.node.append(helper.make_node("Mul", [out.name + "_pre", "k"], [out.name]))
        for node in model.graph.node[:-1]:
            node.output[:] = [o + "_pre" if o == out.name else o for o in node.output]
        return PassResult(model, True)
'''


def test_parity_failure_writes_report_then_raises(tiny, monkeypatch):
    cfg, store = tiny
    (cfg.parent / "scale_pass.py").write_text(textwrap.dedent(SCALE_PASS))
    monkeypatch.syspath_prepend(str(cfg.parent))
    with pytest.raises(ParityFailed, match="features vs onnx: max_abs") as e:
        deploykit.convert(cfg, workdir=store, surgery__passes=["sanitize", "scale_pass:ScaleFirstOutput"])
    result = e.value.result
    assert statuses(result)["gate"] == "ran"  # a parity failure does not hide the benchmark
    report = result.parity
    assert report["passed"] is False
    assert report["outputs"]["features"]["onnx"]["passed"] is False
    assert report["outputs"]["pooled"]["onnx"]["passed"] is True
    assert 0.009 < report["outputs"]["features"]["onnx"]["metrics"]["rel_l2"] < 0.011


KILL_DURING_BUILD = """
import os, signal, sys
from deploykit.backends.onnxruntime import OnnxRuntimeBackend

def build(self, onnx_path, options, out_dir, **build_inputs):  # profiles, timing cache: the protocol
    (out_dir / "model.onnx").write_bytes(b"half-written")
    os.kill(os.getpid(), signal.SIGKILL)

OnnxRuntimeBackend.build = build
import deploykit
deploykit.convert(sys.argv[1], workdir=sys.argv[2], build__optimization_level="basic")
"""


def test_sigkill_during_build_then_rerun_completes_and_reuses(tiny, tmp_path):
    cfg, store = tiny
    script = tmp_path / "kill.py"
    script.write_text(KILL_DURING_BUILD)
    proc = subprocess.run([sys.executable, str(script), str(cfg), str(store)], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    assert any((store / "tmp").glob("*/build-*/model.onnx"))  # the half-written build, in the dead writer's folder
    result = deploykit.convert(cfg, workdir=store, build__optimization_level="basic")
    assert statuses(result) == {"export": "reused", "surgery": "reused", "build": "ran", "parity": "ran", "gate": "ran"}
    # the dead writer's folder is gone; what may remain is this (live) process's own scratch folder,
    # held while another test's thread in this pytest process is still inside a run
    assert not any((store / "tmp").glob("*/build-*"))
    assert all(f"-{os.getpid()}-" in p.name for p in (store / "tmp").iterdir()), list((store / "tmp").iterdir())
    assert result.parity["passed"]


def test_edited_artifact_fails_with_exit_4_and_names_the_file(tiny):
    cfg, store = tiny
    export = deploykit.convert(cfg, workdir=store, until="export").artifacts["model"]
    with open(export.file("model.onnx"), "ab") as f:
        f.write(b"\0")
    before = sorted(p.name for p in (store / "objects").iterdir())
    code, _, err = run_cli("convert", str(cfg), "-w", str(store))
    assert code == 4
    assert "model.onnx: content changed after the artifact was written" in err
    assert sorted(p.name for p in (store / "objects").iterdir()) == before


def test_artifacts_commands(tiny):
    cfg, store = tiny
    result = deploykit.convert(cfg, workdir=store)
    gate = result.artifacts["gate"].digest
    code, out, _ = run_cli("artifacts", "lineage", gate[:10], "-w", str(store))
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [gate[:12], "engine:", "model:", "model:"]
    code, out, _ = run_cli("artifacts", "show", gate[:10], "-w", str(store))
    manifest = json.loads(out)
    assert manifest["kind"] == "bench-report" and manifest["stage"] == "gate"
    assert "onnxruntime-gpu" in manifest["tools"] or "onnxruntime" in manifest["tools"]
    code, out, _ = run_cli("artifacts", "ls", "-w", str(store))
    assert code == 0 and "bench-report" in out
    shutil.rmtree(store / "objects" / gate)
    assert statuses(deploykit.convert(cfg, workdir=store))["gate"] == "ran"  # removed by hand: rebuilt
