"""Synthetic street-scene-like images for the example detector's calibration and validation sets.

Deterministic: the same seed writes the same files, so the committed sets can be regenerated and
the benchmark can make larger sets (256, 1024 images) without storing them::

    python calibration/detector/make_images.py calibration/detector/images --count 64 --seed 0
    python calibration/detector/make_images.py calibration/detector/validation --count 8 --seed 1000

Each image: a two-colour gradient background, 2-7 filled rectangles, ellipses and triangles
(the "objects"), and sensor-like Gaussian noise; 128x128 JPEG. ``make_scene`` also returns the
objects' classes and boxes: examples/detector/train.py trains the example detector on such scenes
(drawn from another seed). No package code lives here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SIZE = 128
SHAPES = ("rectangle", "ellipse", "triangle")  # class index = position


def make_image(rng: np.random.Generator, size: int = SIZE) -> Image.Image:
    """One synthetic scene."""
    return make_scene(rng, size)[0]


def make_scene(rng: np.random.Generator, size: int = SIZE) -> tuple[Image.Image, list[tuple[int, int, int, int, int]]]:
    """One synthetic scene and its objects as ``(class, x0, y0, x1, y1)`` in drawing order (later on top)."""
    top, bottom = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    t = np.linspace(0.0, 1.0, size)[:, None, None]
    background = (top * (1 - t) + bottom * t).repeat(size, axis=1)
    image = Image.fromarray(background.astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    objects = []
    for _ in range(int(rng.integers(2, 8))):
        x0, y0 = (int(v) for v in rng.integers(0, size - 16, 2))
        w, h = (int(v) for v in rng.integers(8, size // 2, 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        shape = int(rng.integers(0, 3))
        if shape == 0:
            draw.rectangle([x0, y0, x0 + w, y0 + h], fill=colour)
        elif shape == 1:
            draw.ellipse([x0, y0, x0 + w, y0 + h], fill=colour)
        else:
            draw.polygon([(x0, y0 + h), (x0 + w // 2, y0), (x0 + w, y0 + h)], fill=colour)
        objects.append((shape, x0, y0, min(x0 + w, size), min(y0 + h, size)))
    noisy = np.asarray(image, np.float32) + rng.normal(0.0, 6.0, (size, size, 3))
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), "RGB"), objects


def write_images(folder: Path, count: int, seed: int) -> list[Path]:
    """Write ``count`` images named ``img_0000.jpg`` ... into ``folder``; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        path = folder / f"img_{i:04d}.jpg"
        make_image(rng).save(path, quality=90)
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_images(args.folder, args.count, args.seed)


if __name__ == "__main__":
    main()
