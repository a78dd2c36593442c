"""Train the example depth network on synthetic rendered scenes and write ``weights.pt``.

    python examples/depth/train.py          # about a minute on two CPU cores

The scenes come from calibration/depth/make_scenes.py, drawn from a seed that neither the
calibration nor the validation set uses. The loss is L1 on log depth (scale-balanced: a 10 cm
error at 1 m counts as much as 1 m at 10 m). The committed ``weights.pt`` is this script's output;
the last lines it prints are AbsRel and delta < 1.25 against the true depth on 64 held-out scenes.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "calibration" / "depth")]

from make_scenes import make_scene  # noqa: E402 (calibration/depth/make_scenes.py)
from model import DepthNet  # noqa: E402

SEED = 12345  # calibration scenes use seed 0, validation scenes seed 1000


def batch(rng: np.random.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    images, depths = zip(*(make_scene(rng) for _ in range(n)), strict=True)
    x = np.stack([np.asarray(im, np.float32).transpose(2, 0, 1) / 255.0 for im in images])
    return torch.from_numpy(x), torch.from_numpy(np.stack(depths)[:, None])


def train(steps: int, batch_size: int, lr: float) -> DepthNet:
    torch.manual_seed(0)
    model = DepthNet()
    opt = torch.optim.AdamW(model.parameters(), lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps)
    rng = np.random.default_rng(SEED)
    model.train()
    for step in range(steps):
        images, depth = batch(rng, batch_size)
        loss = (model(images).log() - depth.log()).abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step:4d}/{steps}  log-L1 {loss.item():.4f}", flush=True)
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=HERE / "weights.pt")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=4e-3)
    parser.add_argument("--threads", type=int, default=1)  # on a loaded 2-core machine 1 thread was 2x faster
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = train(args.steps, args.batch, args.lr)
    images, depth = batch(np.random.default_rng(777), 64)
    with torch.no_grad():
        pred = model(images)
    ratio = torch.maximum(pred / depth, depth / pred)
    print(
        f"vs the true depth on 64 held-out scenes: AbsRel {((pred - depth).abs() / depth).mean():.3f}, "
        f"delta<1.25 {(ratio < 1.25).float().mean():.3f}"
    )
    tmp = args.output.with_name(args.output.name + ".tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, args.output)  # an interrupted run leaves the old weights, never half of new ones
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
