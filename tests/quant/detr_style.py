"""A DETR-style detector laid out as its public definition (facebookresearch/detr: structure only,
random fixed-seed weights): padding mask interpolated to the feature map, sine positions from its
cumsum, a transformer in (sequence, batch, channels) layout adding positions at every layer, zeros as
the decoder's target, 100 queries of width 256. A model factory for tests (``detr_style:build``)."""

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn


class FrozenBatchNorm2d(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("weight", torch.rand(n) + 0.5)
        self.register_buffer("bias", torch.randn(n) * 0.1)
        self.register_buffer("running_mean", torch.randn(n) * 0.1)
        self.register_buffer("running_var", torch.rand(n) + 0.5)

    def forward(self, x):
        w = self.weight.reshape(1, -1, 1, 1)
        b = self.bias.reshape(1, -1, 1, 1)
        rv = self.running_var.reshape(1, -1, 1, 1)
        rm = self.running_mean.reshape(1, -1, 1, 1)
        scale = w * (rv + 1e-5).rsqrt()
        bias = b - rm * scale
        return x * scale + bias


class Position(nn.Module):
    def __init__(self, num_pos_feats=64, temperature=10000):
        super().__init__()
        self.num_pos_feats, self.temperature = num_pos_feats, temperature

    def forward(self, x, mask):
        not_mask = ~mask
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        eps, scale = 1e-6, 2 * math.pi
        y_embed = y_embed / (y_embed[:, -1:, :] + eps) * scale
        x_embed = x_embed / (x_embed[:, :, -1:] + eps) * scale
        dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32, device=x.device)
        dim_t = self.temperature ** (2 * (dim_t // 2) / self.num_pos_feats)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads)
        self.linear1, self.linear2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, src, mask, pos):
        q = k = src + pos
        src = self.norm1(src + self.self_attn(q, k, value=src, key_padding_mask=mask)[0])
        return self.norm2(src + self.linear2(F.relu(self.linear1(src))))


class DecoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads)
        self.multihead_attn = nn.MultiheadAttention(d, heads)
        self.linear1, self.linear2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, tgt, memory, mask, pos, query_pos):
        q = k = tgt + query_pos
        tgt = self.norm1(tgt + self.self_attn(q, k, value=tgt)[0])
        tgt = self.norm2(
            tgt + self.multihead_attn(tgt + query_pos, memory + pos, value=memory, key_padding_mask=mask)[0]
        )
        return self.norm3(tgt + self.linear2(F.relu(self.linear1(tgt))))


class DETR(nn.Module):
    def __init__(self, classes=91, d=256, queries=100, heads=8):
        super().__init__()
        layers, c = [], 3
        for out in (32, 64, 128, 256):
            layers += [nn.Conv2d(c, out, 3, 2, 1, bias=False), FrozenBatchNorm2d(out), nn.ReLU()]
            c = out
        self.backbone = nn.Sequential(*layers)
        self.input_proj = nn.Conv2d(256, d, 1)
        self.position = Position(d // 2)
        self.encoder = nn.ModuleList([copy.deepcopy(EncoderLayer(d, heads, 512)) for _ in range(2)])
        self.decoder = nn.ModuleList([copy.deepcopy(DecoderLayer(d, heads, 512)) for _ in range(2)])
        self.decoder_norm = nn.LayerNorm(d)
        self.query_embed = nn.Embedding(queries, d)
        self.class_embed = nn.Linear(d, classes + 1)
        self.bbox_embed = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU(), nn.Linear(d, 4))

    def forward(self, images):
        features = self.backbone(images)
        mask = torch.zeros(images.shape[0], images.shape[2], images.shape[3], dtype=torch.bool)
        mask = F.interpolate(mask[None].float(), size=features.shape[-2:]).to(torch.bool)[0]
        pos = self.position(features, mask)
        src = self.input_proj(features)
        bs, c, h, w = src.shape
        src = src.flatten(2).permute(2, 0, 1)
        pos = pos.flatten(2).permute(2, 0, 1)
        query_pos = self.query_embed.weight.unsqueeze(1).repeat(1, bs, 1)
        mask = mask.flatten(1)
        memory = src
        for layer in self.encoder:
            memory = layer(memory, mask, pos)
        tgt = torch.zeros_like(query_pos)
        for layer in self.decoder:
            tgt = layer(tgt, memory, mask, pos, query_pos)
        hs = self.decoder_norm(tgt).transpose(0, 1)
        return self.class_embed(hs), self.bbox_embed(hs).sigmoid()


def build():
    torch.manual_seed(0)
    return DETR().eval()
