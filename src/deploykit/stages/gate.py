"""gate: latency and FPS of the built engine against the target for this platform.

Measurement: warm-up by count *and* time, then ``trials`` x ``iterations`` timed runs; each trial
gets its own p50/p90/p99 and the report gives the median over trials with their spread. Optional:
a batch sweep (throughput = batch x FPS), parallel sessions, and a noise-aware comparison against a
baseline report. Nothing but the inference call sits between the two clock reads of an iteration.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.artifacts import Artifact
from deploykit.config import Config, Target
from deploykit.environment import (
    device_fingerprint,
    load_between,
    load_snapshot,
    platform_names,
    tool_versions,
)
from deploykit.errors import ConfigError, TargetMissed
from deploykit.metrics.latency import aggregate_trials, fps_trials, time_iterations, warm_up
from deploykit.onnxio import random_feeds
from deploykit.report import baseline as baselines
from deploykit.report import jsonio
from deploykit.report.record import Check
from deploykit.stages.base import Stage, StageContext, Summary
from deploykit.stages.build import load_engine

REPORT, PROFILE = "gate.json", "profile.json"
SCHEMA = "deploykit.gate/2"


@dataclass(frozen=True)
class GateSummary(Summary):
    passed: bool = False
    fps: float = 0.0  # batch / median latency, median over trials
    p99_ms: float = 0.0
    platform: str = ""  # the target key that matched ("default" when none is more specific)
    failures: list[str] = field(default_factory=list)  # the checks that failed, in words
    load: dict[str, Any] = field(default_factory=dict)  # how busy the machine was while measuring

    def failure(self) -> str:
        return "" if self.passed else "; ".join(self.failures or ["failed"])


def select_target(cfg: Config) -> tuple[str, Target | None]:
    """The target for this platform: the most specific key that matches, else ``default``."""
    for name in platform_names():
        if name in cfg.gate.targets:
            target = cfg.gate.targets[name]
            _check_batch(cfg, f"gate.targets.{name}.batch", target.batch)
            if target.precision not in ("any", cfg.quantize.precision):
                raise ConfigError(f"gate.targets.{name} is for {target.precision} builds; this run builds "
                                  f"{cfg.quantize.precision}", hint="set the target's precision, or build that "
                                  "precision (--precision)")
            return name, target
    if cfg.gate.allow_missing_target:
        return platform_names()[0], None
    raise ConfigError(f"gate.targets: no target for this platform ({platform_names()[0]!r}); "
                      f"targets: {', '.join(cfg.gate.targets) or 'none'}",
                      hint="add that key or a 'default' target, or pass --allow-missing-target")


def _check_batch(cfg: Config, where: str, batch: int) -> None:
    for spec in cfg.inputs:
        lead = spec.shape[0] if spec.shape else None
        lo, hi = (cfg.dims[lead].min, cfg.dims[lead].max) if isinstance(lead, str) else (lead, lead)
        if lead is not None and not lo <= batch <= hi:
            raise ConfigError(f"{where}: {batch} is outside input {spec.name!r}'s batch range [{lo}, {hi}]",
                              hint="change the batch or the dims")


class GateStage(Stage):
    name = "gate"
    version = 3  # 3: wall-clock throughput and warnings in gate.json; JUnit and Markdown come from the run record
    inputs = {"engine": "engine"}
    output_kind = "bench-report"
    output_roles = ("gate",)
    summary_type = GateSummary
    report_files = (REPORT,)

    def preflight(self, ctx: StageContext) -> None:
        """A missing target, a sweep batch outside the dims or an unusable baseline fail before export."""
        self._resolve(ctx.config)

    def _resolve(self, cfg: Config) -> tuple[str, Target | None, dict[str, Any] | None]:
        key, target = select_target(cfg)
        for b in cfg.gate.batches:
            _check_batch(cfg, "gate.batches", b)
        return key, target, _baseline(cfg, key, target)

    def key_config(self, ctx: StageContext) -> Any:
        cfg = ctx.config
        key, target, base = self._resolve(cfg)
        g = {k: v for k, v in asdict(cfg.gate).items() if k not in ("targets", "baseline", "allow_missing_target")}
        return {**g, "platform": key, "target": asdict(target) if target else None, "inputs": cfg.inputs,
                "dims": cfg.dims, "precision": cfg.quantize.precision, "baseline": base["digest"] if base else None}

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        # A measurement belongs to the machine and toolchain that made it.
        return {"device": device_fingerprint(), "tools": tool_versions()}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> GateSummary:
        cfg, g = ctx.config, ctx.config.gate
        platform, target = select_target(cfg)
        batch = target.batch if target else 1
        session = load_engine(inputs["engine"])
        before = load_snapshot()
        main = measure_batch(session, cfg, batch, ctx.reporter)
        report = {"schema": SCHEMA, "model": cfg.name, "platform": platform, "device": device_fingerprint(),
                  "evaluator": session.evaluator, "precision": cfg.quantize.precision, "batch": batch,
                  **main, "fps_definition": "batch / median latency (median over trials)",
                  "wall_fps_definition": "batch x iterations / wall-clock time of a trial (median over trials)",
                  "sweep": [measure_batch(session, cfg, b, ctx.reporter, keep_raw=False)
                            for b in sorted(set(g.batches) - {batch})],
                  "concurrency": measure_concurrent(inputs["engine"], cfg, batch) if g.concurrency > 1 else None,
                  "target": asdict(target) if target else None, "note": "" if target else "no target for this platform"}
        report["load"] = load_between(before, load_snapshot())  # a timing on a busy machine says so
        report["checks"] = target_checks(target, report["fps"], report["latency"])
        base = _baseline(cfg, platform, target)
        report["baseline"] = baselines.compare(report, base, g.regression_threshold) if base else None
        checks = report["checks"] + (report["baseline"]["checks"] if base else [])
        report["passed"] = all(c["passed"] for c in checks)
        report["warnings"] = spread_warnings(report, g.spread_warning)
        report["profile"] = _profile(inputs["engine"], cfg, batch, ctx, out) if g.profile else None
        jsonio.write(out / REPORT, report)
        return GateSummary(report["passed"], report["fps"], report["latency"]["p99_ms"], platform,
                           [c["message"] for c in checks if not c["passed"]], report["load"])

    def reuse_note(self, artifact: Artifact) -> str:
        """A reused gate is a measurement from another time: say when, and whether the machine was busy."""
        m = artifact.manifest
        load = GateSummary.of(artifact).load
        note = f"measurement from {m.created} on {m.device.get('model', 'an unnamed device')} reused"
        if load.get("loaded"):
            note += (f", taken under load (CPU pressure {load.get('cpu_pressure')}, load {load.get('loadavg1')} "
                     f"on {load.get('cpus')} CPUs): --rerun gate on a quiet machine for a clean one")
        return note

    @classmethod
    def report(cls, artifact: Artifact) -> dict[str, Any] | None:
        """``gate.json``, with the per-layer profile (gate.profile) also as Markdown for the run's summary."""
        report = super().report(artifact)
        if report is not None and report.get("profile"):
            report["profile_markdown"] = _profile_markdown(report["profile"])
        return report

    @classmethod
    def checks(cls, artifact: Artifact) -> list[Check]:
        """One per target check (model x platform), one per baseline metric; a skipped one without a target."""
        return gate_checks(cls.report(artifact) or {})

    def verdict(self, artifact: Artifact) -> None:
        s = GateSummary.of(artifact)
        if not s.passed:
            raise TargetMissed("gate failed: " + "; ".join(s.failures), hint=f"see {artifact.file(REPORT)}")


