"""A small lift-splat camera-BEV model: image encoder -> depth x context -> BEVPoolV2 -> BEV head.

Two cameras look forward and backward; each pixel of the stride-8 feature map lifts into D depth
bins, and every (camera, depth bin, pixel) frustum point that lands inside the BEV grid adds its
depth-weighted context features to its BEV cell. The camera geometry is fixed, so the points'
ranks and intervals (BEVDet's ``bev_pool_v2`` preprocessing) are computed once here and held as
buffers; they become initializers of the exported ONNX. Weights come from a fixed seed.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from deploykit.plugins.torch_ops import bev_pool_v2

CAMERAS = 2
IMAGE = (64, 128)  # H, W of each camera image
STRIDE = 8
DEPTH_BINS = 16
DEPTHS = 3.0 + 2.0 * np.arange(DEPTH_BINS)  # bin centres, 3 m .. 33 m
CHANNELS = 24
BEV = (1, 32, 32)  # Z, Y, X
CELL = 2.0  # metres: the grid spans [-32, 32] m
CLASSES = 3


def frustum_ranks(
    cameras: int = CAMERAS,
    image: tuple[int, int] = IMAGE,
    stride: int = STRIDE,
    depths: np.ndarray = DEPTHS,
    bev: tuple[int, int, int] = BEV,
    cell: float = CELL,
    fov_degrees: float = 60.0,
) -> dict[str, np.ndarray]:
    """BEVDet's preprocessing for a fixed rig: the frustum points inside the grid, sorted by cell.

    Cameras sit 1.5 m above the ground, evenly spread in yaw; the grid is centred on the ego car
    with square cells of ``cell`` metres and keeps points between 2 m below and 4 m above ground.
    Returns int32 ``ranks_depth``, ``ranks_feat``, ``ranks_bev``, ``interval_starts``, ``interval_lengths``.
    """
    h, w = image[0] // stride, image[1] // stride
    focal = (image[1] / 2) / math.tan(math.radians(fov_degrees) / 2)
    d, v, u = np.meshgrid(depths, (np.arange(h) + 0.5) * stride, (np.arange(w) + 0.5) * stride, indexing="ij")
    right, down = (u - image[1] / 2) * d / focal, (v - image[0] / 2) * d / focal
    half_x, half_y = bev[2] * cell / 2, bev[1] * cell / 2
    ranks_depth, ranks_feat, ranks_bev = [], [], []
    for n in range(cameras):
        yaw = 2 * math.pi * n / cameras
        forward_x, forward_y = math.cos(yaw), math.sin(yaw)
        x = d * forward_x + right * forward_y  # ego frame: x forward, y left, z up
        y = d * forward_y - right * forward_x
        z = 1.5 - down
        ix, iy = np.floor((x + half_x) / cell).astype(np.int64), np.floor((y + half_y) / cell).astype(np.int64)
        keep = (ix >= 0) & (ix < bev[2]) & (iy >= 0) & (iy < bev[1]) & (z > -2) & (z < 4)
        di, vi, ui = np.nonzero(keep)
        ranks_depth.append(((n * len(depths) + di) * h + vi) * w + ui)
        ranks_feat.append((n * h + vi) * w + ui)
        ranks_bev.append(iy[keep] * bev[2] + ix[keep])
    ranks_depth, ranks_feat, ranks_bev = (np.concatenate(r) for r in (ranks_depth, ranks_feat, ranks_bev))
    order = np.argsort(ranks_bev, kind="stable")
    ranks_depth, ranks_feat, ranks_bev = ranks_depth[order], ranks_feat[order], ranks_bev[order]
    starts = np.flatnonzero(np.r_[True, np.diff(ranks_bev) != 0]) if ranks_bev.size else np.zeros(0, np.int64)
    lengths = np.diff(np.r_[starts, ranks_bev.size])
    arrays = {
        "ranks_depth": ranks_depth,
        "ranks_feat": ranks_feat,
        "ranks_bev": ranks_bev,
        "interval_starts": starts,
        "interval_lengths": lengths,
    }
    return {k: v.astype(np.int32) for k, v in arrays.items()}


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class LiftSplat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(conv_bn(3, 16, 2), conv_bn(16, 32, 2), conv_bn(32, 48, 2), conv_bn(48, 48))
        self.depth_net = nn.Conv2d(48, DEPTH_BINS + CHANNELS, 1)
        self.bev_encoder = nn.Sequential(conv_bn(BEV[0] * CHANNELS, 32), conv_bn(32, 32))
        self.heatmap = nn.Conv2d(32, CLASSES, 1)
        self.regression = nn.Conv2d(32, 6, 1)  # dx, dy, log w, log l, sin, cos
        for name, value in frustum_ranks().items():
            self.register_buffer(name, torch.from_numpy(value))

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, (h, w) = images.shape[1], (IMAGE[0] // STRIDE, IMAGE[1] // STRIDE)
        x = self.depth_net(self.encoder(images.flatten(0, 1)))  # (N, D + C, H, W)
        depth = x[:, :DEPTH_BINS].softmax(dim=1).reshape(1, n, DEPTH_BINS, h, w)
        feat = x[:, DEPTH_BINS:].permute(0, 2, 3, 1).reshape(1, n, h, w, CHANNELS)
        bev = bev_pool_v2(
            depth,
            feat,
            self.ranks_depth,
            self.ranks_feat,
            self.ranks_bev,
            self.interval_starts,
            self.interval_lengths,
            list(BEV),
        )  # (1, Z, Y, X, C)
        bev = bev.permute(0, 1, 4, 2, 3).reshape(1, BEV[0] * CHANNELS, BEV[1], BEV[2])
        y = self.bev_encoder(bev)
        return torch.sigmoid(self.heatmap(y)), self.regression(y)


def build() -> LiftSplat:
    """The example model with seeded weights and non-trivial BatchNorm statistics.

    He-initialised convolutions keep the activations' scale through the layers, so the outputs
    depend on the input as a trained model's do (PyTorch's default init shrinks them ~2x per layer).
    """
    torch.manual_seed(0)
    model = LiftSplat()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval()
