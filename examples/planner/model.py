"""A small transformer trajectory planner over agent-history tokens and lane tokens.

Inputs (calibration/planner/make_scenes.py describes them): ``agents`` (batch, agents, 16), a
dynamic number of agent histories, agent 0 the one to plan for; ``agent_mask`` (batch, agents),
True on padding rows (torch's key_padding_mask); ``lanes`` (batch, 12, 4). A token embedding per
kind, then ``nn.TransformerEncoder`` (multi-head attention, LayerNorm, GELU MLP) over all tokens
with the padding rows masked out of attention, and a head on agent 0's token that decodes K = 3
candidate trajectories of T = 12 steps (per-step displacements, summed into positions) and their
probabilities.

Outputs: ``trajectories`` (batch, 3, 12, 2) in the scenes' units (10 m), ``scores`` (batch, 3).
Trained on synthetic kinematics by train.py (weights.pt beside this file).
"""

from __future__ import annotations

import torch
from torch import nn

MODES, STEPS = 3, 12
AGENT_FEATURES, LANE_FEATURES, LANE_TOKENS = 16, 4, 12


def mlp(cin: int, hidden: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(cin, hidden), nn.GELU(), nn.Linear(hidden, cout))


class Planner(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.agent_embed = mlp(AGENT_FEATURES, d, d)
        self.lane_embed = mlp(LANE_FEATURES, d, d)
        layer = nn.TransformerEncoderLayer(
            d, heads, dim_feedforward=2 * d, dropout=0.0, activation="gelu", batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = mlp(d, 2 * d, MODES * STEPS * 2 + MODES)

    def forward(
        self, agents: torch.Tensor, agent_mask: torch.Tensor, lanes: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tokens = torch.cat([self.agent_embed(agents), self.lane_embed(lanes)], 1)
        padding = torch.cat([agent_mask, torch.zeros_like(lanes[..., 0], dtype=torch.bool)], 1)
        encoded = self.encoder(tokens, src_key_padding_mask=padding)
        out = self.head(encoded[:, 0])
        steps = out[:, : MODES * STEPS * 2].reshape(-1, MODES, STEPS, 2)  # per-step displacements
        scores = torch.softmax(out[:, MODES * STEPS * 2 :], -1)
        return torch.cumsum(steps, 2), scores


def build() -> Planner:
    """The example planner, seeded; deploykit.yaml loads the trained weights (weights.pt, from train.py)."""
    torch.manual_seed(0)
    return Planner().eval()
