"""torch custom ops for the plugins: ``torch.ops.deploykit.bev_pool_v2`` and ``.pillar_scatter``.

Importing this module defines both ops (CPU implementation in vectorized torch that follows the
C++ reference, and a fake implementation for ``torch.export``) and registers their ONNX export
with both exporters (:mod:`deploykit.plugins.onnx_export`). A model file uses them as::

    from deploykit.plugins.torch_ops import bev_pool_v2
    bev = bev_pool_v2(depth, feat, ranks_depth, ranks_feat, ranks_bev, starts, lengths, [1, 128, 128])

Both implementations check shapes and dtypes against the op description; the real one also checks
every index and raises :class:`deploykit.errors.DataError` naming the tensor and position, with the
C++ kernel's wording. Float16 inputs are accepted (the CUDA/TensorRT types) and summed in float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from deploykit.errors import DataError
from deploykit.plugins.descriptions import OpDescription, bind_shapes, check_dtypes, description, output_shape

_INDEX_HINT = (
    "an index lies outside its tensor; fix the preprocessing that computes it (the CUDA plugin would skip it silently)"
)


def _dtype_name(t: Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _check(op: OpDescription, tensors: Sequence[Tensor], attrs: dict[str, Sequence[int]]) -> dict[str, int]:
    """Dtypes and shapes against the description (also under fake tensors); returns the bound symbols."""
    check_dtypes(op, [_dtype_name(t) for t in tensors], None)
    return bind_shapes(op, [tuple(t.shape) for t in tensors], attrs)


def _first_bad(bad: Tensor) -> int | None:
    """The flat position of the first True in ``bad``, or None."""
    if bad.numel() == 0 or not bool(bad.any()):
        return None
    return int(bad.reshape(-1).nonzero()[0, 0])


def _check_ranks(name: str, ranks: Tensor, limit: int, extent: str) -> None:
    i = _first_bad((ranks < 0) | (ranks >= limit))
    if i is not None:
        raise DataError(
            f"BEVPoolV2: {name}[{i}] = {int(ranks[i])} is outside [0, {limit}) ({extent})", hint=_INDEX_HINT
        )


def _check_intervals(starts: Tensor, lengths: Tensor, points: int) -> None:
    starts, lengths = starts.long(), lengths.long()
    k = _first_bad((starts < 0) | (lengths < 0) | (starts + lengths > points))
    if k is not None:
        raise DataError(
            f"BEVPoolV2: interval {k} (interval_starts[{k}] = {int(starts[k])}, interval_lengths[{k}] = "
            f"{int(lengths[k])}) is outside the {points} points [0, P)",
            hint=_INDEX_HINT,
        )


@torch.library.custom_op("deploykit::bev_pool_v2", mutates_args=())
def bev_pool_v2(
    depth: Tensor,
    feat: Tensor,
    ranks_depth: Tensor,
    ranks_feat: Tensor,
    ranks_bev: Tensor,
    interval_starts: Tensor,
    interval_lengths: Tensor,
    bev_shape: list[int],
) -> Tensor:
    """BEVPoolV2 (plugins/bev_pool/README.md): the depth-weighted features of each interval summed into its cell.

    Args:
        depth: (B, N, D, H, W) float32/float16 depth distribution.
        feat: (B, N, H, W, C) features, channels last, depth's dtype.
        ranks_depth: (P,) int32 flat index into depth per point.
        ranks_feat: (P,) int32 flat index into feat's B*N*H*W rows per point.
        ranks_bev: (P,) int32 flat output cell per point (only an interval's first point is read).
        interval_starts: (K,) int32 first point of each interval.
        interval_lengths: (K,) int32 points per interval (0 allowed).
        bev_shape: (Z, Y, X).

    Returns:
        (B, Z, Y, X, C) pooled features in depth's dtype; cells no interval reaches are zero.
    """
    s = _check(
        _BEV,
        (depth, feat, ranks_depth, ranks_feat, ranks_bev, interval_starts, interval_lengths),
        {"bev_shape": bev_shape},
    )
    cells = s["B"] * s["Z"] * s["Y"] * s["X"]
    _check_ranks("ranks_depth", ranks_depth, depth.numel(), "B*N*D*H*W")
    _check_ranks("ranks_feat", ranks_feat, s["B"] * s["N"] * s["H"] * s["W"], "B*N*H*W")
    _check_ranks("ranks_bev", ranks_bev, cells, "B*Z*Y*X")
    _check_intervals(interval_starts, interval_lengths, s["P"])
    lengths = interval_lengths.long()
    nonempty = lengths > 0
    starts, lengths = interval_starts.long()[nonempty], lengths[nonempty]
    # Enumerate the points of every interval: point = start of its interval + position within it.
    owner = torch.repeat_interleave(torch.arange(starts.numel(), device=depth.device), lengths)
    offsets = torch.cumsum(lengths, 0) - lengths
    points = starts[owner] + torch.arange(owner.numel(), device=depth.device) - offsets[owner]
    weights = depth.reshape(-1).float()[ranks_depth.long()[points]]
    rows = feat.reshape(-1, s["C"]).float()
    # out = S @ rows with S[cell, row] = the summed weights of the points joining them: a sparse
    # product, so the (points, C) products are never materialised (6x faster at BEVDet's size).
    pool = torch.sparse_coo_tensor(
        torch.stack([ranks_bev.long()[starts][owner], ranks_feat.long()[points]]),
        weights,
        (cells, rows.shape[0]),
        check_invariants=False,
    )  # indices checked above
    out = torch.sparse.mm(pool, rows)
    return out.reshape(output_shape(_BEV, s)).to(depth.dtype)


@bev_pool_v2.register_fake
def _bev_pool_v2_fake(
    depth: Tensor,
    feat: Tensor,
    ranks_depth: Tensor,
    ranks_feat: Tensor,
    ranks_bev: Tensor,
    interval_starts: Tensor,
    interval_lengths: Tensor,
    bev_shape: list[int],
) -> Tensor:
    s = _check(
        _BEV,
        (depth, feat, ranks_depth, ranks_feat, ranks_bev, interval_starts, interval_lengths),
        {"bev_shape": bev_shape},
    )
    return depth.new_empty(output_shape(_BEV, s))


@torch.library.custom_op("deploykit::pillar_scatter", mutates_args=())
def pillar_scatter(features: Tensor, coords: Tensor, num_pillars: Tensor, grid: list[int]) -> Tensor:
    """PillarScatter (plugins/pillar_scatter/README.md): live pillars' features scattered onto a canvas.

    Args:
        features: (B, P, C) float32/float16 pillar features, padded to P per sample.
        coords: (B, P, 4) int32 (batch, z, y, x); only y and x are read, the batch is the row.
        num_pillars: (B,) int32 live pillars per sample; rows past it are ignored.
        grid: (ny, nx).

    Returns:
        (B, C, ny, nx) canvas in features' dtype; cells no pillar reaches are zero.
    """
    s = _check(_PILLARS, (features, coords, num_pillars), {"grid": grid})
    b, p, c, ny, nx = s["B"], s["P"], s["C"], s["ny"], s["nx"]
    counts = num_pillars.long()
    row = _first_bad((counts < 0) | (counts > p))
    if row is not None:
        raise DataError(
            f"PillarScatter: num_pillars[{row}] = {int(counts[row])} is outside [0, P = {p}]", hint=_INDEX_HINT
        )
    live = torch.arange(p, device=features.device)[None, :] < counts[:, None]
    y, x = coords[..., 2].long(), coords[..., 3].long()
    bad = _first_bad(live & ((y < 0) | (y >= ny) | (x < 0) | (x >= nx)))
    if bad is not None:
        r, q = divmod(bad, p)
        values = ", ".join(str(int(v)) for v in coords[r, q])
        raise DataError(
            f"PillarScatter: coords[{r}, {q}] = ({values}) puts (y, x) = ({int(y[r, q])}, {int(x[r, q])}) "
            f"outside the grid (ny, nx) = ({ny}, {nx})",
            hint=_INDEX_HINT,
        )
    # Added straight into the channels-first canvas: no (B, ny, nx, C) copy to transpose (4x faster).
    canvas = torch.zeros(b, c, ny * nx, dtype=torch.float32, device=features.device)
    for row in range(b):
        canvas[row].index_add_(1, (y[row] * nx + x[row])[live[row]], features[row].float()[live[row]].T)
    return canvas.reshape(b, c, ny, nx).to(features.dtype)


@pillar_scatter.register_fake
def _pillar_scatter_fake(features: Tensor, coords: Tensor, num_pillars: Tensor, grid: list[int]) -> Tensor:
    s = _check(_PILLARS, (features, coords, num_pillars), {"grid": grid})
    return features.new_empty(output_shape(_PILLARS, s))


_BEV = description("BEVPoolV2")
_PILLARS = description("PillarScatter")


def _register_exporters() -> None:
    from deploykit.plugins.onnx_export import register_exporters

    register_exporters()


_register_exporters()
