"""Synthetic scenes with per-pixel class masks for the segmentation example.

Deterministic: the same seed writes the same files::

    python calibration/segmentation/make_scenes.py calibration/segmentation/images --count 24 --seed 0
    python calibration/segmentation/make_scenes.py calibration/segmentation/validation --count 8 --seed 1000

Each scene (64x64 PNG, lossless so the stored images are the ones trained on): a textured
two-colour gradient background (class 0), then 2-6 filled shapes in random colours drawn in order,
a later one on top: rectangles (1), ellipses (2), triangles (3) and thick lane-like strokes (4),
and sensor noise. Colours carry no class information: the network has to use shape.
``make_scene`` returns the image and its mask; examples/segmentation/train.py trains on such
scenes drawn from another seed. No package code lives here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SIZE = 64
CLASSES = ("background", "rectangle", "ellipse", "triangle", "lane")


def make_scene(rng: np.random.Generator, size: int = SIZE) -> tuple[Image.Image, np.ndarray]:
    """One scene and its (size, size) uint8 class mask."""
    top, bottom = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    t = np.linspace(0.0, 1.0, size)[:, None, None]
    background = (top * (1 - t) + bottom * t).repeat(size, axis=1)
    blobs = rng.normal(0.0, 18.0, (size // 8, size // 8, 1)).repeat(8, 0).repeat(8, 1)  # coarse texture
    image = Image.fromarray(np.clip(background + blobs, 0, 255).astype(np.uint8), "RGB")
    mask = Image.new("L", (size, size), 0)
    draw, mdraw = ImageDraw.Draw(image), ImageDraw.Draw(mask)
    for _ in range(int(rng.integers(2, 7))):
        cls = int(rng.integers(1, len(CLASSES)))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        x0, y0 = (int(v) for v in rng.integers(0, size - 8, 2))
        w, h = (int(v) for v in rng.integers(8, size // 2, 2))
        for d, fill in ((draw, colour), (mdraw, cls)):
            if cls == 1:
                d.rectangle([x0, y0, x0 + w, y0 + h], fill=fill)
            elif cls == 2:
                d.ellipse([x0, y0, x0 + w, y0 + h], fill=fill)
            elif cls == 3:
                d.polygon([(x0, y0 + h), (x0 + w // 2, y0), (x0 + w, y0 + h)], fill=fill)
            else:
                d.line([(x0, y0), (x0 + w, y0 + h)], fill=fill, width=3)
    noisy = np.asarray(image, np.float32) + rng.normal(0.0, 6.0, (size, size, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB"), np.asarray(mask, np.uint8).copy()


def write_scenes(folder: Path, count: int, seed: int) -> list[Path]:
    """Write ``count`` images ``img_0000.png`` ... into ``folder`` (masks are not stored); return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        path = folder / f"img_{i:04d}.png"
        make_scene(rng)[0].save(path)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_scenes(args.folder, args.count, args.seed)


if __name__ == "__main__":
    main()
