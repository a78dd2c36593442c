"""A small monocular depth network: a strided conv encoder, a U-Net decoder with concatenated skip
connections and bilinear Resize upsampling, and a bounded head.

Trained on synthetic rendered scenes by train.py (weights.pt beside this file). Output ``depth``:
metres per pixel, (batch, 1, 64, 64), ``MIN_DEPTH + (MAX_DEPTH - MIN_DEPTH) * sigmoid(x)`` so it
can never leave the scenes' range (calibration/depth/make_scenes.py).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

MIN_DEPTH, MAX_DEPTH = 0.5, 10.0


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class DepthNet(nn.Module):
    def __init__(self, width: int = 12) -> None:
        super().__init__()
        w = width
        self.e1 = conv_bn(3, w, 2)  # 32x32
        self.e2 = conv_bn(w, 2 * w, 2)  # 16x16
        self.e3 = nn.Sequential(conv_bn(2 * w, 4 * w, 2), conv_bn(4 * w, 4 * w))  # 8x8
        self.d2 = conv_bn(4 * w + 2 * w, 2 * w)
        self.d1 = conv_bn(2 * w + w, w)
        self.head = nn.Conv2d(w + 3, 1, 3, 1, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        s1 = self.e1(images)
        s2 = self.e2(s1)
        x = self.e3(s2)
        x = self.d2(torch.cat([F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False), s2], 1))
        x = self.d1(torch.cat([F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False), s1], 1))
        x = torch.cat([F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False), images], 1)
        return MIN_DEPTH + (MAX_DEPTH - MIN_DEPTH) * torch.sigmoid(self.head(x))


def build() -> DepthNet:
    """The example depth network, seeded; deploykit.yaml loads the trained weights (weights.pt, from train.py)."""
    torch.manual_seed(0)
    return DepthNet().eval()
