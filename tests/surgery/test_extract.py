"""extract: the subgraph between named tensors, fed and compared on the full graph's inner tensors."""

import numpy as np
import pytest

from deploykit.errors import ConfigError
from deploykit.surgery import ortcheck
from tests.surgery.models import apply, feeds_for, legacy_detector, ops, ort_run


def test_extract_middle_and_compare_with_the_full_graph():
    model = legacy_detector(weights_as="initializer")
    out, reports = apply(model, {"extract": {"inputs": ["relu_28"], "outputs": ["relu_38"]}})
    assert [i.name for i in out.graph.input] == ["relu_28"] and [o.name for o in out.graph.output] == ["relu_38"]
    assert ops(out) == ["Dropout", "Conv", "BatchNormalization", "Relu"]
    assert reports[0]["numerics"] == "outputs match (1 compared)"
    feeds = feeds_for(model)
    inner = ortcheck.run(model, feeds, ["relu_28", "relu_38"])
    np.testing.assert_array_equal(ort_run(out, {"relu_28": inner["relu_28"]})["relu_38"], inner["relu_38"])
    assert len(out.graph.initializer) == 6  # only the weights the subgraph reads


def test_input_the_subgraph_needs_but_lacks_is_named():
    with pytest.raises(ConfigError, match=r"needs graph input 'images' \(read by 'conv_3' \(Conv\)\)"):
        apply(
            legacy_detector(weights_as="initializer"),
            {"extract": {"inputs": ["relu_28"], "outputs": ["logits", "relu_9"]}},
        )


def test_both_lists_required():
    with pytest.raises(ConfigError, match="give both inputs and outputs"):
        apply(legacy_detector(), {"extract": {"outputs": ["logits"]}})