def gate_checks(report: dict[str, Any]) -> list[Check]:
    """The gate report's verdicts as checks (named ``<platform> batch <n>: <check>``)."""
    if not report:
        return []
    where = f"{report['platform']} batch {report['batch']}"
    out = [Check("gate", f"{where}: {c['name']}", "pass" if c["passed"] else "fail", c["passed"], c["name"],
                 c["measured"], c["target"], ">=" if c["name"] == "fps" else "<=", c["message"])
           for c in report.get("checks", [])]
    if not out:
        out.append(Check("gate", where, "skipped", True, message=f"{report.get('note') or 'no target'}: measured only"))
    for c in (report.get("baseline") or {}).get("checks", []):
        out.append(Check("baseline", c["name"], "pass" if c["passed"] else "fail", c["passed"], "slowdown",
                         c["slowdown_at_least"], c["threshold"], "<=", c.get("message", "")))
    return out


def spread_warnings(report: dict[str, Any], limit: float) -> list[str]:
    """A warning when the trials disagree by more than ``limit`` (the machine was busy or throttling)."""
    s = report.get("spread", {}).get("p50_ms")
    if not s or s["rel"] <= limit:
        return []
    return [f"trial spread is high: the p50 latency of the {report.get('trials_count', len(report.get('trials', [])))} "
            f"trials ranges {s['min']:.3f}-{s['max']:.3f} ms, {s['rel'] * 100:.0f}% of the median (warning above "
            f"{limit * 100:g}%); differences smaller than that are noise — rerun on a quiet machine (--remeasure)"]


def _profile(engine: Artifact, cfg: Config, batch: int, ctx: StageContext, out: Path) -> dict[str, Any]:
    """gate.profile: the per-layer profile at the gate's batch, after (never during) the timed trials."""
    from deploykit.profiling.peaks import CACHE_DIR
    from deploykit.profiling.run import profile_engine

    feeds = random_feeds(cfg, "opt", np.random.default_rng(0), batch=batch)
    report = profile_engine(engine.path, feeds, peaks_dir=ctx.store.root / CACHE_DIR, model=cfg.name, batch=batch)
    jsonio.write(out / PROFILE, report)
    return report


def _profile_markdown(profile: dict[str, Any] | None) -> str:
    from deploykit.profiling.summary import render_markdown

    return render_markdown(profile) if profile else ""


