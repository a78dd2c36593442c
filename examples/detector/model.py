"""A small single-stage detector: conv backbone, FPN-style neck, box/class head.

Trained on synthetic scenes by train.py (the weights are weights.pt beside this file). Outputs per
cell of the stride-8 grid and per anchor: ``boxes`` (dx, dy, log w, log h) relative to the cell
centre and the anchor size, ``scores`` one sigmoid per class.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

NUM_CLASSES = 8  # the synthetic scenes use the first three: rectangle, ellipse, triangle
ANCHORS = 3
ANCHOR_SIZES = (16.0, 32.0, 64.0)  # pixels
STRIDE = 8


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class Detector(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        w = width
        self.stem = conv_bn(3, w, 2)
        self.c3 = nn.Sequential(conv_bn(w, 2 * w, 2), conv_bn(2 * w, 2 * w))  # stride 4
        self.c4 = nn.Sequential(conv_bn(2 * w, 4 * w, 2), conv_bn(4 * w, 4 * w))  # stride 8
        self.c5 = nn.Sequential(conv_bn(4 * w, 8 * w, 2), conv_bn(8 * w, 8 * w))  # stride 16
        self.lat5 = nn.Conv2d(8 * w, 4 * w, 1)
        self.lat4 = nn.Conv2d(4 * w, 4 * w, 1)
        self.smooth = conv_bn(4 * w, 4 * w)
        self.box = nn.Conv2d(4 * w, ANCHORS * 4, 1)
        self.cls = nn.Conv2d(4 * w, ANCHORS * NUM_CLASSES, 1)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c4 = self.c4(self.c3(self.stem(images)))
        c5 = self.c5(c4)
        p4 = self.smooth(self.lat4(c4) + F.interpolate(self.lat5(c5), scale_factor=2.0, mode="nearest"))
        b = images.shape[0]
        boxes = self.box(p4).permute(0, 2, 3, 1).reshape(b, -1, 4)
        scores = torch.sigmoid(self.cls(p4).permute(0, 2, 3, 1).reshape(b, -1, NUM_CLASSES))
        return boxes, scores


def build() -> Detector:
    """The example detector, seeded; deploykit.yaml loads the trained weights (weights.pt, from train.py)."""
    torch.manual_seed(0)
    return Detector().eval()
