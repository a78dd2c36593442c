"""Exporter choice, fallback and the torch check, on models built here."""

import textwrap

import onnx
import pytest

import deploykit
from deploykit.errors import ConfigError, ModelError
from tests.conftest import run_cli

BRANCHY = '''
import torch
from torch import nn


class Branchy(nn.Module):
    """Data-dependent control flow: torch.export cannot capture it; tracing follows one branch."""
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x * 2


def build():
    return Branchy()
'''

CONFIG = """
name: m
source: {factory: "FACTORY"}
inputs: [{name: x, shape: [2, 5]}]
gate: {warmup: 1, iterations: 3, targets: {default: {fps: 1, batch: 2}}}
"""


def setup(tmp_path, source: str, factory: str = "branchy:build", **extra: str):
    (tmp_path / "branchy.py").write_text(textwrap.dedent(source))
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text(CONFIG.replace("FACTORY", factory) + "".join(f"{k}: {v}\n" for k, v in extra.items()))
    return cfg


def test_auto_falls_back_to_torchscript_and_records_why(tmp_path):
    cfg = setup(tmp_path, BRANCHY)
    result = deploykit.convert(cfg, workdir=tmp_path / "store", until="export")
    summary = result.artifacts["model"].manifest.summary
    assert summary["exporter"] == "torchscript"
    assert summary["fallback_reason"].startswith("dynamo exporter failed")
    assert summary["check"]["max_abs"] < 1e-6


def test_dynamo_only_fails_with_the_exporter_error(tmp_path):
    cfg = setup(tmp_path, BRANCHY)
    with pytest.raises(ModelError, match="export failed. dynamo exporter failed"):
        deploykit.convert(cfg, workdir=tmp_path / "store", until="export", export__exporter="dynamo")


def test_dynamic_batch_is_named_in_the_onnx(tiny):
    cfg, store = tiny
    model = onnx.load(deploykit.convert(cfg, workdir=store, until="export").artifacts["model"].file("model.onnx"))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert [o.name for o in model.graph.output] == ["features", "pooled"]
    assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def test_torchscript_exporter_exports_dynamic_batch(tmp_path):
    from tests.conftest import write_tiny

    cfg = write_tiny(tmp_path / "model", exporter="torchscript")
    result = deploykit.convert(cfg, workdir=tmp_path / "store", until="export")
    assert result.artifacts["model"].manifest.summary["exporter"] == "torchscript"
    model = onnx.load(result.artifacts["model"].file("model.onnx"))
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


@pytest.mark.parametrize(
    "source, factory, error, match",
    [
        (BRANCHY, "nosuchmodule:build", ConfigError, "module 'nosuchmodule' not found"),
        (BRANCHY, "branchy:nosuchfn", ConfigError, "has no function 'nosuchfn'"),
        ("import nosuchdependency\n", "branchy:build", ModelError, "importing 'branchy' failed"),
        ("raise RuntimeError('boom')\n", "branchy:build", ModelError, "raised RuntimeError: boom"),
        ("def build():\n    return 42\n", "branchy:build", ModelError, "returned int, not a torch.nn.Module"),
    ],
)
def test_bad_factory(tmp_path, source, factory, error, match):
    cfg = setup(tmp_path, source, factory)
    with pytest.raises(error, match=match):
        deploykit.convert(cfg, workdir=tmp_path / "store")
    assert not any((tmp_path / "store" / "objects").iterdir())


def test_bad_factory_exit_codes(tmp_path):
    cfg = setup(tmp_path, BRANCHY, "nosuchmodule:build")
    code, _, err = run_cli("convert", str(cfg), "-w", str(tmp_path / "store"))
    assert code == 2 and "nosuchmodule" in err
    cfg = setup(tmp_path, "raise RuntimeError('boom')\n")
    code, _, err = run_cli("convert", str(cfg), "-w", str(tmp_path / "store"))
    assert code == 4 and "boom" in err


def test_weights_are_loaded_without_unpickling_code(tmp_path):
    import pickle

    import torch

    cfg = setup(tmp_path, "import torch\ndef build():\n    return torch.nn.Linear(5, 3)\n")
    cfg.write_text(cfg.read_text().replace('"branchy:build"', '"branchy:build", weights: w.pt'))
    torch.manual_seed(3)
    reference = torch.nn.Linear(5, 3)
    torch.save(reference.state_dict(), tmp_path / "w.pt")
    result = deploykit.convert(cfg, workdir=tmp_path / "store", until="export")
    model = onnx.load(result.artifacts["model"].file("model.onnx"))
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    assert any(
        w.shape == (3, 5)
        and (abs(w - reference.weight.detach().numpy()) < 1e-7).all()
        or w.shape == (5, 3)
        and (abs(w.T - reference.weight.detach().numpy()) < 1e-7).all()
        for w in weights.values()
    )

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with open(tmp_path / "w.pt", "wb") as f:
        pickle.dump(Evil(), f)
    with pytest.raises(ModelError, match="cannot read weights as a state_dict"):
        deploykit.convert(cfg, workdir=tmp_path / "store", until="export")


def test_a_factory_imports_its_own_sibling_not_another_folders_module_of_that_name(tmp_path):
    from deploykit.config import load_config
    from deploykit.source.factory import build_model

    for folder, width in (("a", 3), ("b", 5)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "layers.py").write_text(f"WIDTH = {width}\n")
        (tmp_path / folder / "net.py").write_text(
            "import torch\nfrom layers import WIDTH\n\ndef build():\n    return torch.nn.Linear(2, WIDTH)\n"
        )
        (tmp_path / folder / "deploykit.yaml").write_text(
            "name: n\nsource: {factory: 'net:build'}\ninputs: [{name: x, shape: [1, 2]}]\n"
        )
    widths = [build_model(load_config(tmp_path / f / "deploykit.yaml")).out_features for f in ("a", "b", "a")]
    assert widths == [3, 5, 3]
