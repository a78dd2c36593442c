"""examples/bev converts end to end on the CPU, keeping its BEVPoolV2 plugin node (FP32 and INT8)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import onnx
import pytest
from onnx import helper

import deploykit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bev" / "deploykit.yaml"


@pytest.fixture(autouse=True)
def _fresh_factory_module():
    yield
    sys.modules.pop("model", None)  # the example's model.py; other examples name theirs alike


def _plugin_node(path: Path) -> onnx.NodeProto:
    model = onnx.load(str(path))
    nodes = [n for n in model.graph.node if n.domain == "deploykit"]
    assert [n.op_type for n in nodes] == ["BEVPoolV2"]
    assert [(f.domain, f.name) for f in model.functions] == [("deploykit", "BEVPoolV2")]
    return nodes[0]


@pytest.fixture(scope="module")
def fp32_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[deploykit.RunResult, Path]:
    """The FP32 conversion and its store (the INT8 tests copy it to reuse the export)."""
    store = tmp_path_factory.mktemp("bev") / "store"
    try:
        return deploykit.convert(EXAMPLE, workdir=store, gate__iterations=10, gate__trials=1), store
    finally:
        sys.modules.pop("model", None)


def test_bev_example_converts_with_its_plugin_node(fp32_run):
    result, _ = fp32_run
    assert result.passed
    assert [r.stage for r in result.stages if r.status == "ran"] == ["export", "surgery", "build", "parity", "gate"]
    node = _plugin_node(result.artifacts["model"].file("model.onnx"))
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs == {"bev_shape": [1, 32, 32], "plugin_version": b"1", "plugin_namespace": b"deploykit"}
    for reference in ("onnx", "torch"):
        assert result.parity["outputs"]["heatmap"][reference]["metrics"]["max_abs"] < 1e-4


def _convert_int8(fp32_run: tuple, tmp_path: Path, target: str = "auto") -> deploykit.RunResult:
    shutil.copytree(fp32_run[1], tmp_path / "store")  # export and surgery are reused
    # The tensorrt target's FP16 rest is not what ONNX Runtime computes (docs/architecture.md, pitfalls): FP32 here.
    return deploykit.convert(
        EXAMPLE,
        workdir=tmp_path / "store",
        quantize__precision="int8",
        quantize__target=target,
        quantize__high_precision="fp32",
        gate__iterations=10,
        gate__trials=1,
    )


def _check_int8(result: deploykit.RunResult) -> None:
    assert result.passed
    quantized = result.artifacts["model"]
    assert quantized.manifest.stage == "quantize"
    node = _plugin_node(quantized.file("model.onnx"))
    model = onnx.shape_inference.infer_shapes(onnx.load(str(quantized.file("model.onnx"))))
    types = {vi.name: vi.type.tensor_type.elem_type for vi in [*model.graph.value_info, *model.graph.output]}
    assert {types[node.input[0]], types[node.input[1]], types[node.output[0]]} == {onnx.TensorProto.FLOAT}
    assert sum(n.op_type == "QuantizeLinear" for n in model.graph.node) >= 8


@pytest.mark.parametrize("target", ["onnxruntime", "tensorrt"])
def test_bev_example_converts_to_int8_keeping_the_plugin_in_fp32(fp32_run, tmp_path, monkeypatch, target):
    """The quantize job wrapped in deploykit.plugins.quantize.quantize_keeping_plugins (harmless if the
    stage already does it: the inner call then finds no plugin node)."""
    import deploykit.quant.quantize as quant
    from deploykit.plugins.quantize import quantize_keeping_plugins

    unwrapped = quant.quantize_model
    monkeypatch.setattr(quant, "quantize_model", lambda job: quantize_keeping_plugins(job, unwrapped))
    _check_int8(_convert_int8(fp32_run, tmp_path, target))


def test_the_quantize_stage_keeps_the_plugin_node(fp32_run, tmp_path):
    _check_int8(_convert_int8(fp32_run, tmp_path))
