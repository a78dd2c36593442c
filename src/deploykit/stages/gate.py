"""gate: throughput, latency, deadlines and the worst case of the built engine against the target for
this platform.

Measurement: warm-up by count *and* time, then ``trials`` x ``iterations`` timed runs at the batch and
shapes the gate times (a target's ``batch``, else the opt shape's: what ``--shapes`` / ``--opt-shapes``
set). ``fps`` is judged on wall-clock throughput of each trial's timing loop (batch x iterations / its
wall time, median over trials: trtexec's "Throughput"); batch / median latency is reported as the
*best case*, never judged. Each trial gets its own p50/p90/p99 and the report gives the median over
trials with their spread; p99.9, max, jitter and a target's deadline misses are over every timed
iteration. Optional: a batch sweep, parallel sessions, a noise-aware comparison against a baseline
report. Nothing but the inference call sits between the two clock reads of an iteration.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit import tracing
from deploykit.config import Config, Target
from deploykit.config.surface import spelled
from deploykit.errors import ConfigError, TargetMissed
from deploykit.graph.feeds import random_feeds
from deploykit.metrics import realtime
from deploykit.metrics.latency import aggregate_trials, fps_trials, now_s, time_iterations, warm_up
from deploykit.metrics.soak import run_soak, soak_checks
from deploykit.record.model import Check
from deploykit.report import baseline as baselines
from deploykit.stages.base import Stage, StageContext, Summary
from deploykit.stages.build import load_engine
from deploykit.store import jsonio
from deploykit.store.artifacts import Artifact
from deploykit.store.environment import (
    device_fingerprint,
    load_between,
    load_snapshot,
    platform_names,
    tool_versions,
)

REPORT, PROFILE = "gate.json", "profile.json"
SCHEMA = "deploykit.gate/3"  # 3: fps is wall-clock throughput; fps_best_case is batch / median latency
FPS_DEFINITION = "wall-clock throughput: batch x iterations / wall time of the timing loop, median over trials"
FPS_BEST_CASE_DEFINITION = "best case: batch / median latency (median over trials); not judged"
# What each target field is judged on (the checks carry it; every view shows it).
STATISTICS = {"fps": FPS_DEFINITION, "latency_ms_p99": "p99 latency of each trial, median over trials"}


@dataclass(frozen=True)
class GateSummary(Summary):
    passed: bool = False
    fps: float = 0.0  # wall-clock throughput of the timing loop (samples/s), median over trials: what fps targets judge
    p99_ms: float = 0.0
    platform: str = ""  # the target key that matched ("default" when none is more specific)
    failures: list[str] = field(default_factory=list)  # the checks that failed, in words
    load: dict[str, Any] = field(default_factory=dict)  # how busy the machine was while measuring
    fps_best_case: float = 0.0  # batch / median latency: the best case, not judged

    def failure(self) -> str:
        return "" if self.passed else "; ".join(self.failures or ["failed"])


def select_target(cfg: Config) -> tuple[str, Target | None]:
    """The target for this platform: the most specific key that matches, else ``default``."""
    for name in platform_names():
        if name in cfg.gate.targets:
            target = cfg.gate.targets[name]
            if target.batch is not None:
                check_batch(cfg, f"gate.targets.{name}.batch", target.batch)
            if target.precision not in ("any", cfg.quantize.precision):
                raise ConfigError(
                    f"gate.targets.{name} is for {target.precision} builds; this run builds {cfg.quantize.precision}",
                    hint="set the target's precision, or build that precision (--precision)",
                )
            return name, target
    if cfg.gate.allow_missing_target:
        return platform_names()[0], None
    raise ConfigError(
        f"gate.targets: no target for this platform ({platform_names()[0]!r}); "
        f"targets: {', '.join(cfg.gate.targets) or 'none'}",
        hint="add that key or a 'default' target, or pass --allow-missing-target",
    )


def gate_batch(cfg: Config, target: Target | None) -> int:
    """The batch the gate times: the target's, else the leading axis of the first input's opt shape."""
    if target is not None and target.batch is not None:
        return target.batch
    for spec in cfg.inputs:
        if spec.shape:
            return cfg.shape(spec, "opt")[0]
    return 1


def check_batch(cfg: Config, where: str, batch: int) -> None:
    for spec in cfg.inputs:
        lead = spec.shape[0] if spec.shape else None
        lo, hi = (cfg.dims[lead].min, cfg.dims[lead].max) if isinstance(lead, str) else (lead, lead)
        if lead is not None and not lo <= batch <= hi:
            raise ConfigError(
                f"{where}: {batch} is outside input {spec.name!r}'s batch range [{lo}, {hi}]",
                hint="change the batch or the dims",
            )


def check_timing_options(cfg: Config) -> None:
    """gate.cuda_graph / gate.data_transfers the backend cannot honour fail at load, naming the field."""
    from deploykit.backends import get_backend

    g = cfg.gate
    asked = {
        "cuda_graph": (g.cuda_graph == "on", "gate.cuda_graph: on", spelled("gate__cuda_graph='on'", "--useCudaGraph")),
        "no_data_transfers": (
            not g.data_transfers,
            "gate.data_transfers: false",
            spelled("gate__data_transfers=False", "--noDataTransfers"),
        ),
    }
    refused = get_backend(cfg.build.backend, require_available=False).timing_refusals(cfg.build)
    other = spelled("build__backend='tensorrt'", "--backend tensorrt")
    for key, (wanted, setting, typed) in asked.items():
        if wanted and key in refused:
            raise ConfigError(
                f"{setting} ({typed}): the {cfg.build.backend} backend cannot honour it: {refused[key]}",
                hint=f"drop {typed}, or time on a backend that can ({other} on a GPU)",
            )


class GateStage(Stage):
    name = "gate"
    version = 4  # 4: fps is wall-clock throughput, deadlines and the worst case, the timed shapes
    inputs = {"engine": "engine"}
    output_kind = "bench-report"
    output_roles = ("gate",)
    summary_type = GateSummary
    report_files = (REPORT,)

    def preflight(self, ctx: StageContext) -> None:
        """A missing target, a sweep batch outside the dims, a timing option the backend cannot honour
        or an unusable baseline fail before export."""
        self._resolve(ctx.config)
        check_timing_options(ctx.config)
        _check_soak(ctx.config)

    def fresh_every_run(self, ctx: StageContext) -> bool:
        """A soak (gate.soak_s > 0) is measured on every run: what it looks for is this run's."""
        return ctx.config.gate.soak_s > 0

    def _resolve(self, cfg: Config) -> tuple[str, Target | None, dict[str, Any] | None]:
        key, target = select_target(cfg)
        for b in cfg.gate.batches:
            check_batch(cfg, "gate.batches", b)
        return key, target, _baseline(cfg, key, target)

    def key_config(self, ctx: StageContext) -> Any:
        cfg = ctx.config
        key, target, base = self._resolve(cfg)
        g = {k: v for k, v in asdict(cfg.gate).items() if k not in ("targets", "baseline", "allow_missing_target")}
        return {
            **g,
            "platform": key,
            "target": asdict(target) if target else None,
            "inputs": cfg.inputs,
            "dims": cfg.dims,
            "precision": cfg.quantize.precision,
            "baseline": base["digest"] if base else None,
        }

    def key_env(self, ctx: StageContext) -> dict[str, Any]:
        # A measurement belongs to the machine and toolchain that made it.
        return {"device": device_fingerprint(), "tools": tool_versions()}

    def run(self, ctx: StageContext, inputs: dict[str, Artifact], out: Path) -> GateSummary:
        cfg, g = ctx.config, ctx.config.gate
        platform, target = select_target(cfg)
        batch = gate_batch(cfg, target)
        session = load_engine(inputs["engine"])
        before = load_snapshot()
        main = measure_batch(session, cfg, batch, ctx.reporter, deadline_ms=target.deadline_ms if target else None)
        report = {
            "schema": SCHEMA,
            "model": cfg.name,
            "platform": platform,
            "batch": batch,
            "fps": main["fps"],
            "fps_definition": FPS_DEFINITION,
            "fps_best_case": main["fps_best_case"],
            "fps_best_case_definition": FPS_BEST_CASE_DEFINITION,
            "device": device_fingerprint(),
            "evaluator": session.evaluator,
            "precision": cfg.quantize.precision,
            **main,
            "sweep": [
                measure_batch(session, cfg, b, ctx.reporter, keep_raw=False) for b in sorted(set(g.batches) - {batch})
            ],
            "concurrency": measure_concurrent(inputs["engine"], cfg, batch) if g.concurrency > 1 else None,
            "target": asdict(target) if target else None,
            "note": "" if target else "no target for this platform",
        }
        report["soak"] = _soak(session, cfg, batch, target) if g.soak_s > 0 else None
        report["load"] = load_between(before, load_snapshot())  # a timing on a busy machine says so
        report["checks"] = target_checks(target, report) + (
            soak_checks(report["soak"], g.soak, target.max_miss_rate if target and target.deadline_ms else None)
            if report["soak"]
            else []
        )
        base = _baseline(cfg, platform, target)
        report["baseline"] = baselines.compare(report, base, g.regression_threshold) if base else None
        checks = report["checks"] + (report["baseline"]["checks"] if base else [])
        report["passed"] = all(c["passed"] for c in checks)
        report["warnings"] = spread_warnings(report, g.spread_warning) + timing_warnings(report, g.cuda_graph)
        report["profile"] = _profile(inputs["engine"], cfg, batch, ctx, out) if g.profile else None
        jsonio.write(out / REPORT, report)
        return GateSummary(
            report["passed"],
            report["fps"],
            report["latency"]["p99_ms"],
            platform,
            [c["message"] for c in checks if not c["passed"]],
            report["load"],
            report["fps_best_case"],
        )

    def reuse_note(self, artifact: Artifact) -> str:
        """A reused gate is a measurement from another time: say when, and whether the machine was busy."""
        m = artifact.manifest
        load = GateSummary.of(artifact).load
        note = f"measurement from {m.created} on {m.device.get('model', 'an unnamed device')} reused"  # never a soak
        if load.get("loaded"):
            note += (
                f", taken under load (CPU pressure {load.get('cpu_pressure')}, load {load.get('loadavg1')} "
                f"on {load.get('cpus')} CPUs): --remeasure on a quiet machine for a clean one"
            )
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
    out = [
        Check(
            "gate",
            f"{where}: {c['name']}",
            "pass" if c["passed"] else "fail",
            c["passed"],
            c.get("metric", c["name"]),
            c["measured"],
            c["target"],
            ">=" if c["name"] == "fps" else "<=",
            c["message"],
        )
        for c in report.get("checks", [])
    ]
    if not out:
        out.append(Check("gate", where, "skipped", True, message=f"{report.get('note') or 'no target'}: measured only"))
    for c in (report.get("baseline") or {}).get("checks", []):
        out.append(
            Check(
                "baseline",
                c["name"],
                "pass" if c["passed"] else "fail",
                c["passed"],
                "slowdown",
                c["slowdown_at_least"],
                c["threshold"],
                "<=",
                c.get("message", ""),
            )
        )
    return out


