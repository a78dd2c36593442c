"""surgery: the configured list of graph passes, each checked (see deploykit.surgery.runner)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.graph.feeds import random_feeds
from deploykit.graph.files import load_model, save_model
from deploykit.stages.base import Stage, StageContext, Summary
from deploykit.stages.export import MODEL
from deploykit.store.artifacts import Artifact


@dataclass(frozen=True)
class SurgerySummary(Summary):
    passes: list[dict[str, Any]] = field(default_factory=list)  # one report per pass (deploykit.surgery.runner)
    nodes: int = 0  # after the last pass


class SurgeryStage(Stage):
    name = "surgery"
    version = 2
    inputs = {"model": "onnx"}
    output_kind = "onnx"
    output_roles = ("model",)
    summary_type = SurgerySummary
    measured = ("seconds",)  # each pass's time: not part of the identity

    def applies(self, ctx: StageContext) -> bool:
        return bool(ctx.config.surgery.passes)

    def key_config(self, ctx: StageContext) -> Any:
        from deploykit.surgery.registry import instantiate

        s = ctx.config.surgery
        # Resolve passes now: an unknown name fails before any work, and defaults enter the key.
        passes = [{"name": p.name, "version": p.version, "params": p.params} for p in map(instantiate, s.passes)]
        return {"passes": passes, "check_atol": s.check_atol, "check_rtol": s.check_rtol}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> SurgerySummary:
        from deploykit.plugins.onnx_functions import register_bodies
        from deploykit.surgery.registry import instantiate
        from deploykit.surgery.runner import run_passes

        register_bodies()  # deploykit's plugin ops get their ONNX bodies for lower_plugins

        src = inputs["model"].file(MODEL)
        cfg = ctx.config
        feeds = random_feeds(cfg, "opt", np.random.default_rng(0))
        model, reports = run_passes(
            load_model(src),
            [instantiate(p) for p in cfg.surgery.passes],
            feeds,
            atol=cfg.surgery.check_atol,
            rtol=cfg.surgery.check_rtol,
            where=users_name(cfg),
        )
        save_model(model, out / MODEL)
        return SurgerySummary(reports, len(model.graph.node))


def users_name(cfg: Any) -> str:
    """The model as the user knows it, for messages: the ONNX file they gave, or their factory's export
    (never the store's ``objects/<digest>/model.onnx``)."""
    if cfg.source.onnx is not None:
        return str(cfg.path(cfg.source.onnx))
    if cfg.source.memory is not None:
        return cfg.source.memory.label + (" (exported)" if cfg.source.is_torch else "")
    return f"{cfg.source.factory} (exported)"
