"""Plugins reach the export and surgery stages only through declared extension points: the export
hooks registry, and lower_plugins' body registry filled by the surgery stage, not by the pass."""

import onnx
from onnx import helper

import deploykit
from deploykit import api
from deploykit.source import export_hooks
from deploykit.surgery import plugin_bodies
from tests.plugins.conftest import plugin_model

MODULE = """
import torch


class Double(torch.nn.Module):
    def forward(self, x):
        return 2 * x


def make():
    return Double()
"""

CONFIG = """
name: hooked
source: {factory: "tiny_double:make"}
inputs: [{name: x, shape: [2, 3]}]
export: {exporter: torchscript}
surgery: {passes: []}
gate: {allow_missing_target: true}
"""


def test_a_registered_model_hook_shapes_every_export(tmp_path, monkeypatch):
    (tmp_path / "tiny_double.py").write_text(MODULE)
    (tmp_path / "deploykit.yaml").write_text(CONFIG)
    monkeypatch.syspath_prepend(str(tmp_path))

    def stamp(model):
        model.metadata_props.append(onnx.StringStringEntryProto(key="hooked", value="yes"))
        return model

    export_hooks.register_export_hooks("test.stamp", model_hook=stamp)
    try:
        result = deploykit.export(tmp_path / "deploykit.yaml", workdir=tmp_path / "store")
    finally:
        export_hooks.unregister_export_hooks("test.stamp")
    model = onnx.load(result.artifacts["model"].file("model.onnx"))
    assert {p.key: p.value for p in model.metadata_props}["hooked"] == "yes"
    assert stamp not in export_hooks.model_hooks()


def test_the_surgery_stage_gives_deploykit_plugin_ops_their_bodies(tmp_path, monkeypatch):
    monkeypatch.delitem(plugin_bodies._REGISTERED, "PillarScatter", raising=False)
    assert plugin_bodies.body_builder(helper.make_node("PillarScatter", [], [], domain="deploykit")) is None
    model = plugin_model("PillarScatter", {"grid": [4, 5]}, bodies=False)
    onnx.save(model, tmp_path / "pillars.onnx")
    result = api.surgery(tmp_path / "pillars.onnx", workdir=tmp_path / "store", surgery__passes=["lower_plugins"])
    report = result.artifacts["model"].manifest.summary["passes"][0]
    assert report["details"]["functions"] == {"PillarScatter": 1}
    lowered = onnx.load(result.artifacts["model"].file("model.onnx"))
    assert [f.name for f in lowered.functions] == ["PillarScatter"]
