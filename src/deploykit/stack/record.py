"""The stack's result: per model (achieved rate, latency percentiles and worst case, deadline misses,
the slow-down beside the others against alone, the soak's drift and NaN/Inf checks), per chain
(end-to-end latency), the process's memory growth, and the checks that decide the exit code. Every
view (:mod:`deploykit.stack.views`) renders this one object."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.metrics import realtime
from deploykit.record.model import Check
from deploykit.stack import soak
from deploykit.stack.pacing import Frames
from deploykit.stack.soak import Watch
from deploykit.stack.spec import StackSpec

# 2: a model's latency drift moved under its "soak" entry (beside the NaN/Inf watch), the run's "soak"
# section (limits, windows, memory growth) and "alone_s" were added
SCHEMA = "deploykit.stack/2"


@dataclass(frozen=True)
class StackResult:
    """One stack run. ``exit_code`` is what ``deploykit stack`` exits with (0, or 1 on a missed budget)."""

    name: str
    device: str
    duration_s: float
    models: dict[str, dict[str, Any]]  # per model: rate, latency, deadline, alone, slowdown, source
    chains: dict[str, dict[str, Any]] = field(default_factory=dict)  # "detector -> planner": end-to-end
    checks: tuple[Check, ...] = ()
    warnings: tuple[str, ...] = ()
    environment: dict[str, Any] = field(default_factory=dict)
    soak: dict[str, Any] = field(default_factory=dict)  # the limits, the windows, resident/device memory growth
    alone_s: float = 0.0  # each model alone first (0: not run alone)
    schema: str = SCHEMA

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed_checks else 0

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def verdict(self) -> str:
        return "FAIL" if self.failed_checks else "PASS"

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out.update(passed=self.passed, exit_code=self.exit_code, verdict=self.verdict)
        return out

    def _repr_html_(self) -> str:
        from deploykit.stack.views import html_fragment

        return html_fragment(self)

    def __repr__(self) -> str:
        from deploykit.stack.views import verdict_lines

        return "\n".join(verdict_lines(self))

    def report_html(self, path: str | Path | None = None, with_plots: bool = True) -> str:
        """The HTML page (written to ``path`` when given)."""
        from deploykit.stack.views import html_page

        page = html_page(self, with_plots)
        if path is not None:
            Path(path).write_text(page, encoding="utf-8")
        return page


def model_stats(frames: Frames, deadline_ms: float | None, rate_hz: float | None) -> dict[str, Any]:
    """One model's numbers in one phase."""
    worst = realtime.worst_case(frames.latencies_ms)
    completed = len(frames.latencies_ms)
    out: dict[str, Any] = {
        "frames": completed + len(frames.dropped_at),
        "completed": completed,
        "dropped": len(frames.dropped_at),
        "achieved_hz": completed / frames.seconds if frames.seconds else 0.0,
        "rate_hz": rate_hz,
        "latency": worst,
        "service": realtime.worst_case(frames.service_ms),
        "errors": frames.errors,
        "first_error": frames.first_error,
        "series": {
            "start_s": [round(t, 4) for t in frames.starts_s.tolist()],
            "latency_ms": [round(v, 4) for v in frames.latencies_ms.tolist()],
        },
    }
    if deadline_ms is not None:
        out["deadline"] = realtime.deadline_misses(
            frames.latencies_ms.tolist(), deadline_ms, dropped=frames.dropped_at.tolist()
        )
    return out


def build_result(
    spec: StackSpec,
    together: dict[str, Frames],
    alone: dict[str, Frames],
    best: dict[str, float],
    sources: dict[str, str],
    environment: dict[str, Any],
    watch: Watch,
    warnings: Sequence[str] = (),
) -> StackResult:
    """The result of a run: every model's numbers together and alone, the chains, the checks (the
    deadlines, errors, and the soak's: :mod:`deploykit.stack.soak`)."""
    models, checks, warnings = {}, [], list(warnings)
    for name, m in spec.models.items():
        head_rate = spec.models[spec.chain(name)[0]].rate_hz
        stats = model_stats(together[name], m.deadline_ms, head_rate)
        stats.update(
            source=sources.get(name, ""),
            best_case_ms=best.get(name),
            threads=m.threads,
            priority=m.priority,
            consumes=m.consumes,
            max_miss_rate=m.max_miss_rate,
        )
        if name in alone:
            stats["alone"] = model_stats(alone[name], m.deadline_ms, head_rate)
            a, t = stats["alone"]["latency"], stats["latency"]
            stats["slowdown"] = {
                "p50": t["p50_ms"] / a["p50_ms"] if a["p50_ms"] else None,
                "p99": t["p99_ms"] / a["p99_ms"] if a["p99_ms"] else None,
            }
        stats["soak"] = {"drift": soak.drift(together[name], spec.soak), "nonfinite": watch.outputs[name].to_dict()}
        models[name] = stats
        checks += _model_checks(name, stats) + soak.model_checks(name, stats["soak"], spec.soak)
    threads = sum(m.threads for m in spec.models.values())
    cpus = environment.get("cpus") or 0
    if spec.device == "cpu" and cpus and threads > cpus:
        warnings.append(f"the models' thread budgets add up to {threads} on {cpus} CPUs: they contend for cores")
    chains = {}
    for name, m in spec.models.items():
        if m.consumes is None:
            continue
        chain = " -> ".join(spec.chain(name))
        e2e = together[name].e2e_ms.tolist()
        chains[chain] = {"tail": name, "latency": realtime.worst_case(e2e), "frames": len(e2e)}
        if m.e2e_deadline_ms is not None:
            heads = len(together[spec.chain(name)[0]].latencies_ms) + len(together[spec.chain(name)[0]].dropped_at)
            d = realtime.deadline_misses(e2e, m.e2e_deadline_ms, dropped=[len(e2e)] * max(0, heads - len(e2e)))
            chains[chain]["deadline"] = d
            checks.append(
                _deadline(f"{chain}: end-to-end deadline {m.e2e_deadline_ms:g} ms", "chain", d, m.max_miss_rate)
            )
    memory = soak.memory(watch, spec.duration_s)
    checks += soak.memory_checks(memory, spec.soak)
    return StackResult(
        spec.name,
        spec.device,
        spec.duration_s,
        models,
        chains,
        tuple(checks),
        tuple(warnings),
        environment,
        memory,
        spec.alone_s if alone else 0.0,
    )


def _model_checks(name: str, stats: dict[str, Any]) -> list[Check]:
    out = []
    if stats.get("deadline"):
        out.append(
            _deadline(
                f"{name}: deadline {stats['deadline']['deadline_ms']:g} ms",
                "deadline",
                stats["deadline"],
                stats["max_miss_rate"],
            )
        )
    errors = stats["errors"]
    out.append(
        Check(
            "errors",
            f"{name}: errors",
            "pass" if not errors else "fail",
            not errors,
            "errors",
            float(errors),
            0.0,
            "<=",
            f"{errors} run(s) raised" + (f" (first: {stats['first_error']})" if errors else ""),
        )
    )
    return out


def _deadline(name: str, group: str, d: dict[str, Any], allowed: float) -> Check:
    c = realtime.deadline_check(d, allowed)
    return Check(
        group,
        name,
        "pass" if c["passed"] else "fail",
        c["passed"],
        "miss rate",
        c["measured"],
        allowed,
        "<=",
        c["message"],
    )


__all__ = ["SCHEMA", "StackResult", "build_result", "model_stats"]
