"""The three CPU paths (C++ kernel via deploykit.plugins.native, torch op, ONNX function on ONNX
Runtime) against the numpy reference on the same random inputs, and the errors each raises."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deploykit.errors import DataError
from deploykit.plugins.torch_ops import bev_pool_v2, pillar_scatter
from tests.plugins.conftest import (
    BEV_CASES,
    BEV_NAMES,
    PILLAR_CASES,
    PILLAR_NAMES,
    bev_pool_reference,
    make_bev_inputs,
    make_pillar_inputs,
    pillar_scatter_reference,
    plugin_model,
    run_onnx,
)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("case", BEV_CASES.values(), ids=BEV_CASES.keys())
def test_bev_pool_paths_agree(cpu_kernels, case, seed):
    *sizes, bev_shape = case
    inputs = make_bev_inputs(np.random.default_rng(seed), *sizes, bev_shape, keep=0.7, messy=bool(seed))
    expected = bev_pool_reference(*inputs, bev_shape)
    paths = {
        "cpp": cpu_kernels.bev_pool_v2(*inputs, bev_shape),
        "torch": bev_pool_v2(*(torch.from_numpy(a) for a in inputs), list(bev_shape)).numpy(),
        "onnx": run_onnx(
            plugin_model("BEVPoolV2", {"bev_shape": list(bev_shape)}), dict(zip(BEV_NAMES, inputs, strict=True))
        ),
    }
    for name, got in paths.items():
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("case", PILLAR_CASES.values(), ids=PILLAR_CASES.keys())
def test_pillar_scatter_paths_agree(cpu_kernels, case):
    b, p, c, grid, counts, duplicates = case
    inputs = make_pillar_inputs(np.random.default_rng(2), b, p, c, grid, counts, duplicates=duplicates)
    expected = pillar_scatter_reference(*inputs, grid)
    paths = {
        "cpp": cpu_kernels.pillar_scatter(*inputs, grid),
        "torch": pillar_scatter(*(torch.from_numpy(a) for a in inputs), list(grid)).numpy(),
        "onnx": run_onnx(
            plugin_model("PillarScatter", {"grid": list(grid)}), dict(zip(PILLAR_NAMES, inputs, strict=True))
        ),
    }
    for name, got in paths.items():
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6, err_msg=name)


def test_cpp_and_torch_raise_the_same_index_error(cpu_kernels):
    inputs = list(make_bev_inputs(np.random.default_rng(3), 1, 2, 3, 2, 2, 4, (2, 3, 3), keep=1.0))
    inputs[3][7] = 8
    message = r"BEVPoolV2: ranks_feat\[7\] = 8 is outside \[0, 8\) \(B\*N\*H\*W\)"
    with pytest.raises(DataError, match=message):
        cpu_kernels.bev_pool_v2(*inputs, (2, 3, 3))
    with pytest.raises(DataError, match=message):
        bev_pool_v2(*(torch.from_numpy(a) for a in inputs), [2, 3, 3])
    features, coords, counts = make_pillar_inputs(np.random.default_rng(4), 2, 8, 3, (10, 12), [8, 5])
    coords[0, 0, 3] = 12
    message = r"PillarScatter: coords\[0, 0\] = \(-?\d+, 0, 0, 12\) puts \(y, x\) = \(0, 12\) outside the grid"
    with pytest.raises(DataError, match=message):
        cpu_kernels.pillar_scatter(features, coords, counts, (10, 12))
    with pytest.raises(DataError, match=message):
        pillar_scatter(*(torch.from_numpy(a) for a in (features, coords, counts)), [10, 12])


def test_binding_checks_what_the_c_abi_cannot_see(cpu_kernels):
    inputs = list(make_bev_inputs(np.random.default_rng(5), 1, 2, 3, 2, 2, 4, (2, 3, 3), keep=1.0))
    with pytest.raises(DataError, match=r"ranks_bev has P = 23 \(dim 0\) but ranks_depth has P = 24"):
        cpu_kernels.bev_pool_v2(*inputs[:4], inputs[4][:-1], *inputs[5:], (2, 3, 3))
    with pytest.raises(DataError, match=r"ranks_depth must be int32 on cpu, got int64"):
        cpu_kernels.bev_pool_v2(inputs[0], inputs[1], inputs[2].astype(np.int64), *inputs[3:], (2, 3, 3))
    with pytest.raises(DataError, match=r"depth must be float32 on cpu, got float16"):
        cpu_kernels.bev_pool_v2(inputs[0].astype(np.float16), *inputs[1:], (2, 3, 3))
    with pytest.raises(DataError, match=r"num_pillars has B = 3 \(dim 0\) but features has B = 2"):
        features, coords, _ = make_pillar_inputs(np.random.default_rng(6), 2, 4, 3, (5, 5), [4, 4])
        cpu_kernels.pillar_scatter(features, coords, np.array([1, 1, 1], np.int32), (5, 5))


def test_binding_reads_non_contiguous_arrays(cpu_kernels):
    features, coords, counts = make_pillar_inputs(np.random.default_rng(7), 2, 6, 3, (4, 5), [6, 2])
    strided = np.asfortranarray(features)
    np.testing.assert_allclose(
        cpu_kernels.pillar_scatter(strided, coords, counts, (4, 5)),
        pillar_scatter_reference(features, coords, counts, (4, 5)),
        rtol=1e-6,
        atol=1e-6,
    )