def spread_warnings(report: dict[str, Any], limit: float) -> list[str]:
    """A warning when the trials disagree by more than ``limit`` (the machine was busy or throttling)."""
    s = report.get("spread", {}).get("p50_ms")
    if not s or s["rel"] <= limit:
        return []
    return [
        f"trial spread is high: the p50 latency of the {report.get('trials_count', len(report.get('trials', [])))} "
        f"trials ranges {s['min']:.3f}-{s['max']:.3f} ms, {s['rel'] * 100:.0f}% of the median (warning above "
        f"{limit * 100:g}%); differences smaller than that are noise — rerun on a quiet machine (--remeasure)"
    ]


def _check_soak(cfg: Config) -> None:
    limit = cfg.limits.timeout("gate")
    if cfg.gate.soak_s >= limit:
        raise ConfigError(
            f"gate.soak_s: {cfg.gate.soak_s:g} s does not fit in the gate's time limit of {limit:g} s",
            hint="shorten the soak, or raise limits.stage_timeouts.gate (or limits.stage_timeout_s)",
        )


def _soak(session: Any, cfg: Config, batch: int, target: Target | None) -> dict[str, Any]:
    """gate.soak_s of back-to-back timed runs after the trials (:func:`deploykit.metrics.soak.run_soak`)."""
    feeds = random_feeds(cfg, "opt", np.random.default_rng(0), batch=batch)
    run, _ = timed_runner(session, feeds, cfg.gate)
    device = getattr(session, "device_memory_used", None)
    with tracing.span(f"gate soak {cfg.gate.soak_s:g} s batch {batch}"):
        return run_soak(
            tracing.wrap(run, f"infer {cfg.name} batch {batch}"),
            lambda: session.infer(feeds),
            cfg.gate.soak_s,
            cfg.gate.soak,
            device_bytes=device,
            deadline_ms=target.deadline_ms if target else None,
        )


