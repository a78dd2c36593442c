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


def test_the_screen_in_parts_computes_each_patch_as_the_whole_screening_graph_from_its_first_change():
    """A patch starts at the first part reading a switch it leaves quantized, on the values the run
    with every group raised made before it: the outputs are the whole graph's, bit for bit."""
    from functools import partial
    from types import SimpleNamespace

    import numpy as np

    from deploykit.graph.run import session_from_onnx
    from deploykit.quant.patch import switchable
    from deploykit.quant.screen import SCREENED, Screen
    from tests.quant.test_patch import base_of

    data = models.images(8, size=32)
    result, groups = base_of(models.depthwise(), "onnxruntime", data, high_precision="fp32")
    opener = partial(session_from_onnx, evaluator="onnxruntime", level="extended", spin=False)
    screen = Screen(SimpleNamespace(opener=opener), result.base, result.reference, groups, parts=4)
    names = list(groups)
    assert screen.covers(dict.fromkeys(names, SCREENED)) and len(screen._parts) > 2
    whole, switches = switchable(result.base, result.reference, groups)
    one = opener(whole)
    runs = []
    for _, session in screen._parts:  # count the parts each patch runs
        session.infer = partial(lambda real, feeds: runs.append(1) or real(feeds), session.infer)
    rng = np.random.default_rng()
    patches = [{}, dict.fromkeys(names, SCREENED), {g: SCREENED for g in names[:-1]}]
    patches += [{g: SCREENED for g in names if rng.random() < 0.7} for _ in range(4)]
    counts = []
    for patch in patches:
        run = screen.runner(patch)
        for sample in data[:2]:
            runs.clear()
            got = run(sample)
            counts.append(len(runs))
            want = one.infer({**sample, **{s: np.array(patch.get(g) == SCREENED) for g, s in switches.items()}})
            assert list(got) == list(want)
            for name in want:
                np.testing.assert_array_equal(got[name], want[name])
    parts = len(screen._parts)
    # each sample's run with every group raised is made once (beside the first patch), then kept; a patch
    # quantizing only the last group runs the last parts only
    assert counts[0] == counts[1] == 2 * parts and counts[2] == counts[3] == 0
    assert 0 < counts[4] == counts[5] < parts
