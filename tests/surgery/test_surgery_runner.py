"""The runner's checks, user passes, bad models, the registry, and the config form from `deploykit convert`."""

import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deploykit
from deploykit.errors import ConfigError, ModelError
from deploykit.surgery.base import Pass, PassResult
from deploykit.surgery.registry import instantiate, list_passes
from deploykit.surgery.runner import run_passes
from tests.conftest import run_cli
from tests.surgery.models import apply, legacy_detector, make

F = TensorProto.FLOAT


def cyclic():
    nodes = [
        helper.make_node("Add", ["x", "c"], ["a"], name="add_a"),
        helper.make_node("Relu", ["a"], ["c"], name="relu_c"),
        helper.make_node("Neg", ["c"], ["y"], name="neg"),
    ]
    return make(nodes, [("x", F, [2])], [("y", F, [2])])


def dangling():
    return make([helper.make_node("Add", ["x", "ghost"], ["y"], name="add_ghost")], [("x", F, [2])], [("y", F, [2])])


def test_cycle_and_dangling_input_name_the_nodes():
    with pytest.raises(ModelError, match=r"nodes form a cycle: 'relu_c' \(Relu\) -> 'add_a' \(Add\)"):
        apply(cyclic(), "sanitize")
    with pytest.raises(ModelError, match=r"node 'add_ghost' \(Add\) reads 'ghost', which no node"):
        apply(dangling(), "sanitize")


@pytest.mark.parametrize("build", [cyclic, dangling])
def test_broken_model_from_the_cli_exits_4(tmp_path, build):
    path = tmp_path / "model.onnx"
    onnx.save(build(), path)
    code, _, err = run_cli("surgery", str(path), "-w", str(tmp_path / "s"))
    assert code == 4, err
    assert "model.onnx" in err and ("'relu_c' (Relu)" in err or "'ghost'" in err)


class Scale(Pass):
    """Multiplies the output by 1.01 without declaring it."""

    name = "scale"
    description = "test pass"

    def run(self, model):
        out = onnx.ModelProto.FromString(model.SerializeToString())
        out.graph.initializer.append(helper.make_tensor("k", F, [], [1.01]))
        out.graph.node[-1].output[0] = "pre"
        out.graph.node.append(helper.make_node("Mul", ["pre", "k"], [model.graph.output[0].name]))
        return PassResult(out, True)


def test_undeclared_numeric_change_names_pass_and_output():
    with pytest.raises(ModelError, match=r"pass 'scale' changed numerics: output 'logits' differs: max abs diff"):
        run_passes(legacy_detector(), [Scale()], {}, atol=1e-4, rtol=1e-3, where="m.onnx")
    Scale.changes_numerics = True
    try:
        _, reports = run_passes(legacy_detector(), [Scale()], {}, atol=1e-4, rtol=1e-3, where="m.onnx")
        assert reports[0]["numerics"] == "not compared: the pass declares it changes numerics"
    finally:
        Scale.changes_numerics = False


USER_PASSES = '''
def raises(model):
    """Always fails."""
    raise ValueError("boom")


def not_a_graph(model):
    return {"graph": model.graph}


def rename_output(model):
    """Renames nothing: returns the model unchanged."""
    return model


class NotAResult:
    pass
'''


@pytest.fixture
def user_passes(tmp_path, monkeypatch):
    (tmp_path / "my_passes.py").write_text(textwrap.dedent(USER_PASSES))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path


def test_user_pass_that_raises_or_returns_no_graph_is_exit_2(user_passes):
    path = user_passes / "model.onnx"
    onnx.save(legacy_detector(), path)
    code, _, err = run_cli("surgery", str(path), "--pass", "my_passes:raises", "-w", str(user_passes / "s"))
    assert code == 2 and "user pass 'my_passes:raises' raised ValueError: boom" in err
    with pytest.raises(ConfigError, match="returned dict, not an onnx.ModelProto"):
        apply(legacy_detector(), "my_passes:not_a_graph")
    _, reports = apply(legacy_detector(), "my_passes:rename_output")
    assert reports[0]["modified"] is False
    with pytest.raises(ConfigError, match="neither a Pass subclass nor a function"):
        instantiate("my_passes:NotAResult")