def timing_warnings(report: dict[str, Any], cuda_graph: str) -> list[str]:
    """A CUDA graph that was asked for (gate.cuda_graph: on) but not replayed says why."""
    runner = (report.get("timed") or {}).get("runner") or {}
    if cuda_graph == "on" and runner.get("mode") != "cuda-graph":
        return [f"gate.cuda_graph is on but the engine was enqueued without a CUDA graph: {runner.get('why') or '?'}"]
    return []


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
    return baselines.load(
        cfg.path(cfg.gate.baseline),
        model=cfg.name,
        platform=platform,
        device=device_fingerprint(),
        batch=gate_batch(cfg, target),
    )


def measure_batch(
    session: Any, cfg: Config, batch: int, reporter: Any, keep_raw: bool = True, deadline_ms: float | None = None
) -> dict[str, Any]:
    """Warm up, then ``trials`` x ``iterations`` timed runs at one batch size (the opt shapes otherwise)."""
    g = cfg.gate
    feeds = random_feeds(cfg, "opt", np.random.default_rng(0), batch=batch)
    run, timed = timed_runner(session, feeds, g)
    label = f"infer {cfg.name} batch {batch}"
    run = tracing.wrap(run, label)  # an NVTX range per call, only while tracing with nvtx
    with tracing.span(f"gate warm-up batch {batch}"):
        warm_n, warm_s = warm_up(run, g.warmup, g.warmup_s)
    iterations = _iterations(g.iterations, g.duration_s / g.trials, warm_s / max(warm_n, 1))
    trials, walls = [], []
    with reporter.task(f"timing batch {batch}", g.trials) as advance:
        for i in range(g.trials):
            starts: list[int] | None = [] if tracing.active() else None
            with tracing.span(f"gate trial {i + 1} batch {batch}"):
                start = now_s()
                trials.append(time_iterations(run, iterations, starts))
                walls.append(now_s() - start)
            tracing.iterations(label, starts or [], trials[-1], trial=i + 1)
            advance()  # between trials: never inside the timed loop
    stats = aggregate_trials([realtime.averaged(t, g.avg_runs) for t in trials])
    wall = [batch * iterations / w if w > 0 else 0.0 for w in walls]
    every = [v for t in trials for v in t]
    out = {
        "fps": float(np.median(wall)),
        "fps_trials": wall,
        "fps_best_case": batch * 1000.0 / stats["latency"]["p50_ms"],
        "fps_best_case_trials": fps_trials(stats["trials"], batch),
        **stats,
        "worst_case": realtime.worst_case(every),
        "batch": batch,
        "shapes": {name: list(array.shape) for name, array in feeds.items()},
        "warmup": {
            "iterations": warm_n,
            "seconds": round(warm_s, 4),
            "min_iterations": g.warmup,
            "min_seconds": g.warmup_s,
        },
        "trials_count": g.trials,
        "iterations": iterations,
        "timed": {**timed, "runner": dict(getattr(session, "runner_info", {})), "avg_runs": g.avg_runs},
    }
    if deadline_ms is not None:
        out["deadline"] = realtime.deadline_misses(every, deadline_ms)
    if keep_raw:
        out["trials_ms"] = [[round(t, 5) for t in trial] for trial in trials]
    if g.data_transfers and hasattr(session, "engine_timed_runner"):  # TensorRT: also the engine alone (GPU compute)
        out["engine_only"] = _engine_only(session, cfg, batch)
    return out


