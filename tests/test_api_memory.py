"""convert() of a model in memory (a torch.nn.Module, an onnx.ModelProto, a mapping) with samples in
memory, keyed by content so a rerun reuses; Config.from_dict; Python errors name Python parameters."""

from __future__ import annotations

import numpy as np
import pytest

import deploykit
from deploykit.errors import ConfigError, DataError, ModelError, UsageError

torch = pytest.importorskip("torch")
nn = torch.nn

FAST = {
    "gate__warmup": 1,
    "gate__warmup_s": 0.0,
    "gate__iterations": 3,
    "gate__trials": 1,
    "export__exporter": "torchscript",
    "progress": False,
}


def _tiny_class() -> type:
    """conftest's tiny model (conv -> BN -> ReLU, two heads; BN makes train and eval mode differ), as a class."""
    import textwrap

    from tests.conftest import TINY_MODEL

    namespace: dict = {}
    exec(textwrap.dedent(TINY_MODEL), namespace)  # noqa: S102 - the test's own model source
    return namespace["Tiny"]


Net = type("Net", (_tiny_class(),), {})  # the run is named after the class


def _net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    net = Net()
    with torch.no_grad():  # BN statistics that are not the identity: a train-mode export would differ
        net.bn.running_mean.uniform_(-0.5, 0.5)
        net.bn.running_var.uniform_(0.5, 2.0)
    return net


def _statuses(result) -> dict[str, str]:
    return {r.stage: r.status for r in result.stages}


def test_a_module_in_memory_converts_and_a_rerun_reuses_every_artifact(tmp_path):
    net = _net().train()  # the user's module may be in train mode: the run uses eval, then gives it back
    kwargs = dict(
        inputs={"x": ("batch", 3, 16, 16)},
        dims={"batch": (1, 1, 2)},
        outputs=["features", "pooled"],
        workdir=tmp_path,
        **FAST,
    )
    first = deploykit.convert(net, **kwargs)
    assert first.passed and net.training
    assert _statuses(first) == {"export": "ran", "surgery": "ran", "build": "ran", "parity": "ran", "gate": "ran"}
    assert set(first.parity["outputs"]["pooled"]) == {"onnx", "torch"}  # the module itself is the torch reference
    assert first.name == "Net"
    # the exported graph computes eval mode: compare it with the module in eval mode on fresh inputs
    x = np.random.default_rng(7).standard_normal((2, 3, 16, 16)).astype(np.float32)
    from deploykit.graph.run import session_from_onnx

    got = session_from_onnx(first.artifacts["reference"].file("model.onnx"), "onnxruntime").infer({"x": x})
    with torch.no_grad():
        want = net.eval()(torch.from_numpy(x))[1].numpy()
    net.train()
    np.testing.assert_allclose(got["pooled"], want, rtol=1e-4, atol=1e-5)

    again = deploykit.convert(net, **kwargs)
    assert set(_statuses(again).values()) == {"reused"}
    assert again.artifacts["reference"].digest == first.artifacts["reference"].digest

    with torch.no_grad():
        net.head.bias.add_(1.0)  # a trained step: the weights changed, so the export is new
    changed = deploykit.convert(net, **kwargs)
    assert _statuses(changed)["export"] == "ran"
    assert changed.artifacts["reference"].digest != first.artifacts["reference"].digest


def test_int8_from_an_iterable_of_tensors_validated_on_a_dataloader(tmp_path):
    from torch.utils.data import DataLoader, TensorDataset

    net = _net()
    rng = np.random.default_rng(3)
    calibration = [torch.from_numpy(rng.random((1, 3, 16, 16), dtype=np.float32)) for _ in range(12)]
    images = torch.from_numpy(rng.random((6, 3, 16, 16), dtype=np.float32))
    validation = DataLoader(TensorDataset(images, torch.zeros(6)), batch_size=4)  # (images, labels) batches of 4
    kwargs = dict(
        inputs={"x": (1, 3, 16, 16)},
        precision="int8",
        calibration=calibration,
        validation=validation,
        workdir=tmp_path,
        **FAST,
    )
    result = deploykit.convert(net, **kwargs)
    quantize = result.report("model", "precision.json")
    assert quantize is not None and result.record.precision == "int8"
    assert result.parity["data"]["kind"] == "validation" and result.parity["data"]["samples"] == 6
    assert result.passed
    assert set(_statuses(deploykit.convert(net, **kwargs)).values()) == {"reused"}
    calibration[0] = calibration[0] * 0.5  # one changed sample: recalibrate, keep the export
    changed = deploykit.convert(net, **{**kwargs, "calibration": calibration})
    assert _statuses(changed)["export"] == "reused" and _statuses(changed)["quantize"] == "ran"


