"""Synthetic driving scenes for the planner example: agent histories, lane tokens, the future.

Deterministic: the same seed writes the same files::

    python calibration/planner/make_scenes.py calibration/planner/samples --count 32 --seed 0
    python calibration/planner/make_scenes.py calibration/planner/validation --count 12 --seed 1000

One scene, in the target agent's frame (it is at the origin heading along +x at t = 0):

* the target drives at a constant speed and turn rate, with noise; at a junction ahead the lane
  splits into three branches (straight, left, right) and the target takes one of them: its future
  is a constant-turn-rate arc onto that branch. Its history already bends a little towards it.
* up to ``MAX_AGENTS - 1`` other agents drive at constant velocity through the scene.
* ``agents`` (A, 16): per agent, its current position (x, y) then the 7 steps (dx, dy) that led
  there, oldest first, in metres / 10 (displacements, not positions: velocity read off a difference
  of two quantized positions is ill-conditioned, a displacement is quantized directly); agent 0 is
  the target. Scenes hold 2..MAX_AGENTS agents; padding rows are zeros, as pipelines write them, and
  ``agent_mask`` (A,) is True there (torch's key_padding_mask convention).
* ``lanes`` (12, 4): 3 branches x 4 points (x, y, dx, dy), metres / 10 and unit direction.
* ``future`` (12, 2): the target's next 12 positions (0.5 s apart), metres / 10; ``branch`` its index.

Each .npz file holds one scene keyed by the model's input names (``agents``, ``agent_mask``,
``lanes``), with a leading batch dim of 1 and a number of agents that varies between files, so the
dynamic ``agents`` dim is exercised. examples/planner/train.py trains on such scenes drawn from
another seed. No package code lives here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

HISTORY, FUTURE, DT = 8, 12, 0.5
MAX_AGENTS = 16
BRANCHES = 3  # straight, left, right
LANE_POINTS = 4
SCALE = 10.0  # metres per unit in the tensors
TURN = 0.12  # rad/s of the left/right branches


def arc(speed: float, rate: float, steps: np.ndarray) -> np.ndarray:
    """Positions after ``steps`` * DT seconds at constant speed and turn rate, starting at the origin along +x."""
    t = steps * DT
    if abs(rate) < 1e-6:
        return np.stack([speed * t, np.zeros_like(t)], -1)
    return np.stack([speed * np.sin(rate * t) / rate, speed * (1 - np.cos(rate * t)) / rate], -1)


def make_scene(rng: np.random.Generator, agents: int | None = None) -> dict[str, np.ndarray]:
    """One scene: ``agents``, ``agent_mask``, ``lanes`` (model inputs) and ``future``, ``branch``."""
    n = int(agents if agents is not None else rng.integers(2, MAX_AGENTS + 1))
    speed = rng.uniform(3.0, 12.0)
    branch = int(rng.integers(0, BRANCHES))
    rate = (0.0, TURN, -TURN)[branch] * rng.uniform(0.8, 1.2)
    past = arc(speed, 0.35 * rate, np.arange(-HISTORY + 1, 1)) + rng.normal(0, 0.05, (HISTORY, 2))
    future = arc(speed, rate, np.arange(1, FUTURE + 1)) + rng.normal(0, 0.05, (FUTURE, 2))
    lanes = []
    for b in range(BRANCHES):
        points = arc(8.0, (0.0, TURN, -TURN)[b], np.linspace(1.0, 12.0, LANE_POINTS))
        direction = np.gradient(points, axis=0)
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        lanes.append(np.concatenate([points, direction], 1))
    tracks = [past] + [rng.uniform(-20, 20, 2) + rng.uniform(-8, 8, 2) * DT * np.arange(-HISTORY + 1, 1)[:, None]
                       for _ in range(1, n)]
    tokens = np.stack([np.concatenate([t[-1], np.diff(t, axis=0).ravel()]) for t in tracks]) / SCALE
    real = int(rng.integers(2, n + 1))  # agents [real:] are padding: zeros, masked
    tokens[real:] = 0.0
    mask = np.arange(n) >= real
    return {"agents": tokens.astype(np.float32), "agent_mask": mask, "lanes": (np.stack(lanes).reshape(-1, 4)
            / np.array([SCALE, SCALE, 1, 1])).astype(np.float32), "future": (future / SCALE).astype(np.float32),
            "branch": np.int64(branch)}


def write_scenes(folder: Path, count: int, seed: int) -> list[Path]:
    """Write ``count`` files ``scene_0000.npz`` ... (model inputs only, batch dim 1) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        scene = make_scene(rng)
        path = folder / f"scene_{i:04d}.npz"
        np.savez_compressed(path, **{k: scene[k][None] for k in ("agents", "agent_mask", "lanes")})
        paths.append(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--count", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write_scenes(args.folder, args.count, args.seed)


if __name__ == "__main__":
    main()
