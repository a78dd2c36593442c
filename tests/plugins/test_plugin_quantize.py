"""Quantizing around plugin nodes: inline for the quantizer, restore the plugin node afterwards.

The graph is a tiny lift-splat model exported with the TorchScript exporter. The quantizers are ONNX
Runtime's (QDQ, INT8) and NVIDIA ModelOpt's INT8 with FP32 and FP16 high precision;
the first ModelOpt test also pins down the trap the helpers avoid.
"""

from __future__ import annotations

import io
import warnings
from collections import Counter

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from deploykit.errors import ModelError
from deploykit.plugins.onnx_functions import attach_bodies, register_bodies
from deploykit.plugins.quantize import (
    EXCLUDE_FP16_OP_TYPES,
    inline_plugins,
    plugin_node_names,
    restore_plugins,
)
from deploykit.plugins.torch_ops import bev_pool_v2
from deploykit.quant.ort_flavour import resolve_reduce_range
from tests.plugins.conftest import make_bev_inputs

SHAPE = (1, 2, 3, 6, 10)  # images: batch, cameras, RGB, H, W


class TinyBev(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 5 + 8, 1))
        self.head = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 1))
        ranks = make_bev_inputs(np.random.default_rng(0), 1, 2, 5, 6, 10, 1, (1, 8, 8), keep=0.8)[2:]
        for name, value in zip(("rd", "rf", "rb", "starts", "lengths"), ranks, strict=True):
            self.register_buffer(name, torch.from_numpy(value))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.net(images.flatten(0, 1))
        depth = x[:, :5].softmax(1).reshape(1, 2, 5, 6, 10)
        feat = x[:, 5:].permute(0, 2, 3, 1).reshape(1, 2, 6, 10, 8)
        bev = bev_pool_v2(depth, feat, self.rd, self.rf, self.rb, self.starts, self.lengths, [1, 8, 8])
        return self.head(bev.reshape(1, 8, 8, 8).permute(0, 3, 1, 2))


@pytest.fixture(scope="module")
def plugin_onnx() -> onnx.ModelProto:
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter's notice
        torch.onnx.export(
            TinyBev().eval(),
            (torch.randn(SHAPE),),
            buf,
            dynamo=False,
            opset_version=18,
            input_names=["images"],
            output_names=["out"],
        )
    return attach_bodies(onnx.load_model_from_string(buf.getvalue()))[0]


def _samples(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, *SHAPE[1:])).astype(np.float32)[:, None]


