"""Synthetic two-camera frames for the BEV example's calibration set (examples/bev/calibration/).

Deterministic: the same seed writes the same files, so the committed set can be regenerated::

    python examples/bev/make_calibration.py examples/bev/calibration --count 8 --seed 0

Each frame holds one 64 x 128 image per camera: a sky-to-road gradient, a horizon, 3-8 boxes
("vehicles") standing on the road and sensor-like noise, normalised like ImageNet-preprocessed
input. Stored as ``frame_XX.npz`` with one float32 array ``images`` of shape (1, 2, 3, 64, 128).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

CAMERAS, HEIGHT, WIDTH = 2, 64, 128
MEAN = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
STD = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]


def camera_image(rng: np.random.Generator) -> np.ndarray:
    """One (3, H, W) image in [0, 1]."""
    horizon = int(rng.integers(HEIGHT // 3, HEIGHT // 2))
    sky, road = rng.uniform(0.5, 0.9, 3), rng.uniform(0.1, 0.4, 3)
    rows = np.linspace(0, 1, HEIGHT)[:, None]
    image = np.where(
        np.arange(HEIGHT)[:, None] < horizon,
        sky[:, None, None] * (1 - 0.3 * rows),
        road[:, None, None] * (0.7 + 0.3 * rows),
    )
    image = np.broadcast_to(image, (3, HEIGHT, WIDTH)).copy()
    for _ in range(int(rng.integers(3, 9))):
        bottom = int(rng.integers(horizon + 2, HEIGHT))
        height = max(2, (bottom - horizon) // 2 + int(rng.integers(0, 6)))
        left = int(rng.integers(0, WIDTH - 8))
        width = int(rng.integers(6, 30))
        image[:, bottom - height : bottom, left : left + width] = rng.uniform(0, 1, 3)[:, None, None]
    image += rng.normal(0, 0.02, image.shape)
    return np.clip(image, 0, 1)


def frame(rng: np.random.Generator) -> np.ndarray:
    images = np.stack([(camera_image(rng) - MEAN) / STD for _ in range(CAMERAS)])
    return np.round(images.astype(np.float32) * 64) / 64  # coarse steps compress well and change nothing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    for i in range(args.count):
        np.savez_compressed(args.folder / f"frame_{i:02d}.npz", images=frame(rng)[None].astype(np.float32))


if __name__ == "__main__":
    main()