def test_unknown_pass_and_wrong_param_type():
    with pytest.raises(ConfigError, match="unknown pass 'remove_noop'; did you mean remove_noops"):
        instantiate("remove_noop")
    with pytest.raises(ConfigError, match=r"surgery.sanitize.max_iterations: expected an integer, got 'many'"):
        instantiate({"sanitize": {"max_iterations": "many"}})
    with pytest.raises(ConfigError, match=r"surgery.sanitize: unknown key 'fold'"):
        instantiate({"sanitize": {"fold": True}})


def test_reports_count_what_changed():
    _, reports = apply(legacy_detector(), "sanitize", "remove_noops")
    r = reports[1]
    assert r["nodes_before"] - r["nodes_after"] == r["nodes_removed"] - r["nodes_added"] == 5
    assert r["details"]["removed"] == {"Cast": 1, "Dropout": 1, "Identity": 1, "Transpose": 1, "Transpose pair": 1}
    assert set(r) >= {"pass", "params", "seconds", "ops_before", "ops_after", "numerics", "reason", "warnings"}


def test_every_builtin_is_listed_with_parameters():
    names = {p["name"] for p in list_passes()}
    assert names >= {
        "sanitize",
        "set_dims",
        "free_dims",
        "remove_noops",
        "cut",
        "extract",
        "convert_opset",
        "fold_batchnorm",
        "replace_with_plugin",
        "lower_plugins",
        "split_large_weights",
    }
    code, out, _ = run_cli("surgery", "--list")
    assert code == 0
    assert "set_dims: pin dynamic input dims" in out and "    dims: dict[str, int] = {}" in out
    assert "split_large_weights:" in out and "model_limit_bytes: int = 2147483647" in out


CONFIG = """
name: legacy
source: {onnx: legacy.onnx}
inputs: [{name: images, shape: [batch, 3, 32, 32]}]
dims: {batch: {min: 1, opt: 2, max: 4}}
surgery:
  passes:
    - sanitize
    - set_dims: {images: [2, 3, 32, 32]}
    - cut: {outputs: [fc_48]}
    - replace_with_plugin: {chain: [Softmax, TopK], plugin: TopKSoftmax}
    - fold_batchnorm
    - my_passes:rename_output
gate: {warmup: 1, iterations: 3, allow_missing_target: true}
parity: {samples: 1}
"""


def test_config_form_from_convert(user_passes):
    onnx.save(legacy_detector(), user_passes / "legacy.onnx")
    cfg = user_passes / "deploykit.yaml"
    cfg.write_text(CONFIG)
    with pytest.warns(UserWarning, match="chain Softmax -> TopK: the graph has no TopK node"):
        result = deploykit.convert(cfg, workdir=user_passes / "store", until="surgery")
    reports = result.artifacts["model"].manifest.summary["passes"]
    assert [r["pass"] for r in reports] == [
        "sanitize",
        "set_dims",
        "cut",
        "replace_with_plugin",
        "fold_batchnorm",
        "my_passes:rename_output",
    ]
    assert reports[3]["warnings"] and reports[4]["details"]["folded"]
    model = onnx.load(result.artifacts["model"].file("model.onnx"))
    assert [o.name for o in model.graph.output] == ["fc_48"]
    assert np.prod([d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]) == 2 * 3 * 32 * 32


class Liar(Scale):
    name = "liar"

    def run(self, model):
        return PassResult(super().run(model).model, False)


def test_a_pass_claiming_no_change_is_held_to_it():
    with pytest.raises(ConfigError, match=r"pass 'liar' reported no change but changed nodes"):
        run_passes(legacy_detector(), [Liar()], {}, atol=1e-4, rtol=1e-3, where="m.onnx")
