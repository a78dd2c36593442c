"""Inputs that declare their kind (image, tokens, mask, padding_mask): the inputs deploykit makes up
respect it, data is checked against it, and multi-input .npz files need no ``input:``."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import deploykit
from deploykit.config import load_config
from deploykit.data.sources import DataConfig, DataSource, InputInfo
from deploykit.errors import ConfigError, DataError, ModelError
from deploykit.graph.feeds import random_input

MASKED_ATTENTION = '''
import math
import torch
from torch import nn


class MaskedAttention(nn.Module):
    """One attention head over tokens with a key-padding mask (True = padding), masked with -inf."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, tokens, padding):
        logits = self.q(tokens) @ self.k(tokens).transpose(1, 2) / math.sqrt(8)
        logits = logits.masked_fill(padding[:, None, :], float("-inf"))
        return self.out(torch.softmax(logits, -1) @ self.v(tokens))


def build():
    torch.manual_seed(0)
    return MaskedAttention().eval()
'''

CONFIG = """
name: masked
source: {factory: "masked_attention:build"}
inputs:
  - {name: tokens, shape: [2, tokens, 8], kind: tokens}
  - {name: padding, shape: [2, tokens], dtype: bool, kind: KIND}
dims: {tokens: {min: 2, opt: 3, max: 4}}
outputs: [mixed]
export: {exporter: dynamo, check_samples: 4}
parity: {samples: 3}
gate: {warmup: 1, iterations: 3, trials: 1, targets: {default: {fps: 0.01, batch: 2}}}
"""


def write_model(folder, kind="padding_mask", extra=""):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "masked_attention.py").write_text(textwrap.dedent(MASKED_ATTENTION))
    path = folder / "deploykit.yaml"
    path.write_text(CONFIG.replace("KIND", kind) + textwrap.dedent(extra))
    return path


@pytest.mark.parametrize("kind", ["mask", "padding_mask"])
def test_generated_masks_keep_a_valid_element_in_every_row(kind):
    rng = np.random.default_rng(0)
    m = random_input(kind, [64, 3, 2], np.bool_, rng)
    valid = m if kind == "mask" else ~m
    assert valid.any(axis=-1).all()  # every row of the last axis keeps one
    assert (~valid).any() and not valid.all(axis=-1).all()  # and some rows really are masked
    f = random_input(kind, [16, 5], np.float32, rng)
    assert set(np.unique(f)) <= {0.0, 1.0} and f.dtype == np.float32


def test_generated_images_lie_in_the_preprocessed_range():
    rng = np.random.default_rng(0)
    x = random_input("image", [2, 3, 8, 8], np.float32, rng)
    assert x.min() >= 0 and x.max() <= 1 and x.std() > 0.2
    assert random_input("image", [2, 3, 8, 8], np.uint8, rng).max() > 200
    assert random_input("tensor", [1000], np.float32, rng).min() < -2  # the default stays standard normal


def test_a_mask_kind_needs_an_axis_and_an_image_cannot_be_bool(tmp_path):
    path = write_model(tmp_path)
    path.write_text(path.read_text().replace("[2, tokens], dtype: bool", "[], dtype: bool"))
    with pytest.raises(ConfigError, match="needs at least one axis"):
        load_config(path)
    path.write_text(CONFIG.replace("KIND", "image"))
    with pytest.raises(ConfigError, match="kind image cannot be bool"):
        load_config(path)
    path.write_text(CONFIG.replace("KIND", "bitmask"))
    with pytest.raises(ConfigError, match="'bitmask' is not one of"):
        load_config(path)


def test_masked_attention_converts_because_generated_masks_respect_the_kind(tmp_path):
    """With kind padding_mask, the export check and parity's random inputs never mask a whole row;
    as a plain tensor the same model fails the export check: a fully padded row is NaN."""
    result = deploykit.convert(write_model(tmp_path / "ok"), workdir=tmp_path / "store")
    assert result.passed and result.parity["data"]["kind"] == "random"
    with pytest.raises(ModelError, match="differs from torch by up to nan"):
        deploykit.convert(write_model(tmp_path / "plain", kind="tensor"), workdir=tmp_path / "store")


def two_inputs(tmp_path, n=3, **cfg):
    info = [
        InputInfo("tokens", (1, "tokens", 8), "float32", "tokens"),
        InputInfo("padding", (1, "tokens"), "bool", "padding_mask"),
    ]
    return DataSource(DataConfig(files=str(tmp_path / "d"), samples=n, **cfg), tmp_path, info, what="calibration")


def test_multi_input_npz_keyed_by_input_name_needs_no_input_field(tmp_path):
    (tmp_path / "d").mkdir()
    rng = np.random.default_rng(0)
    for i, count in enumerate((2, 3, 4)):  # a dynamic token count per file
        np.savez(
            tmp_path / "d" / f"s{i}.npz",
            tokens=rng.standard_normal((1, count, 8)).astype(np.float32),
            padding=np.arange(count)[None] >= count - 1,
        )
    samples = list(two_inputs(tmp_path))
    assert sorted(s["tokens"].shape[1] for s in samples) == [2, 3, 4]
    assert all(set(s) == {"tokens", "padding"} for s in samples)
    np.save(tmp_path / "d" / "lone.npy", np.zeros((1, 2, 8), np.float32))  # a bare array feeds which input?
    with pytest.raises(ConfigError, match="calibration.input: the model has inputs tokens, padding"):
        list(two_inputs(tmp_path, n=4))


def test_data_with_a_fully_masked_row_names_the_input_and_row(tmp_path):
    (tmp_path / "d").mkdir()
    padding = np.array([[False, True, True]])
    np.savez(tmp_path / "d" / "ok.npz", tokens=np.zeros((1, 3, 8), np.float32), padding=padding)
    assert len(list(two_inputs(tmp_path, n=1))) == 1
    np.savez(tmp_path / "d" / "ok.npz", tokens=np.zeros((1, 3, 8), np.float32), padding=np.ones((1, 3), bool))
    with pytest.raises(DataError, match=r"'padding' \(padding_mask: True marks padding\) has 1 row\(s\) with no valid"):
        list(two_inputs(tmp_path, n=1))
