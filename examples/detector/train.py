"""Train the example detector on synthetic scenes and write ``weights.pt``, which deploykit.yaml loads.

    python examples/detector/train.py          # about a minute on two CPU cores

The scenes come from calibration/detector/make_images.py, drawn from a seed that neither the
calibration nor the validation set uses. The committed ``weights.pt`` is this script's output.

Why trained weights: people deploy trained networks, and a randomly initialised one is a poor
stand-in for what quantization does to them. Measured on this network with random weights
(BatchNorm statistics from images): noise of 1 % of the signal after the stem came out as 2.7 % at
``boxes`` (0.7 % once trained), and INT8 with per-tensor activations missed rel-L2 0.1 whatever the
calibration method, quantizer flavour or set of excluded nodes. bench/bench_quantize.py keeps it as
the hard case.

Targets, per cell of the stride-8 grid and per anchor (the one whose size is nearest the object's):
``scores`` is one-hot on the object's shape for the cell holding its centre, ``boxes`` is
(dx, dy) from the cell centre in strides and log(w, h / anchor size).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "calibration" / "detector")]

from make_images import SIZE, make_scene  # noqa: E402 (calibration/detector/make_images.py)
from model import ANCHOR_SIZES, ANCHORS, NUM_CLASSES, STRIDE, Detector  # noqa: E402

GRID = SIZE // STRIDE
SEED = 12345  # calibration images use seed 0, validation images seed 1000


def targets(objects: list[tuple[int, int, int, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scores, boxes, positive) laid out as the model's outputs: (cell_y, cell_x, anchor) flattened."""
    scores = np.zeros((GRID, GRID, ANCHORS, NUM_CLASSES), np.float32)
    boxes = np.zeros((GRID, GRID, ANCHORS, 4), np.float32)
    positive = np.zeros((GRID, GRID, ANCHORS), np.float32)
    for shape, x0, y0, x1, y1 in objects:  # drawing order: a later object overwrites the cell
        cx, cy, w, h = (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0
        gx, gy = min(int(cx // STRIDE), GRID - 1), min(int(cy // STRIDE), GRID - 1)
        a = int(np.argmin([abs(math.log(math.sqrt(w * h) / s)) for s in ANCHOR_SIZES]))
        scores[gy, gx, a] = 0.0
        scores[gy, gx, a, shape] = 1.0
        boxes[gy, gx, a] = (
            (cx - (gx + 0.5) * STRIDE) / STRIDE,
            (cy - (gy + 0.5) * STRIDE) / STRIDE,
            math.log(w / ANCHOR_SIZES[a]),
            math.log(h / ANCHOR_SIZES[a]),
        )
        positive[gy, gx, a] = 1.0
    return scores.reshape(-1, NUM_CLASSES), boxes.reshape(-1, 4), positive.reshape(-1)


def batch(rng: np.random.Generator, n: int) -> tuple[torch.Tensor, ...]:
    images, scores, boxes, positive = [], [], [], []
    for _ in range(n):
        image, objects = make_scene(rng)
        images.append(np.asarray(image, np.float32).transpose(2, 0, 1) / 255.0)
        for out, value in zip((scores, boxes, positive), targets(objects), strict=True):
            out.append(value)
    return tuple(torch.from_numpy(np.stack(a)) for a in (images, scores, boxes, positive))


def train(steps: int, batch_size: int, lr: float, positive_weight: float = 1.0) -> Detector:
    torch.manual_seed(0)
    model = Detector()
    opt = torch.optim.AdamW(model.parameters(), lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps)
    rng = np.random.default_rng(SEED)
    model.train()
    for step in range(steps):
        images, scores, boxes, positive = batch(rng, batch_size)
        pred_boxes, pred_scores = model(images)
        weight = 1.0 + (positive_weight - 1.0) * scores  # > 1: the few object cells count more than empty ones
        score_loss = F.binary_cross_entropy(pred_scores.clamp(1e-6, 1 - 1e-6), scores, weight=weight)
        box_loss = (F.smooth_l1_loss(pred_boxes, boxes, reduction="none").sum(-1) * positive).sum() / positive.sum()
        loss = 10.0 * score_loss + box_loss  # BCE over mostly-empty cells is small; weight it up
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        if step % 100 == 0 or step == steps - 1:
            print(
                f"step {step:4d}/{steps}  score loss {score_loss.item():.4f}  box loss {box_loss.item():.4f}",
                flush=True,
            )
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=HERE / "weights.pt")
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    # weights_nms.pt (the in-graph NMS variant, deploykit-nms.yaml) is trained with --positive-weight 30
    # -o weights_nms.pt: with the default 1, object cells score ~0.05 and a 0.3 NMS threshold keeps nothing.
    parser.add_argument("--positive-weight", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=0)  # 0: torch's default; 1 was faster on a loaded 2-core VM
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = train(args.steps, args.batch, args.lr, args.positive_weight)
    tmp = args.output.with_name(args.output.name + ".tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, args.output)  # an interrupted run leaves the old weights, never half of new ones
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
