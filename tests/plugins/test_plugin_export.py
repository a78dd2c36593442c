"""Models using the plugin ops go through deploykit's export (both exporters), surgery, build and parity.

Each exported graph must hold exactly one plugin node per op call, with the attributes TensorRT
reads, plus the model-local body that lets ONNX Runtime check it against torch.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import onnx
import pytest
from onnx import helper

import deploykit

MODELS = '''
import numpy as np
import torch
from torch import nn

from deploykit.plugins.torch_ops import bev_pool_v2, pillar_scatter


class Pillars(nn.Module):
    """PointPillars in miniature: a pillar feature net, the scatter, a conv head."""

    def __init__(self):
        super().__init__()
        self.pfn = nn.Linear(4, 8)
        self.head = nn.Conv2d(8, 2, 3, padding=1)

    def forward(self, points, coords, num_pillars):
        canvas = pillar_scatter(torch.relu(self.pfn(points)), coords, num_pillars, [16, 20])
        return self.head(canvas)


class Bev(nn.Module):
    """Lift-splat in miniature, the ranks fixed as buffers."""

    def __init__(self):
        super().__init__()
        self.net = nn.Conv2d(3, 4 + 6, 1)
        rng = np.random.default_rng(0)
        points = rng.permutation(2 * 4 * 3 * 5)[:90]
        n, d, h, w = np.unravel_index(points, (2, 4, 3, 5))
        cells = rng.integers(0, 6 * 7, points.size)
        order = np.argsort(cells, kind="stable")
        ranks = {"ranks_depth": points, "ranks_feat": np.ravel_multi_index((n, h, w), (2, 3, 5)), "ranks_bev": cells}
        for name, value in ranks.items():
            self.register_buffer(name, torch.from_numpy(value[order].astype(np.int32)))
        starts = np.flatnonzero(np.r_[True, np.diff(cells[order]) != 0])
        self.register_buffer("starts", torch.from_numpy(starts.astype(np.int32)))
        self.register_buffer("lengths", torch.from_numpy(np.diff(np.r_[starts, points.size]).astype(np.int32)))

    def forward(self, images):
        x = self.net(images.flatten(0, 1))
        depth = x[:, :4].softmax(1).reshape(1, 2, 4, 3, 5)
        feat = x[:, 4:].permute(0, 2, 3, 1).reshape(1, 2, 3, 5, 6)
        bev = bev_pool_v2(depth, feat, self.ranks_depth, self.ranks_feat, self.ranks_bev, self.starts,
                          self.lengths, [1, 6, 7])
        return bev.relu() * 2


def pillars():
    torch.manual_seed(0)
    return Pillars().eval()


def bev():
    torch.manual_seed(0)
    return Bev().eval()
'''

CONFIGS = {
    "pillars": """
name: pillars
source: {factory: "plugin_models:pillars"}
inputs:
  - {name: points, shape: [batch, 32, 4]}
  - {name: coords, shape: [batch, 32, 4], dtype: int32}   # random ints in [0, 16): all on the 16 x 20 grid
  - {name: num_pillars, shape: [batch], dtype: int32}     # random ints in [0, 16): at most P = 32
dims: {batch: {min: 1, opt: 2, max: 3}}
export: {exporter: EXPORTER}
parity: {samples: 1}
gate: {warmup: 1, iterations: 3, trials: 1, allow_missing_target: true}
""",
    "bev": """
name: bev
source: {factory: "plugin_models:bev"}
inputs:
  - {name: images, shape: [1, 2, 3, 3, 5]}
export: {exporter: EXPORTER}
parity: {samples: 1}
gate: {warmup: 1, iterations: 3, trials: 1, allow_missing_target: true}
""",
}
PLUGIN = {"pillars": ("PillarScatter", {"grid": [16, 20]}), "bev": ("BEVPoolV2", {"bev_shape": [1, 6, 7]})}


def _write(folder: Path, model: str, exporter: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plugin_models.py").write_text(textwrap.dedent(MODELS))
    config = folder / "deploykit.yaml"
    config.write_text(CONFIGS[model].replace("EXPORTER", exporter))
    return config


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.parametrize("model", ["pillars", "bev"])
def test_exporters_emit_one_plugin_node_that_onnxruntime_runs(tmp_path, model, exporter):
    config = _write(tmp_path / "model", model, exporter)
    try:
        result = deploykit.convert(config, workdir=tmp_path / "store")
    finally:
        sys.modules.pop("plugin_models", None)
    assert result.passed  # export checked ORT against torch; parity compared the build with both
    export = result.artifacts["reference"]
    assert export.manifest.summary["exporter"] == exporter
    for role in ("reference", "model"):  # the export, and the graph after surgery (sanitize)
        graph_model = onnx.load(str(result.artifacts[role].file("model.onnx")))
        plugins = [n for n in graph_model.graph.node if n.domain == "deploykit"]
        op_type, attrs = PLUGIN[model]
        assert [n.op_type for n in plugins] == [op_type], role
        got = {a.name: helper.get_attribute_value(a) for a in plugins[0].attribute}
        assert got == {**attrs, "plugin_version": b"1", "plugin_namespace": b"deploykit"}, role
        assert [(f.domain, f.name) for f in graph_model.functions] == [("deploykit", op_type)], role
    torch_metrics = next(iter(result.parity["outputs"].values()))["torch"]["metrics"]
    assert torch_metrics["max_abs"] < 1e-4


def test_dynamic_batch_survives_the_dynamo_export(tmp_path):
    config = _write(tmp_path / "model", "pillars", "dynamo")
    try:
        result = deploykit.convert(config, workdir=tmp_path / "store", until="export")
    finally:
        sys.modules.pop("plugin_models", None)
    graph = onnx.load(str(result.artifacts["reference"].file("model.onnx"))).graph
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert result.artifacts["reference"].manifest.summary["check"]["shapes"] == ["opt", "min", "max"]
