"""replace_with_plugin: declarative and chain patterns, plugin attributes, no-match warnings and errors."""

import numpy as np
import onnx
import pytest
from onnx import helper

from deploykit.errors import ConfigError
from deploykit.surgery.patterns import Chain, Node, Pattern, PluginSpec, get_pattern, register_pattern
from deploykit.surgery.runner import SurgeryWarning
from tests.surgery import plugin_toy
from tests.surgery.models import apply, make, ops

register_pattern(plugin_toy.PATTERN, replace=True)


def attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def test_registered_pattern_becomes_plugin_nodes_with_attributes():
    out, reports = apply(
        plugin_toy.attention_like((0.125, 0.5)), {"replace_with_plugin": {"pattern": "scaled_softmax"}}
    )
    plugins = [n for n in out.graph.node if n.op_type == "ScaledSoftmax"]
    assert len(plugins) == 2 and ops(out).count("Softmax") == 1  # the unscaled one stays
    assert [attrs(n) for n in plugins] == [
        {"plugin_namespace": b"toy", "plugin_version": b"2", "scale": s} for s in (0.125, 0.5)
    ]
    assert {n.domain for n in plugins} == {"trt.plugins"}
    assert any(o.domain == "trt.plugins" for o in out.opset_import)
    report = reports[0]
    assert report["nodes_removed"] == 4 and report["nodes_added"] == 2
    assert report["numerics"].startswith("deferred: ONNX Runtime cannot run custom op(s) trt.plugins::ScaledSoftmax")
    onnx.checker.check_model(out)  # what TensorRT's parser will read


def test_user_values_override_the_pattern_defaults():
    out, reports = apply(
        plugin_toy.attention_like(),
        {
            "replace_with_plugin": {
                "pattern": "scaled_softmax",
                "plugin": "MySoftmax",
                "plugin_namespace": "",
                "domain": "my.plugins",
                "attributes": {"heads": 2, "bias": [1.0, 2.5]},
                "max_matches": 1,
            }
        },
    )
    node = next(n for n in out.graph.node if n.op_type == "MySoftmax")
    assert node.domain == "my.plugins" and attrs(node)["heads"] == 2 and attrs(node)["bias"] == [1.0, 2.5]
    assert attrs(node)["plugin_namespace"] == b"toy"  # "" keeps the pattern's namespace
    assert len(reports[0]["details"]["replaced"]) == 1


def test_chain_form_from_config():
    out, _ = apply(
        plugin_toy.attention_like(),
        {"replace_with_plugin": {"chain": ["MatMul", "Mul", "Softmax"], "plugin": "QKSoftmax"}},
    )
    plugins = [n for n in out.graph.node if n.op_type == "QKSoftmax"]
    assert [list(n.input) for n in plugins] == [["q", "k", "scale0"], ["q", "k", "scale1"]]
    assert [list(n.output) for n in plugins] == [["p0"], ["p1"]]


def test_no_match_is_a_warning_with_the_reason():
    model = make([helper.make_node("Relu", ["x"], ["y"])], [("x", 1, [2])], [("y", 1, [2])])
    with pytest.warns(SurgeryWarning, match="the graph has no Softmax node"):
        out, reports = apply(model, {"replace_with_plugin": {"pattern": "scaled_softmax"}})
    assert reports[0]["modified"] is False and reports[0]["warnings"]


def test_near_miss_says_what_broke_the_match():
    model = plugin_toy.attention_like()
    model.graph.output.append(onnx.helper.make_tensor_value_info("scaled0", 1, [4, 4]))  # inner tensor escapes
    softmax = next(n for n in model.graph.node if n.name == "softmax1")
    softmax.attribute[0].i = 0  # axis 0: not the pattern's
    with pytest.warns(SurgeryWarning) as caught:
        apply(model, {"replace_with_plugin": {"pattern": "scaled_softmax"}})
    assert "nearest: 'softmax0' (Softmax): inner tensor 'scaled0' is a graph output" in str(caught[0].message)


def test_required_pattern_that_does_not_match_is_a_config_error():
    model = make([helper.make_node("Relu", ["x"], ["y"])], [("x", 1, [2])], [("y", 1, [2])])
    with pytest.raises(ConfigError, match="pass 'replace_with_plugin': .*no Softmax node"):
        apply(model, {"replace_with_plugin": {"pattern": "scaled_softmax", "required": True}})


@pytest.mark.parametrize(
    "params, message",
    [
        ({"plugin": "X"}, "give exactly one of 'pattern'"),
        ({"pattern": "scaled_softmx"}, "unknown pattern 'scaled_softmx'; did you mean scaled_softmax"),
        ({"chain": ["Mul", "Softmax"]}, "no plugin name"),
    ],
)
def test_bad_parameters(params, message):
    with pytest.raises(ConfigError, match=message):
        apply(plugin_toy.attention_like(), {"replace_with_plugin": params})


def test_pattern_by_module_attr_and_multi_output_patterns():
    assert get_pattern("tests.surgery.plugin_toy:PATTERN") is plugin_toy.PATTERN
    split = Pattern(
        "split_two",
        nodes=(
            Node("Split", ("x",), ("a", "b"), attrs={"axis": 0}),
            Node("Relu", ("a",), ("ra",)),
            Node("Neg", ("b",), ("nb",)),
        ),
        inputs=("x",),
        outputs=("ra", "nb"),
        plugin=PluginSpec("SplitAct"),
    )
    register_pattern(split, replace=True)
    nodes = [
        helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=2),
        helper.make_node("Relu", ["a"], ["ra"]),
        helper.make_node("Neg", ["b"], ["nb"]),
        helper.make_node("Add", ["ra", "nb"], ["y"]),
    ]
    model = make(nodes, [("x", 1, [4])], [("y", 1, [2])], opset=18)
    out, _ = apply(model, {"replace_with_plugin": {"pattern": "split_two"}})
    assert ops(out) == ["SplitAct", "Add"] and list(out.graph.node[0].output) == ["ra", "nb"]
    assert Chain(("Relu",)).find(model.graph).matches[0].outputs == ["ra"]
    np.testing.assert_equal(len(out.graph.value_info) >= 2, True)  # plugin outputs keep their types
