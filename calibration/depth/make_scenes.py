"""Synthetic rendered scenes with known depth for the depth example.

Deterministic: the same seed writes the same files::

    python calibration/depth/make_scenes.py calibration/depth/images --count 24 --seed 0
    python calibration/depth/make_scenes.py calibration/depth/validation --count 8 --seed 1000

A pinhole camera at a random height looks over a checkered ground plane towards a back wall; 1-5
upright boxes stand on the ground at random distances, drawn far to near so nearer ones occlude.
Depth along the optical axis is exact for every pixel: on the ground it is ``f * height / (y -
horizon)``, on a box face its distance, on the wall the wall's. Haze blends colours towards a sky
colour with distance, and the ground texture shrinks with it: the cues a monocular network learns.
64x64 PNG (lossless). ``make_scene`` returns the image and its (64, 64) float32 depth in metres;
examples/depth/train.py trains on such scenes drawn from another seed. No package code lives here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

SIZE = 64
MIN_DEPTH, MAX_DEPTH = 0.5, 10.0  # metres; the model's Sigmoid head spans this range


def make_scene(rng: np.random.Generator, size: int = SIZE) -> tuple[Image.Image, np.ndarray]:
    """One scene and its depth map (metres, float32)."""
    f = size * 0.9  # focal length in pixels
    horizon = size * rng.uniform(0.3, 0.5)
    height = rng.uniform(1.0, 2.0)
    wall = rng.uniform(6.0, MAX_DEPTH)
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float64) + 0.5
    below = ys > horizon + 1e-6
    depth = np.full((size, size), wall)
    ground = np.where(below, f * height / np.maximum(ys - horizon, 1e-6), np.inf)
    on_ground = ground < wall
    depth[on_ground] = ground[on_ground]
    # ground coordinates for the checker texture: lateral x and forward z
    gx = (xs - size / 2) * depth / f
    checker = ((np.floor(gx / 0.5) + np.floor(depth / 0.5)) % 2)[..., None]
    g0, g1 = rng.integers(40, 200, 3), rng.integers(40, 200, 3)
    colour = np.where(on_ground[..., None], g0 * checker + g1 * (1 - checker), rng.integers(60, 220, 3)).astype(np.float64)
    for d in sorted(rng.uniform(1.0, wall - 0.5, int(rng.integers(1, 6))), reverse=True):
        w, h = rng.uniform(0.4, 1.5), rng.uniform(0.5, 2.5)
        cx = rng.uniform(-2.0, 2.0) * d / 3
        x0, x1 = size / 2 + f * (cx - w / 2) / d, size / 2 + f * (cx + w / 2) / d
        y1 = horizon + f * height / d  # where the box touches the ground
        y0 = y1 - f * h / d
        face = (xs >= x0) & (xs < x1) & (ys >= y0) & (ys < y1)
        depth[face] = d
        shade = rng.integers(30, 230, 3) * (1.0 - 0.3 * (ys - y0) / max(y1 - y0, 1.0))[..., None]
        colour[face] = shade[face]
    sky = np.array([200.0, 210.0, 225.0])
    haze = 1.0 - np.exp(-depth / rng.uniform(6.0, 12.0))
    image = colour * (1 - haze[..., None]) + sky * haze[..., None] + rng.normal(0.0, 4.0, (size, size, 3))
    return Image.fromarray(np.clip(image, 0, 255).astype(np.uint8), "RGB"), np.clip(depth, MIN_DEPTH, MAX_DEPTH).astype(np.float32)


def write_scenes(folder: Path, count: int, seed: int) -> list[Path]:
    """Write ``count`` images ``img_0000.png`` ... into ``folder`` (depth maps are not stored)."""
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
