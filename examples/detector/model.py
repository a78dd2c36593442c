"""A small single-stage detector: conv backbone, FPN-style neck, box/class head.

Weights come from a fixed seed, so every run exports the same model (and the cache can reuse it).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

NUM_CLASSES = 8
ANCHORS = 3


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


def _image_like(generator: torch.Generator, n: int) -> torch.Tensor:
    """Smooth blobs in [0, 1], like the calibration images: inputs whose content changes the outputs."""
    coarse = torch.rand(n, 3, 8, 8, generator=generator)
    return F.interpolate(coarse, size=(128, 128), mode="bilinear", align_corners=False)


def build() -> Detector:
    """The example detector with seeded weights and BatchNorm statistics measured on image-like data.

    Random BatchNorm statistics would leave outputs that barely depend on the image (0.25 % apart
    between an image and a black frame), and any quantization error would then look small.
    """
    torch.manual_seed(0)
    model = Detector()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = None  # cumulative average over the batches below
    generator = torch.Generator().manual_seed(0)
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(_image_like(generator, 8))
    return model.eval()