def _run(model: onnx.ModelProto, images: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return session.run(None, {"images": images})[0].astype(np.float32)


def _rel_l2(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def _plugins(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.domain == "deploykit"]


def test_inline_then_restore_gives_the_plugin_back_unchanged(plugin_onnx):
    inlined = inline_plugins(plugin_onnx)
    assert not _plugins(inlined.model) and not inlined.model.functions
    assert inlined.node_names and all(n.startswith("deploykit_plugin/0/") for n in inlined.node_names)
    onnx.checker.check_model(inlined.model, full_check=True)
    images = _samples(1, 1)[0]
    expected = _run(plugin_onnx, images)
    np.testing.assert_allclose(_run(inlined.model, images), expected, rtol=1e-6, atol=1e-6)
    restored = restore_plugins(inlined.model, inlined)
    (original,) = _plugins(plugin_onnx)
    (node,) = _plugins(restored)
    assert node.SerializeToString() == original.SerializeToString()
    assert [f.name for f in restored.functions] == ["BEVPoolV2"]
    assert Counter(n.op_type for n in restored.graph.node) == Counter(n.op_type for n in plugin_onnx.graph.node)
    np.testing.assert_allclose(_run(restored, images), expected, rtol=1e-6, atol=1e-6)


def test_plugin_node_names(plugin_onnx):
    assert plugin_node_names(plugin_onnx) == [_plugins(plugin_onnx)[0].name]
    assert inline_plugins(inline_plugins(plugin_onnx).model).plugins == ()  # nothing left to inline


class _Reader:
    def __init__(self, samples: np.ndarray) -> None:
        self._it = iter({"images": s} for s in samples)

    def get_next(self):
        return next(self._it, None)


def test_onnxruntime_int8_keeps_the_plugin_node(plugin_onnx, tmp_path):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    inlined = inline_plugins(plugin_onnx)
    onnx.save(inlined.model, tmp_path / "inlined.onnx")
    quantize_static(
        str(tmp_path / "inlined.onnx"),
        str(tmp_path / "q.onnx"),
        _Reader(_samples(8, 2)),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        nodes_to_exclude=list(inlined.node_names),
        extra_options={"ActivationSymmetric": True},
        reduce_range=resolve_reduce_range("auto"),
    )  # AVX2 without VNNI: 8-bit weights saturate
    restored = restore_plugins(onnx.load(tmp_path / "q.onnx"), inlined)
    onnx.checker.check_model(restored)
    assert len(_plugins(restored)) == 1 and [f.name for f in restored.functions] == ["BEVPoolV2"]
    ops = Counter(n.op_type for n in restored.graph.node)
    assert ops["QuantizeLinear"] >= 4 and "ScatterND" not in ops
    plugin = _plugins(restored)[0]
    producers = {o: n.op_type for n in restored.graph.node for o in n.output}
    assert producers[plugin.input[0]] != "DequantizeLinear"  # the plugin reads the float tensor, not a fake-quant one
    images = _samples(1, 3)[0]
    assert _rel_l2(_run(restored, images), _run(plugin_onnx, images)) < 0.05


def test_restore_refuses_a_graph_that_lost_the_body(plugin_onnx):
    inlined = inline_plugins(plugin_onnx)
    broken = onnx.ModelProto()
    broken.CopyFrom(inlined.model)
    kept = [n for n in broken.graph.node if not n.name.startswith("deploykit_plugin/")]
    del broken.graph.node[:]
    broken.graph.node.extend(kept)
    with pytest.raises(ModelError, match="lost every node of plugin"):
        restore_plugins(broken, inlined)


def test_lower_plugins_uses_the_registered_bodies(plugin_onnx):
    from deploykit.surgery.lower_plugins import LowerPlugins
    from deploykit.surgery.runner import run_passes

    assert register_bodies() == ["BEVPoolV2", "PillarScatter"]
    bare = onnx.ModelProto()
    bare.CopyFrom(plugin_onnx)
    del bare.functions[:]
    images = _samples(1, 4)[0]
    lowered, reports = run_passes(bare, [LowerPlugins()], {"images": images}, atol=1e-5, rtol=1e-4, where="test")
    assert reports[0]["details"]["functions"] == {"BEVPoolV2": 1}
    np.testing.assert_allclose(_run(lowered, images), _run(plugin_onnx, images), rtol=1e-6, atol=1e-6)


def _modelopt_int8(path, output, high_precision: str, **kwargs) -> onnx.ModelProto:
    pytest.importorskip("modelopt.onnx.quantization")
    from modelopt.onnx.quantization import quantize

    from deploykit.quant.modelopt_guard import ort_patch_guard

    # ModelOpt patches onnxruntime.quantization in place; unguarded, later tests' quantize_static breaks.
    with ort_patch_guard():
        quantize(
            str(path),
            quantize_mode="int8",
            calibration_data={"images": _samples(8, 5)[:, 0]},
            calibration_method="max",
            calibration_eps=["cpu"],
            output_path=str(output),
            high_precision_dtype=high_precision,
            log_level="ERROR",
            **kwargs,
        )
    return onnx.load(output)


def test_modelopt_loses_the_function_without_the_helpers(plugin_onnx, tmp_path):
    """The trap: ModelOpt raises the opset with onnx.version_converter, which drops model.functions."""
    onnx.save(plugin_onnx, tmp_path / "plugin.onnx")
    with pytest.raises(Exception, match=r"BEVPoolV2\(-1\) is not a registered function/op"):
        _modelopt_int8(tmp_path / "plugin.onnx", tmp_path / "q.onnx", "fp32")


@pytest.mark.parametrize("high_precision", ["fp32", "fp16"])
def test_modelopt_int8_keeps_the_plugin_node_in_fp32(plugin_onnx, tmp_path, high_precision):
    inlined = inline_plugins(plugin_onnx)
    onnx.save(inlined.model, tmp_path / "inlined.onnx")
    quantized = _modelopt_int8(
        tmp_path / "inlined.onnx",
        tmp_path / "q.onnx",
        high_precision,
        nodes_to_exclude=list(inlined.node_names),
        op_types_to_exclude_fp16=list(EXCLUDE_FP16_OP_TYPES),
    )
    restored = restore_plugins(quantized, inlined)
    onnx.checker.check_model(restored)
    (plugin,) = _plugins(restored)
    assert [f.name for f in restored.functions] == ["BEVPoolV2"]
    assert Counter(n.op_type for n in restored.graph.node)["QuantizeLinear"] >= 4
    types = {
        vi.name: vi.type.tensor_type.elem_type for vi in onnx.shape_inference.infer_shapes(restored).graph.value_info
    }
    assert types[plugin.input[0]] == types[plugin.input[1]] == types[plugin.output[0]] == onnx.TensorProto.FLOAT
    images = _samples(1, 6)[0]
    got = _run(restored, images)  # ONNX Runtime's CPU provider runs it: no FP16 ScatterND(add)
    if high_precision == "fp32":  # ORT's FP16 + INT8 numerics are off on their own (docs/architecture.md, pitfalls)
        assert _rel_l2(got, _run(plugin_onnx, images)) < 0.05


def test_restore_survives_a_constant_folder_in_between(plugin_onnx):
    """Folding the inlined body's index arithmetic (the ranks are initializers) takes the ranks with it."""
    from deploykit.surgery.sanitize import Sanitize

    inlined = inline_plugins(plugin_onnx)
    folded = Sanitize().run(inlined.model).model
    assert "ranks_depth" not in {t.name for t in folded.graph.initializer}
    restored = restore_plugins(folded, inlined)
    (node,) = _plugins(restored)
    assert list(node.input) == list(_plugins(plugin_onnx)[0].input)
    images = _samples(1, 7)[0]
    np.testing.assert_allclose(_run(restored, images), _run(plugin_onnx, images), rtol=1e-5, atol=1e-5)


def test_fp16_autocast_around_the_plugin_keeps_it_fp32(plugin_onnx, tmp_path):
    """ModelOpt's AutoCast (what deploykit.quant.fp16 uses) with the inlined body excluded."""
    import re

    pytest.importorskip("modelopt.onnx.autocast")
    from modelopt.onnx.autocast.convert import convert_to_mixed_precision

    inlined = inline_plugins(plugin_onnx)
    onnx.save(inlined.model, tmp_path / "inlined.onnx")
    converted = convert_to_mixed_precision(
        str(tmp_path / "inlined.onnx"),
        low_precision_type="fp16",
        nodes_to_exclude=[f"^{re.escape(n)}$" for n in inlined.node_names],
        data_max=np.inf,
        init_max=np.inf,
        keep_io_types=True,
    )
    restored = restore_plugins(converted, inlined)
    onnx.checker.check_model(restored)
    (plugin,) = _plugins(restored)
    types = {
        vi.name: vi.type.tensor_type.elem_type for vi in onnx.shape_inference.infer_shapes(restored).graph.value_info
    }
    assert {types[plugin.input[0]], types[plugin.input[1]], types[plugin.output[0]]} == {onnx.TensorProto.FLOAT}
    assert any(t == onnx.TensorProto.FLOAT16 for t in types.values())  # the rest did become FP16
    images = _samples(1, 8)[0]
    assert _rel_l2(_run(restored, images), _run(plugin_onnx, images)) < 0.01
