"""Output declarations that shape inference contradicts (a ``[]`` shape on a Softmax output, as a
public PP-OCRv5-style recognizer declares it): ingest repairs them to the inferred ones and says so
in one warning, the artifact records each repair, and an FP32 run passes instead of failing (exit 4)."""

from __future__ import annotations

import json
import textwrap

import pytest
from onnx import TensorProto

from tests.hostile import models
from tests.hostile.harness import assert_no_traceback, deploykit

CASES = {
    "scalar-softmax-output": ({"shape": ()}, "declared float[]"),
    "wrong-rank-output": ({"shape": [1, 24]}, "declared float[1,24]"),
    "wrong-fixed-dim": ({"shape": [1, 4, 5]}, "declared float[1,4,5]"),
    "wrong-element-type": ({"shape": [1, 4, 6], "elem": TensorProto.INT64}, "declared int64[1,4,6]"),
    "scalar-on-dynamic-batch": ({"shape": (), "batch": "batch"}, "declared float[]"),
    "stale-value-info": (
        {"shape": [1, 4, 6], "stale_value_info": True},
        "value_info 'm' is declared float[7]",
    ),
}
DEFAULT = {"scalar-softmax-output", "stale-value-info"}


def _project(folder, **kw):
    models.save(models.misdeclared(**kw), folder / "rec.onnx")
    dims = "dims: {batch: {min: 1, opt: 1, max: 2}}\n" if kw.get("batch") == "batch" else ""
    shape = "[batch, 4, 8]" if dims else "[1, 4, 8]"
    cfg = folder / "deploykit.yaml"
    cfg.write_text(
        textwrap.dedent(f"""
        name: rec
        source: {{onnx: rec.onnx}}
        inputs: [{{name: x, shape: {shape}}}]
        parity: {{samples: 2}}
        gate: {{warmup: 1, warmup_s: 0, iterations: 3, trials: 1, allow_missing_target: true}}
        """)
        + dims
    )
    return cfg


@pytest.mark.parametrize("case", [pytest.param(c, marks=[] if c in DEFAULT else [pytest.mark.slow]) for c in CASES])
def test_a_contradicted_declaration_is_repaired_and_said_once(case, tmp_path):
    kw, said = CASES[case]
    cfg = _project(tmp_path, **kw)
    run = deploykit("convert", cfg, "-w", tmp_path / "store", "--log-format", "json")
    assert run.code == 0, str(run)
    assert_no_traceback(run)
    record = json.loads(run.out)
    warnings = [w for w in record["warnings"] if w.startswith("ingest:")]
    assert len(warnings) == 1 and said in warnings[0], record["warnings"]
    ingest = next(s for s in record["stages"] if s["stage"] == "ingest")
    manifest = json.loads((tmp_path / "store" / "objects" / ingest["digest"] / "manifest.json").read_text())
    assert any(said in r for r in manifest["summary"]["repaired"])  # recorded in the artifact
    assert all(c["passed"] for c in record["checks"] if c["group"] == "parity")


def test_inspect_names_the_contradicted_declaration(tmp_path):
    path = models.save(models.misdeclared(), tmp_path / "rec.onnx")
    run = deploykit("inspect", path, "--no-runtime")
    assert run.code == 0, str(run)
    assert "output 'y' is declared float[], inference derives float[1,4,6]" in " ".join(run.out.split())