def timed_runner(session: Any, feeds: dict[str, np.ndarray], g: Any) -> tuple[Any, dict[str, Any]]:
    """The callable the gate times, and what it times: end to end, or the engine alone (--noDataTransfers).

    check_timing_options refused what the backend cannot do; a session without an engine-only runner
    (ONNX Runtime on the CPU) has no transfers to leave out, so its end-to-end runner is the engine alone.
    """
    options = {"cuda_graph": g.cuda_graph} if g.cuda_graph != "auto" else {}
    if not g.data_transfers and hasattr(session, "engine_timed_runner"):
        return session.engine_timed_runner(feeds, **options), {
            "what": "engine alone (no host<->device copies)",
            "data_transfers": False,
            "cuda_graph": g.cuda_graph,
        }
    what = (
        "end to end (no device: no host<->device copies exist)"
        if not g.data_transfers
        else "end to end (host<->device copies included)"
    )
    return session.timed_runner(feeds, **options), {
        "what": what,
        "data_transfers": g.data_transfers,
        "cuda_graph": g.cuda_graph,
    }


def _iterations(least: int, seconds: float, per_run_s: float) -> int:
    """Timed iterations per trial: ``least``, or enough for ``seconds`` at the warm-up's pace (--duration)."""
    if seconds <= 0 or per_run_s <= 0:
        return least
    return max(least, min(10_000_000, int(seconds / per_run_s) + 1))


