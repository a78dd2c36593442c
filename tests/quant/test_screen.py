"""Which models rank their groups through the screening graph: a rule on the graph alone."""

import onnx

from deploykit.quant.screen import pays
from tests.quant import models
from tests.quant.test_patch import attention


def test_the_screen_ranks_weight_heavy_graphs_and_not_those_whose_activations_dominate():
    # the same depthwise network: its weights stay, its activations grow with the input's area
    small, large = (onnx.shape_inference.infer_shapes(models.depthwise(size=s)) for s in (8, 256))
    assert pays(small) and not pays(large)
    assert pays(attention(tokens=8, dim=16))  # projections: weights of dim^2 against tokens x dim activations
