"""torch.ops.deploykit.* against the numpy references, and the inputs they must refuse."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deploykit.errors import DataError
from deploykit.plugins.torch_ops import bev_pool_v2, pillar_scatter
from tests.plugins.conftest import (
    BEV_CASES,
    PILLAR_CASES,
    bev_pool_reference,
    make_bev_inputs,
    make_pillar_inputs,
    pillar_scatter_reference,
)


def _torch(arrays):
    return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]


@pytest.mark.parametrize("messy", [False, True], ids=["clean", "messy"])
@pytest.mark.parametrize("case", BEV_CASES.values(), ids=BEV_CASES.keys())
def test_bev_pool_matches_reference(case, messy):
    *sizes, bev_shape = case
    inputs = make_bev_inputs(np.random.default_rng(0), *sizes, bev_shape, keep=0.8, messy=messy)
    got = bev_pool_v2(*_torch(inputs), list(bev_shape))
    assert got.dtype == torch.float32 and tuple(got.shape) == (sizes[0], *bev_shape, sizes[-1])
    np.testing.assert_allclose(got.numpy(), bev_pool_reference(*inputs, bev_shape), rtol=1e-5, atol=1e-5)


def test_bev_pool_is_the_registered_op():
    inputs = make_bev_inputs(np.random.default_rng(1), 1, 2, 3, 2, 2, 4, (1, 3, 3))
    direct = bev_pool_v2(*_torch(inputs), [1, 3, 3])
    via_ops = torch.ops.deploykit.bev_pool_v2(*_torch(inputs), [1, 3, 3])
    torch.testing.assert_close(direct, via_ops, rtol=0, atol=0)


def test_bev_pool_without_points_or_intervals_is_zero():
    depth, feat = torch.ones(1, 2, 3, 2, 2), torch.ones(1, 2, 2, 2, 4)
    empty, zeros = torch.zeros(0, dtype=torch.int32), torch.zeros(2, dtype=torch.int32)
    assert not bev_pool_v2(depth, feat, empty, empty, empty, empty, empty, [1, 3, 3]).any()
    assert not bev_pool_v2(depth, feat, empty, empty, empty, zeros, zeros, [1, 3, 3]).any()  # start = P = 0


def test_bev_pool_float16_sums_in_float32():
    inputs = make_bev_inputs(np.random.default_rng(2), 1, 2, 8, 4, 6, 16, (1, 8, 8))
    half = _torch(inputs)
    half[0], half[1] = half[0].half(), half[1].half()
    got = bev_pool_v2(*half, [1, 8, 8])
    assert got.dtype == torch.float16
    reference = bev_pool_reference(inputs[0].astype(np.float16), inputs[1].astype(np.float16), *inputs[2:], (1, 8, 8))
    np.testing.assert_allclose(got.float().numpy(), reference, rtol=2e-3, atol=2e-3)


def _bad_bev_inputs():
    return dict(
        zip(
            ("depth", "feat", "ranks_depth", "ranks_feat", "ranks_bev", "starts", "lengths"),
            _torch(make_bev_inputs(np.random.default_rng(3), 1, 2, 3, 2, 2, 4, (2, 3, 3), keep=1.0)),
            strict=True,
        )
    )


@pytest.mark.parametrize(
    ("tensor", "value", "message"),
    [
        ("ranks_depth", 24, r"BEVPoolV2: ranks_depth\[5\] = 24 is outside \[0, 24\) \(B\*N\*D\*H\*W\)"),
        ("ranks_depth", -1, r"ranks_depth\[5\] = -1 is outside \[0, 24\)"),
        ("ranks_feat", 8, r"ranks_feat\[5\] = 8 is outside \[0, 8\) \(B\*N\*H\*W\)"),
        ("ranks_bev", 18, r"ranks_bev\[5\] = 18 is outside \[0, 18\) \(B\*Z\*Y\*X\)"),
    ],
)
def test_bev_pool_names_the_rank_out_of_range(tensor, value, message):
    inputs = _bad_bev_inputs()
    inputs[tensor][5] = value
    with pytest.raises(DataError, match=message):
        bev_pool_v2(*inputs.values(), [2, 3, 3])


@pytest.mark.parametrize(("start", "length"), [(20, 5), (3, -1), (-1, 1)])
def test_bev_pool_names_the_interval_outside_the_points(start, length):
    inputs = _bad_bev_inputs()
    inputs["starts"][2], inputs["lengths"][2] = start, length
    with pytest.raises(
        DataError,
        match=rf"interval 2 \(interval_starts\[2\] = {start}, interval_lengths\[2\] = "
        rf"{length}\) is outside the 24 points",
    ):
        bev_pool_v2(*inputs.values(), [2, 3, 3])


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        ("ranks_feat", r"ranks_feat has P = 23 \(dim 0\) but ranks_depth has P = 24"),
        ("ranks_bev", r"ranks_bev has P = 23 \(dim 0\) but ranks_depth has P = 24"),
        ("lengths", r"interval_lengths has K = \d+ \(dim 0\) but interval_starts has K = \d+"),
    ],
)
def test_bev_pool_refuses_mismatched_lengths(tensor, message):
    inputs = _bad_bev_inputs()
    inputs[tensor] = inputs[tensor][:-1]
    with pytest.raises(DataError, match=message):
        bev_pool_v2(*inputs.values(), [2, 3, 3])


@pytest.mark.parametrize(
    ("tensor", "dtype", "message"),
    [
        ("ranks_depth", torch.int64, r"ranks_depth must be int32, got int64"),
        ("depth", torch.float64, r"depth must be float32 or float16, got float64"),
        ("feat", torch.float16, r"feat is float16 but depth is float32"),
    ],
)
def test_bev_pool_refuses_wrong_dtypes(tensor, dtype, message):
    inputs = _bad_bev_inputs()
    inputs[tensor] = inputs[tensor].to(dtype)
    with pytest.raises(DataError, match=message):
        bev_pool_v2(*inputs.values(), [2, 3, 3])


def test_bev_pool_refuses_batch_mismatch_and_wrong_rank():
    inputs = _bad_bev_inputs()
    inputs["feat"] = torch.cat([inputs["feat"]] * 2)
    with pytest.raises(DataError, match=r"feat has B = 2 \(dim 0\) but depth has B = 1"):
        bev_pool_v2(*inputs.values(), [2, 3, 3])
    inputs = _bad_bev_inputs()
    inputs["depth"] = inputs["depth"][0]
    with pytest.raises(DataError, match=r"depth must have rank 5 \(B, N, D, H, W\)"):
        bev_pool_v2(*inputs.values(), [2, 3, 3])


@pytest.mark.parametrize("case", PILLAR_CASES.values(), ids=PILLAR_CASES.keys())
def test_pillar_scatter_matches_reference(case):
    b, p, c, grid, counts, duplicates = case
    inputs = make_pillar_inputs(np.random.default_rng(4), b, p, c, grid, counts, duplicates=duplicates)
    got = pillar_scatter(*_torch(inputs), list(grid))
    assert tuple(got.shape) == (b, c, *grid) and got.is_contiguous()
    np.testing.assert_allclose(got.numpy(), pillar_scatter_reference(*inputs, grid), rtol=1e-6, atol=1e-6)


def test_pillar_scatter_with_no_live_pillar_is_zero():
    features, coords, _ = _torch(make_pillar_inputs(np.random.default_rng(5), 2, 4, 3, (5, 5), [4, 4]))
    assert not pillar_scatter(features, coords, torch.zeros(2, dtype=torch.int32), [5, 5]).any()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            2,
            10,
            r"PillarScatter: coords\[1, 3\] = \(-?\d+, 0, 10, \d+\) puts \(y, x\) = \(10, \d+\) outside the grid "
            r"\(ny, nx\) = \(10, 12\)",
        ),
        (3, -1, r"coords\[1, 3\] = \(-?\d+, 0, \d+, -1\) puts \(y, x\) = \(\d+, -1\)"),
    ],
)
def test_pillar_scatter_names_the_pillar_off_the_grid(field, value, message):
    features, coords, counts = _torch(make_pillar_inputs(np.random.default_rng(6), 2, 8, 3, (10, 12), [8, 5]))
    coords[1, 3, field] = value
    with pytest.raises(DataError, match=message):
        pillar_scatter(features, coords, counts, [10, 12])
    coords[1, 3, field] = 0
    coords[1, 6, 2] = -5  # padding (row 1 has 5 live pillars): ignored whatever it holds
    pillar_scatter(features, coords, counts, [10, 12])


@pytest.mark.parametrize("count", [9, -1])
def test_pillar_scatter_refuses_num_pillars_outside_range(count):
    features, coords, _ = _torch(make_pillar_inputs(np.random.default_rng(7), 2, 8, 3, (10, 12), [8, 8]))
    with pytest.raises(DataError, match=rf"num_pillars\[1\] = {count} is outside \[0, P = 8\]"):
        pillar_scatter(features, coords, torch.tensor([8, count], dtype=torch.int32), [10, 12])


def test_pillar_scatter_refuses_bad_shapes_and_dtypes():
    features, coords, counts = _torch(make_pillar_inputs(np.random.default_rng(8), 2, 8, 3, (10, 12), [8, 5]))
    with pytest.raises(DataError, match=r"coords has P = 7 \(dim 1\) but features has P = 8"):
        pillar_scatter(features, coords[:, :7], counts, [10, 12])
    with pytest.raises(DataError, match=r"coords dim 2 must be 4"):
        pillar_scatter(features, coords[..., :3], counts, [10, 12])
    with pytest.raises(DataError, match=r"num_pillars must be int32, got int64"):
        pillar_scatter(features, coords, counts.long(), [10, 12])


def test_fake_tensors_give_the_output_shape_without_data():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        depth, feat = torch.empty(2, 6, 59, 16, 44), torch.empty(2, 6, 16, 44, 80)
        ranks = [torch.empty(1000, dtype=torch.int32) for _ in range(3)]
        intervals = [torch.empty(50, dtype=torch.int32) for _ in range(2)]
        assert tuple(bev_pool_v2(depth, feat, *ranks, *intervals, [1, 128, 128]).shape) == (2, 1, 128, 128, 80)
        out = pillar_scatter(
            torch.empty(2, 100, 64),
            torch.empty(2, 100, 4, dtype=torch.int32),
            torch.empty(2, dtype=torch.int32),
            [496, 432],
        )
        assert tuple(out.shape) == (2, 64, 496, 432)
        with pytest.raises(DataError, match="ranks_feat has P = 999"):
            bev_pool_v2(depth, feat, ranks[0], ranks[1][:999], ranks[2], *intervals, [1, 128, 128])