def test_an_onnx_modelproto_in_memory_is_ingested_and_reused(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    first = deploykit.build(proto, dims={"batch": (1, 2, 4)}, workdir=tmp_path, **FAST)
    assert first.name == "relu" and _statuses(first) == {"ingest": "ran", "surgery": "ran", "build": "ran"}
    assert set(_statuses(deploykit.build(proto, dims={"batch": (1, 2, 4)}, workdir=tmp_path, **FAST)).values()) == {
        "reused"
    }
    with pytest.raises(
        UsageError, match=r"\(onnx.ModelProto in memory\): dims= names batchh, which the model does not have"
    ):
        deploykit.build(proto, dims={"batchh": (1, 2, 4)}, workdir=tmp_path, **FAST)
    with pytest.raises(UsageError, match="inputs=: an ONNX model declares its inputs"):
        deploykit.build(proto, inputs={"x": (1, 8)}, workdir=tmp_path, **FAST)
    assert isinstance(onnx.ModelProto(), type(proto))


def test_config_from_a_dict_is_validated_like_the_yaml(tmp_path):
    raw = {
        "name": "net",
        "source": {"onnx": "m.onnx"},
        "inputs": [{"name": "x", "shape": [1, 8]}],
        "gate": {"iterationz": 5},
    }
    with pytest.raises(ConfigError, match=r"config.gate: unknown key 'iterationz' \(did you mean 'iterations'\?\)"):
        deploykit.Config.from_dict(raw)
    raw["gate"] = {"iterations": 5}
    cfg = deploykit.Config.from_dict(raw, base_dir=tmp_path)
    assert cfg.gate.iterations == 5 and cfg.path("m.onnx") == tmp_path / "m.onnx"
    with pytest.raises(
        ConfigError,
        match=r"precision='int9': config.quantize.precision: 'int9' is not one of .*"
        r"did you mean 'int8'",
    ):
        deploykit.convert(raw, precision="int9", workdir=tmp_path, progress=False)
    # a Config takes the same named parameters and overrides as a file does
    from deploykit.api import resolve_config
    from deploykit.api.args import PythonArgs

    again = resolve_config(cfg, {"gate.trials": 2}, args=PythonArgs(precision="fp16", targets=30))
    assert (again.gate.trials, again.quantize.precision, again.gate.targets["default"].fps) == (2, "fp16", 30.0)
    assert again.base_dir == cfg.base_dir and resolve_config(cfg) == cfg


def test_python_errors_name_python_parameters(tmp_path):
    net = _net()
    with pytest.raises(UsageError, match=r"^inputs=: a torch.nn.Module needs its inputs"):
        deploykit.convert(net, workdir=tmp_path, progress=False)
    with pytest.raises(UsageError, match=r"^inputs=: dim 'batch' needs its range in dims="):
        deploykit.convert(net, inputs={"x": ("batch", 3, 16, 16)}, workdir=tmp_path, progress=False)
    with pytest.raises(UsageError, match=r"^dims=: no input uses a dim named 'batchh' \(did you mean 'batch'\?\)"):
        deploykit.convert(net, inputs={"x": ("batch", 3, 16, 16)}, dims={"batch": 1, "batchh": 2}, workdir=tmp_path)
    with pytest.raises(UsageError, match=r"^rerun= 'gat': no such stage"):
        deploykit.convert(net, inputs={"x": (1, 3, 16, 16)}, rerun=("gat",), workdir=tmp_path, progress=False)
    with pytest.raises(UsageError, match=r"pass precision='int8'"):
        deploykit.quantize(net, inputs={"x": (1, 3, 16, 16)}, workdir=tmp_path, progress=False)
    with pytest.raises(DataError, match=r"^calibration\[0\]: 2 value\(s\) for 3 inputs"):
        from deploykit.data.memory import samples_from
        from deploykit.data.sources import InputInfo

        samples_from([(1, 2)], [InputInfo(n, (1,), "float32") for n in "abc"], "calibration", 8)


def test_samples_in_memory_take_every_form_a_notebook_holds():
    from torch.utils.data import DataLoader, TensorDataset

    from deploykit.data.memory import samples_from
    from deploykit.data.sources import InputInfo

    one = [InputInfo("x", (1, 3, 4, 4), "float32")]
    rng = np.random.default_rng(0)
    stack = rng.random((10, 3, 4, 4), dtype=np.float32)
    held = samples_from(stack, one, "calibration", 64)  # one array stacked on its first axis
    assert held.count == 10 and held.samples[3]["x"].shape == (1, 3, 4, 4)
    np.testing.assert_array_equal(held.samples[3]["x"][0], stack[3])
    loader = DataLoader(TensorDataset(torch.from_numpy(stack), torch.arange(10)), batch_size=4)
    from_loader = samples_from(loader, one, "calibration", 64)  # (images, labels): labels ignored
    assert from_loader.count == 10 and from_loader.digest == held.digest
    assert samples_from(loader, one, "calibration", 5).count == 5  # stops reading at the limit
    assert samples_from([{"x": stack[:1]}], one, "calibration", 64).count == 1
    assert samples_from(stack * 2, one, "calibration", 64).digest != held.digest
    with pytest.raises(UsageError, match=r"calibration=: expected an iterable of samples"):
        samples_from(3, one, "calibration", 64)
    with pytest.raises(DataError, match=r"calibration\[0\]: no model input named 'y'"):
        samples_from([{"y": stack[:1]}], one, "calibration", 64)


FACTORY = """
import helper_lib  # fails deep inside, behind a wrapper that names only itself


def build():
    raise AssertionError("not reached")
"""

HELPER = """
def _load():
    raise RuntimeError("operator torchvision::nms does not exist")


try:
    _load()
except RuntimeError as e:
    raise ModuleNotFoundError("Could not import module 'SegformerForSemanticSegmentation'") from e
"""


def test_a_factory_whose_import_fails_deep_inside_says_what_failed_there(tmp_path):
    (tmp_path / "model.py").write_text(FACTORY)
    (tmp_path / "helper_lib.py").write_text(HELPER)
    cfg = deploykit.Config.from_dict(
        {"name": "seg", "source": {"factory": "model:build"}, "inputs": [{"name": "x", "shape": [1, 3]}]},
        base_dir=tmp_path,
    )
    with pytest.raises(ModelError) as caught:
        deploykit.export(cfg, workdir=tmp_path / "store", progress=False)
    message = caught.value.message
    assert "importing 'model' failed: Could not import module 'SegformerForSemanticSegmentation'" in message
    assert "inside: RuntimeError: operator torchvision::nms does not exist" in message
    assert "helper_lib.py:3)" in message


def test_deploykit_report_renders_a_result_or_a_stored_run(tmp_path):
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    result = deploykit.parity(proto, workdir=tmp_path / "store", **FAST)
    shown = deploykit.report(result, tmp_path / "out" / "report.html", with_plots=False)
    assert "<table>" in shown._repr_html_() and "parity" in shown.html
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and shown.record.identity in page
    stored = deploykit.report("relu", workdir=tmp_path / "store", with_plots=False)
    assert stored.record.identity == result.record.identity and stored.path is None
    assert result.report_html(with_plots=False) == shown.html
    import importlib

    importlib.import_module("deploykit.report.html")  # the subpackage and the function share the name: both work
    assert callable(deploykit.report) and deploykit.report.html.render_fragment


def test_calibration_fields_beside_samples_in_memory():
    from deploykit.api import resolve_config
    from deploykit.api.args import PythonArgs

    samples = [np.full((1, 3, 16, 16), i, np.float32) for i in range(12)]
    args = PythonArgs(inputs={"x": (1, 3, 16, 16)}, calibration=samples)
    capped = resolve_config(_net(), {"calibration.samples": 5}, args=args)
    assert capped.calibration.memory.count == capped.calibration.samples == 5
    assert [s["x"][0, 0, 0, 0] for s in capped.calibration.memory.samples] == [
        0,
        1,
        2,
        3,
        4,
    ]  # the first five, in order
    with pytest.raises(UsageError, match=r"calibration.seed: does not apply to samples passed as calibration="):
        resolve_config(_net(), {"calibration.seed": 3}, args=args)