def _baseline(cfg: Config, platform: str, target: Target | None) -> dict[str, Any] | None:
    if cfg.gate.baseline is None:
        return None
    return baselines.load(cfg.path(cfg.gate.baseline), model=cfg.name, platform=platform,
                          device=device_fingerprint(), batch=target.batch if target else 1)


def measure_batch(session: Any, cfg: Config, batch: int, reporter: Any, keep_raw: bool = True) -> dict[str, Any]:
    """Warm up, then ``trials`` x ``iterations`` timed runs at one batch size."""
    g = cfg.gate
    run = session.timed_runner(random_feeds(cfg, "opt", np.random.default_rng(0), batch=batch))
    warm_n, warm_s = warm_up(run, g.warmup, g.warmup_s)
    iterations = _iterations(g.iterations, g.duration_s / g.trials, warm_s / max(warm_n, 1))
    trials, walls = [], []
    with reporter.task(f"timing batch {batch}", g.trials) as advance:
        for _ in range(g.trials):
            start = time.perf_counter()
            trials.append(time_iterations(run, iterations))
            walls.append(time.perf_counter() - start)
            advance()  # between trials: never inside the timed loop
    stats = aggregate_trials(trials)
    per_trial_fps = fps_trials(stats["trials"], batch)
    wall = [batch * iterations / w for w in walls if w > 0]
    out = {**stats, "batch": batch, "fps": batch * 1000.0 / stats["latency"]["p50_ms"], "fps_trials": per_trial_fps,
           "wall_fps": float(np.median(wall)) if wall else 0.0, "wall_fps_trials": wall,
           "warmup": {"iterations": warm_n, "seconds": round(warm_s, 4), "min_iterations": g.warmup,
                      "min_seconds": g.warmup_s}, "trials_count": g.trials, "iterations": iterations}
    if keep_raw:
        out["trials_ms"] = [[round(t, 5) for t in trial] for trial in trials]
    if hasattr(session, "engine_timed_runner"):  # TensorRT: also the engine alone, as trtexec's GPU compute time
        out["engine_only"] = _engine_only(session, cfg, batch)
    return out


def _iterations(least: int, seconds: float, per_run_s: float) -> int:
    """Timed iterations per trial: ``least``, or enough for ``seconds`` at the warm-up's pace (--duration)."""
    if seconds <= 0 or per_run_s <= 0:
        return least
    return max(least, min(10_000_000, int(seconds / per_run_s) + 1))


def _engine_only(session: Any, cfg: Config, batch: int) -> dict[str, Any]:
    """Latency without host<->device copies; the gate's targets stay on end-to-end time (what an app sees)."""
    g = cfg.gate
    run = session.engine_timed_runner(random_feeds(cfg, "opt", np.random.default_rng(0), batch=batch))
    warm_up(run, g.warmup, g.warmup_s)
    stats = aggregate_trials([time_iterations(run, g.iterations) for _ in range(g.trials)])
    return {"latency": stats["latency"], "fps": batch * 1000.0 / stats["latency"]["p50_ms"],
            "runner": dict(getattr(session, "runner_info", {}))}


def measure_concurrent(engine: Artifact, cfg: Config, batch: int) -> dict[str, Any]:
    """Throughput with ``concurrency`` sessions running in parallel threads (backends release the GIL)."""
    import threading

    g = cfg.gate
    runs = [load_engine(engine).timed_runner(random_feeds(cfg, "opt", np.random.default_rng(i), batch=batch))
            for i in range(g.concurrency)]
    barrier, latencies = threading.Barrier(g.concurrency + 1), [None] * g.concurrency

    def worker(i: int) -> None:
        warm_up(runs[i], g.warmup, 0.0)
        barrier.wait()
        latencies[i] = time_iterations(runs[i], g.iterations)  # type: ignore[call-overload]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(g.concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    p50 = float(np.median(np.concatenate([np.asarray(x) for x in latencies])))
    return {"streams": g.concurrency, "batch": batch, "iterations_per_stream": g.iterations, "seconds": wall,
            "throughput": g.concurrency * g.iterations * batch / wall, "p50_ms": p50}


def target_checks(target: Target | None, fps: float, latency: dict[str, float]) -> list[dict[str, Any]]:
    """The target's fps / p99 checks against the median over trials."""
    if target is None:
        return []
    checks = []
    if target.fps is not None:
        ok = fps >= target.fps
        checks.append({"name": "fps", "target": target.fps, "measured": fps, "passed": ok,
                       "message": f"fps {fps:.1f} {'>=' if ok else '<'} target {target.fps:g}"})
    if target.latency_ms_p99 is not None:
        p99 = latency["p99_ms"]
        ok = p99 <= target.latency_ms_p99
        checks.append({"name": "latency_ms_p99", "target": target.latency_ms_p99, "measured": p99, "passed": ok,
                       "message": f"p99 {p99:.2f} ms {'<=' if ok else '>'} target {target.latency_ms_p99:g} ms"})
    return checks


__all__ = ["GateStage", "measure_batch", "select_target", "time_iterations", "warm_up"]
