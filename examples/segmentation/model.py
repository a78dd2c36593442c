"""A small FPN-style segmenter: conv stem, depthwise-separable HardSwish blocks, lateral skips, and
bilinear Resize upsampling back to the input resolution.

Trained on synthetic scenes by train.py (weights.pt beside this file). Output ``logits``: one score
per class and pixel, (batch, 5, 64, 64); the classes are calibration/segmentation/make_scenes.py's
``CLASSES`` (background, rectangle, ellipse, triangle, lane).

The depthwise 3x3 + HardSwish block is the pattern real mobile segmenters use and the one INT8
handles worst: a depthwise filter has nine weights per channel, and HardSwish's kink sits where
per-tensor activation ranges are coarsest.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

NUM_CLASSES = 5


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


def depthwise_block(cin: int, cout: int, stride: int) -> nn.Sequential:
    """Depthwise 3x3 then pointwise 1x1, each with BatchNorm and HardSwish (MobileNetV3 style)."""
    return nn.Sequential(
        nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
        nn.BatchNorm2d(cin),
        nn.Hardswish(),
        nn.Conv2d(cin, cout, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.Hardswish(),
    )


class Segmenter(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        w = width
        self.stem = conv_bn(3, w, 2)  # stride 2
        self.c3 = depthwise_block(w, 2 * w, 2)  # stride 4
        self.c4 = nn.Sequential(depthwise_block(2 * w, 3 * w, 2), depthwise_block(3 * w, 3 * w, 1))  # stride 8
        self.lat4 = nn.Conv2d(3 * w, 2 * w, 1)
        self.lat3 = nn.Conv2d(2 * w, 2 * w, 1)
        self.lat2 = nn.Conv2d(w, 2 * w, 1)
        self.smooth = conv_bn(2 * w, 2 * w)
        self.head = nn.Conv2d(2 * w, NUM_CLASSES, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        c2 = self.stem(images)
        c3 = self.c3(c2)
        c4 = self.c4(c3)
        p3 = self.lat3(c3) + F.interpolate(self.lat4(c4), scale_factor=2.0, mode="bilinear", align_corners=False)
        p2 = self.lat2(c2) + F.interpolate(p3, scale_factor=2.0, mode="bilinear", align_corners=False)
        logits = self.head(self.smooth(p2))
        return F.interpolate(logits, scale_factor=2.0, mode="bilinear", align_corners=False)


def build() -> Segmenter:
    """The example segmenter, seeded; deploykit.yaml loads the trained weights (weights.pt, from train.py)."""
    torch.manual_seed(0)
    return Segmenter().eval()
