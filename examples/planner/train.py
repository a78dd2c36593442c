"""Train the example planner on synthetic kinematics and write ``weights.pt``, which deploykit.yaml loads.

    python examples/planner/train.py          # about a minute on two CPU cores

Scenes come from calibration/planner/make_scenes.py (constant velocity / constant turn rate with
noise, a three-way junction ahead), drawn from a seed that neither the calibration nor the
validation set uses. The loss is winner-takes-all: the L2 error of the mode closest to the true
future, plus the cross-entropy of the scores against that mode. The committed ``weights.pt`` is
this script's output; the last line it prints is minADE/minFDE (metres) and how often the
top-scored mode is the closest one, on 256 held-out scenes.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1] / "calibration" / "planner")]

from make_scenes import MAX_AGENTS, SCALE, make_scene  # noqa: E402 (calibration/planner/make_scenes.py)
from model import Planner  # noqa: E402

SEED = 12345  # calibration scenes use seed 0, validation scenes seed 1000


def batch(rng: np.random.Generator, n: int) -> tuple[torch.Tensor, ...]:
    agents = int(rng.integers(2, MAX_AGENTS + 1))  # one agent count per batch: the dynamic dim varies
    scenes = [make_scene(rng, agents) for _ in range(n)]
    return tuple(
        torch.from_numpy(np.stack([s[k] for s in scenes])) for k in ("agents", "agent_mask", "lanes", "future")
    )


def losses(
    model: Planner, agents: torch.Tensor, mask: torch.Tensor, lanes: torch.Tensor, future: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    trajectories, scores = model(agents, mask, lanes)
    dist = (trajectories - future[:, None]).norm(dim=-1)  # (batch, modes, steps)
    best = dist.mean(-1).argmin(1)
    rows = torch.arange(len(best))
    regression = dist[rows, best].mean()
    classification = -(scores[rows, best] + 1e-6).log().mean()
    return regression, classification, (dist[rows, best], scores.argmax(1) == best)


def train(steps: int, batch_size: int, lr: float) -> Planner:
    torch.manual_seed(0)
    model = Planner()
    opt = torch.optim.AdamW(model.parameters(), lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=steps)
    rng = np.random.default_rng(SEED)
    model.train()
    for step in range(steps):
        regression, classification, _ = losses(model, *batch(rng, batch_size))
        loss = regression + 0.1 * classification
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        if step % 200 == 0 or step == steps - 1:
            print(
                f"step {step:4d}/{steps}  min-mode L2 {regression.item():.4f}  score CE {classification.item():.4f}",
                flush=True,
            )
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=HERE / "weights.pt")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=1)  # on a loaded 2-core machine 1 thread was 2x faster
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = train(args.steps, args.batch, args.lr)
    with torch.no_grad():
        _, _, (dist, top1) = losses(model, *batch(np.random.default_rng(777), 256))
    print(
        f"on 256 held-out scenes: minADE {dist.mean() * SCALE:.2f} m, minFDE {dist[:, -1].mean() * SCALE:.2f} m, "
        f"top-scored mode is the closest {top1.float().mean():.2f}"
    )
    tmp = args.output.with_name(args.output.name + ".tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, args.output)  # an interrupted run leaves the old weights, never half of new ones
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
