"""gate: latency and FPS of the built engine against the target for this platform."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.artifacts import Artifact
from deploykit.config import Config, Target
from deploykit.environment import device_fingerprint, platform_names, tool_versions
from deploykit.errors import ConfigError, TargetMissed
from deploykit.metrics import summarize
from deploykit.onnxio import random_feeds
from deploykit.report import junit, markdown
from deploykit.stages.base import Stage, StageContext
from deploykit.stages.build import load_engine

REPORT = "gate.json"


def select_target(cfg: Config) -> tuple[str, Target | None]:
    """The target for this platform: the most specific key that matches, else ``default``."""
    for name in platform_names():
        if name in cfg.gate.targets:
            target = cfg.gate.targets[name]
            _check_batch(cfg, name, target)
            return name, target
    if cfg.gate.allow_missing_target:
        return platform_names()[0], None
    raise ConfigError(f"gate.targets: no target for this platform ({platform_names()[0]!r}); "
                      f"targets: {', '.join(cfg.gate.targets) or 'none'}",
                      hint="add that key or a 'default' target, or pass --allow-missing-target")


def _check_batch(cfg: Config, key: str, target: Target) -> None:
    for spec in cfg.inputs:
        lead = spec.shape[0] if spec.shape else None
        lo, hi = (cfg.dims[lead].min, cfg.dims[lead].max) if isinstance(lead, str) else (lead, lead)
        if lead is not None and not lo <= target.batch <= hi:
            raise ConfigError(f"gate.targets.{key}.batch: {target.batch} is outside input {spec.name!r}'s "
                              f"batch range [{lo}, {hi}]", hint="change the target's batch or the dims")


class GateStage(Stage):
    name = "gate"
    version = 1
    inputs = {"engine": "engine"}
    output_kind = "bench-report"
    output_roles = ("gate",)

    def key_config(self, ctx: StageContext) -> Any:
        key, target = select_target(ctx.config)
        g = ctx.config.gate
        return {"warmup": g.warmup, "iterations": g.iterations, "platform": key,
                "target": asdict(target) if target else None, "inputs": ctx.config.inputs, "dims": ctx.config.dims}

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        # A measurement belongs to the machine and toolchain that made it.
        return {"device": device_fingerprint(), "tools": tool_versions()}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> dict[str, Any]:
        cfg = ctx.config
        platform, target = select_target(cfg)
        batch = target.batch if target else 1
        session = load_engine(inputs["engine"])
        run = session.timed_runner(random_feeds(cfg, "opt", np.random.default_rng(0), batch=batch))
        latencies = measure(run, cfg.gate.warmup, cfg.gate.iterations, ctx.reporter)
        stats = summarize(latencies)
        fps = batch * 1000.0 / stats["p50_ms"]
        checks = _checks(target, fps, stats)
        report = {"model": cfg.name, "platform": platform, "device": device_fingerprint(),
                  "evaluator": session.evaluator, "batch": batch, "warmup": cfg.gate.warmup,
                  "latency": stats, "fps": fps, "fps_definition": "batch / median latency",
                  "target": asdict(target) if target else None, "checks": checks,
                  "passed": all(c["passed"] for c in checks), "note": "" if target else "no target for this platform"}
        (out / REPORT).write_text(json.dumps(report, indent=2, sort_keys=True))
        (out / "junit.xml").write_text(junit.render(report))
        (out / "summary.md").write_text(markdown.render_gate(report))
        return {"passed": report["passed"], "fps": fps, "p99_ms": stats["p99_ms"], "platform": platform,
                "failures": [c["message"] for c in checks if not c["passed"]]}

    def verdict(self, artifact: Artifact) -> None:
        if not artifact.manifest.summary["passed"]:
            raise TargetMissed("gate failed: " + "; ".join(artifact.manifest.summary["failures"]),
                               hint=f"see {artifact.file('summary.md')}")


def measure(run: Any, warmup: int, iterations: int, reporter: Any) -> list[float]:
    """Per-iteration wall times in ms; nothing but the call sits between the two clock reads."""
    for _ in range(warmup):
        run()
    out = [0.0] * iterations
    clock = time.perf_counter_ns
    with reporter.task("timing", iterations) as advance:
        step = max(1, iterations // 20)  # advance the bar outside the timed region, rarely
        for i in range(iterations):
            t0 = clock()
            run()
            out[i] = (clock() - t0) / 1e6
            if (i + 1) % step == 0:
                advance(step)
    return out


def _checks(target: Target | None, fps: float, stats: dict[str, float]) -> list[dict[str, Any]]:
    if target is None:
        return []
    checks = []
    if target.fps is not None:
        ok = fps >= target.fps
        checks.append({"name": "fps", "target": target.fps, "measured": fps, "passed": ok,
                       "message": f"fps {fps:.1f} {'>=' if ok else '<'} target {target.fps:g}"})
    if target.latency_ms_p99 is not None:
        ok = stats["p99_ms"] <= target.latency_ms_p99
        checks.append({"name": "latency_ms_p99", "target": target.latency_ms_p99, "measured": stats["p99_ms"],
                       "passed": ok, "message": f"p99 {stats['p99_ms']:.2f} ms {'<=' if ok else '>'} target {target.latency_ms_p99:g} ms"})
    return checks