def _engine_only(session: Any, cfg: Config, batch: int) -> dict[str, Any]:
    """Latency without host<->device copies; the gate's targets stay on end-to-end time (what an app sees)."""
    g = cfg.gate
    options = {"cuda_graph": g.cuda_graph} if g.cuda_graph != "auto" else {}
    run = session.engine_timed_runner(random_feeds(cfg, "opt", np.random.default_rng(0), batch=batch), **options)
    warm_up(run, g.warmup, g.warmup_s)
    stats = aggregate_trials([time_iterations(run, g.iterations) for _ in range(g.trials)])
    return {
        "latency": stats["latency"],
        "fps_best_case": batch * 1000.0 / stats["latency"]["p50_ms"],
        "runner": dict(getattr(session, "runner_info", {})),
    }


def measure_concurrent(engine: Artifact, cfg: Config, batch: int) -> dict[str, Any]:
    """Throughput with ``concurrency`` sessions running in parallel threads (backends release the GIL)."""
    import threading

    g = cfg.gate
    runs = [
        load_engine(engine).timed_runner(random_feeds(cfg, "opt", np.random.default_rng(i), batch=batch))
        for i in range(g.concurrency)
    ]
    barrier, latencies = threading.Barrier(g.concurrency + 1), [None] * g.concurrency

    def worker(i: int) -> None:
        warm_up(runs[i], g.warmup, 0.0)
        barrier.wait()
        latencies[i] = time_iterations(runs[i], g.iterations)  # type: ignore[call-overload]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(g.concurrency)]
    for t in threads:
        t.start()
    barrier.wait()
    start = now_s()
    for t in threads:
        t.join()
    wall = now_s() - start
    p50 = float(np.median(np.concatenate([np.asarray(x) for x in latencies])))
    return {
        "streams": g.concurrency,
        "batch": batch,
        "iterations_per_stream": g.iterations,
        "seconds": wall,
        "throughput": g.concurrency * g.iterations * batch / wall,
        "p50_ms": p50,
    }


def target_checks(target: Target | None, report: dict[str, Any]) -> list[dict[str, Any]]:
    """The target's checks, each naming the statistic it is judged on: fps on wall-clock throughput,
    latency_ms_p99 on the median over trials of each trial's p99, a deadline on every timed iteration."""
    if target is None:
        return []
    checks = []
    trials = report.get("trials_count", 1)
    if target.fps is not None:
        fps = report["fps"]
        ok = fps >= target.fps
        checks.append(
            {
                "name": "fps",
                "metric": "wall-clock fps",
                "target": target.fps,
                "measured": fps,
                "passed": ok,
                "statistic": STATISTICS["fps"],
                "message": f"fps {fps:.1f} (wall-clock throughput, median of {trials} trials) "
                f"{'>=' if ok else '<'} target {target.fps:g}",
            }
        )
    if target.latency_ms_p99 is not None:
        p99 = report["latency"]["p99_ms"]
        ok = p99 <= target.latency_ms_p99
        checks.append(
            {
                "name": "latency_ms_p99",
                "metric": "latency_ms_p99",
                "target": target.latency_ms_p99,
                "measured": p99,
                "passed": ok,
                "statistic": STATISTICS["latency_ms_p99"],
                "message": f"p99 {p99:.2f} ms (median of {trials} trials) {'<=' if ok else '>'} target "
                f"{target.latency_ms_p99:g} ms",
            }
        )
    if target.deadline_ms is not None:
        checks.append(realtime.deadline_check(report["deadline"], target.max_miss_rate))
    return checks


__all__ = ["GateStage", "gate_batch", "measure_batch", "select_target", "time_iterations", "warm_up"]
