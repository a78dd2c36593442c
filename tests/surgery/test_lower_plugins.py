"""lower_plugins: registered bodies become model-local functions; the runner checks them end to end."""

import numpy as np
import pytest
from onnx import helper

from deploykit.errors import ConfigError, ModelError
from deploykit.surgery import plugin_bodies
from deploykit.surgery.patterns import register_pattern
from tests.surgery import plugin_toy
from tests.surgery.models import apply, feeds_for, ops, ort_run

register_pattern(plugin_toy.PATTERN, replace=True)
REPLACE = {"replace_with_plugin": {"pattern": "scaled_softmax"}}


@pytest.fixture
def toy_body():
    plugin_bodies.register_body("ScaledSoftmax", plugin_toy.body, replace=True)
    yield
    plugin_bodies.unregister_body("ScaledSoftmax")


def test_plugin_graph_runs_after_lowering_and_matches_the_original(toy_body):
    model = plugin_toy.attention_like((0.125, 0.125))
    out, reports = apply(model, REPLACE, "lower_plugins")
    assert ops(out).count("ScaledSoftmax") == 2  # nodes keep their op: the graph still names the plugin
    assert [(f.domain, f.name) for f in out.functions] == [("trt.plugins", "ScaledSoftmax")]
    assert reports[1]["numerics"] == "outputs match (1 compared)"  # against the graph before the plugins
    feeds = feeds_for(model)
    np.testing.assert_allclose(ort_run(out, feeds)["y"], ort_run(model, feeds)["y"], rtol=1e-6, atol=1e-6)


def test_attribute_variants_get_one_function_each_and_keep_their_op_type(toy_body):
    """TensorRT's parser finds a plugin by op type: a variant moves to a domain of its own, never to
    another op type, and keeps the plugin namespace TensorRT read from its old domain."""
    before, _ = apply(plugin_toy.attention_like((0.125, 0.5)), REPLACE)
    out, reports = apply(plugin_toy.attention_like((0.125, 0.5)), REPLACE, "lower_plugins")
    keys = sorted((f.domain, f.name) for f in out.functions)
    assert len(keys) == 2 and {name for _, name in keys} == {"ScaledSoftmax"}
    assert all(d.startswith("trt.plugins.") for d, _ in keys)
    plugin = [n for n in out.graph.node if n.op_type == "ScaledSoftmax"]
    assert sorted((n.domain, n.op_type) for n in plugin) == keys  # each node calls its own variant
    namespaces = {a.s.decode() for n in plugin for a in n.attribute if a.name == "plugin_namespace"}
    old = {
        a.s.decode()
        for n in before.graph.node
        if n.op_type == "ScaledSoftmax"
        for a in n.attribute
        if a.name == "plugin_namespace"
    } or {"trt.plugins"}
    assert namespaces == old
    assert reports[1]["numerics"] == "outputs match (1 compared)"


def test_a_wrong_body_is_caught_naming_both_passes():
    plugin_bodies.register_body("ScaledSoftmax", plugin_toy.wrong_body, replace=True)
    try:
        with pytest.raises(
            ModelError,
            match=r"passes 'replace_with_plugin'..'lower_plugins' changed numerics: "
            r"output 'y' differs",
        ):
            apply(plugin_toy.attention_like(), REPLACE, "lower_plugins")
    finally:
        plugin_bodies.unregister_body("ScaledSoftmax")


def test_no_body_is_a_warning_or_an_error_when_named():
    with pytest.warns(UserWarning, match="no body registered for ScaledSoftmax"):
        _, reports = apply(plugin_toy.attention_like(), REPLACE, "lower_plugins")
    assert reports[1]["modified"] is False
    with pytest.raises(ConfigError, match="no body is registered for plugin op 'ScaledSoftmax'"):
        apply(plugin_toy.attention_like(), REPLACE, {"lower_plugins": {"ops": ["ScaledSoftmax"]}})


def test_body_with_the_wrong_interface_names_the_node():
    def two_inputs(node, opset):
        return helper.make_function(
            "d", "f", ["A", "B"], ["Y"], [helper.make_node("Add", ["A", "B"], ["Y"])], [helper.make_opsetid("", opset)]
        )

    plugin_bodies.register_body("ScaledSoftmax", two_inputs, replace=True)
    try:
        with pytest.raises(ModelError, match="takes 2 inputs and gives 1 outputs; node 'softmax0_ScaledSoftmax'"):
            apply(plugin_toy.attention_like(), REPLACE, "lower_plugins")
    finally:
        plugin_bodies.unregister_body("ScaledSoftmax")


def test_nothing_to_lower():
    _, reports = apply(plugin_toy.attention_like(), "lower_plugins")
    assert reports[0]["modified"] is False and reports[0]["reason"] == "no plugin node without a body"


def test_model_exported_with_plugin_nodes_is_checked_from_the_first_runnable_graph(toy_body):
    replaced, _ = apply(plugin_toy.attention_like(), REPLACE)  # as if the exporter wrote the plugin nodes
    out, reports = apply(replaced, "sanitize", "lower_plugins", "remove_noops")
    assert reports[0]["numerics"].startswith("not checked: ONNX Runtime cannot run custom op(s)")
    assert reports[1]["numerics"].startswith(
        "not compared: ONNX Runtime cannot run custom op(s) trt.plugins::ScaledSoftmax in the input model"
    )
    feeds = feeds_for(out)
    np.testing.assert_allclose(ort_run(out, feeds)["y"], ort_run(plugin_toy.attention_like(), feeds)["y"], rtol=1e-6)


def test_variants_ask_tensorrt_for_the_plugin_the_unlowered_graph_asked_for(toy_body, tmp_path):
    """deploykit's build checks plugin nodes by (op type, version, namespace) before the parser runs:
    lowering with variants must not change what it asks for (it renamed the op type, and was refused)."""
    import onnx

    from deploykit.backends.trt_plugins import plugin_nodes

    before, _ = apply(plugin_toy.attention_like((0.125, 0.5)), REPLACE)
    after, _ = apply(plugin_toy.attention_like((0.125, 0.5)), REPLACE, "lower_plugins")
    creators = []
    for name, m in (("before", before), ("after", after)):
        onnx.save(m, tmp_path / f"{name}.onnx")
        creators.append(sorted(n.creator for n in plugin_nodes(tmp_path / f"{name}.onnx")))
    assert len(creators[1]) == 2 and {c[0] for c in creators[1]} == {"ScaledSoftmax"}
    if creators[0]:  # the plugin nodes named a namespace already
        assert creators[0] == creators[1]
