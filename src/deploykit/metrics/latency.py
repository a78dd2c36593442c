"""Latency statistics over repeated trials, and a noise-aware comparison against a baseline.

A single latency number from a shared machine moves by tens of percent between runs; what can be
trusted is the median over several trials *and* how far the trials spread. A regression is only
called when even the most favourable pairing of trials (the best current trial against the worst
baseline trial) is slower by more than the threshold: a slowdown hidden inside the spread is
reported as such, never as a failure.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

PERCENTILES = ("p50_ms", "p90_ms", "p99_ms")

# The one clock every timing reads (nanoseconds, monotonic). Tests of the gate's and the stack's logic
# replace it with a stand-in clock (``monkeypatch.setattr(latency, "CLOCK_NS", fake)``), so no test
# depends on how fast the machine is.
CLOCK_NS: Callable[[], int] = time.perf_counter_ns


def now_s() -> float:
    """:data:`CLOCK_NS` in seconds."""
    return CLOCK_NS() / 1e9


def warm_up(run: Any, count: int, seconds: float) -> tuple[int, float]:
    """Run until both ``count`` runs and ``seconds`` have passed; return (runs, seconds) spent."""
    start = now_s()
    end, n = start + seconds, 0
    while n < count or now_s() < end:
        run()
        n += 1
    return n, now_s() - start


def time_iterations(run: Any, n: int, starts: list[int] | None = None) -> list[float]:
    """Per-iteration wall times in ms. The loop body is the call and two clock reads, nothing else:
    no logging, no progress, no allocation (the list exists before the first iteration).

    ``starts``, when given, receives each iteration's start (ns on :data:`CLOCK_NS`): for a trace or a
    series over time, at the cost of one more store per iteration.
    """
    clock = CLOCK_NS
    out = [0] * n
    if starts is None:
        for i in range(n):
            t0 = clock()
            run()
            out[i] = clock() - t0
    else:
        begun = [0] * n
        for i in range(n):
            t0 = clock()
            run()
            out[i] = clock() - t0
            begun[i] = t0
        starts.extend(begun)
    return [t / 1e6 for t in out]


def summarize(values_ms: list[float]) -> dict[str, Any]:
    """Latency statistics in milliseconds."""
    arr = np.asarray(values_ms, dtype=np.float64)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {
        "p50_ms": float(p50),
        "p90_ms": float(p90),
        "p99_ms": float(p99),
        "mean_ms": float(arr.mean()),
        "min_ms": float(arr.min()),
        "max_ms": float(arr.max()),
        "std_ms": float(arr.std()),
        "n": int(arr.size),
    }


def aggregate_trials(trials_ms: list[list[float]]) -> dict[str, Any]:
    """Per-trial statistics, their median (the reported latency) and their spread.

    Returns:
        ``{"latency": {...}, "spread": {key: {"min", "max", "rel"}}, "trials": [summary per trial]}``
        where ``latency`` holds the median over trials of each statistic (``n`` is the total count)
        and ``rel`` is (max - min) / median over trials.
    """
    per = [summarize(t) for t in trials_ms]
    latency: dict[str, Any] = {}
    spread = {}
    for key in (*PERCENTILES, "mean_ms"):
        values = [p[key] for p in per]
        latency[key] = statistics.median(values)
        spread[key] = {"min": min(values), "max": max(values), "rel": _rel_range(values)}
    latency.update(
        min_ms=min(p["min_ms"] for p in per),
        max_ms=max(p["max_ms"] for p in per),
        std_ms=float(np.std(np.concatenate([np.asarray(t) for t in trials_ms]))),
        n=sum(p["n"] for p in per),
    )
    return {"latency": latency, "spread": spread, "trials": per}


def _rel_range(values: list[float]) -> float:
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid > 0 else 0.0


def fps_trials(trials: list[dict[str, Any]], batch: int) -> list[float]:
    """Throughput of each trial: batch / median latency."""
    return [batch * 1000.0 / t["p50_ms"] for t in trials]


def regression(
    name: str, unit: str, current: list[float], baseline: list[float], threshold: float, higher_is_better: bool
) -> dict[str, Any]:
    """Compare one metric's trial values with the baseline's.

    Args:
        name: what is compared, for messages ("fps", "p99 latency").
        unit: its unit, for messages.
        current: this run's value per trial.
        baseline: the baseline's value per trial.
        threshold: allowed slowdown (0.10 = 10 %).
        higher_is_better: True for throughput, False for latency.

    Returns:
        A check dict: ``slowdown`` (median vs median, as a time ratio - 1), ``slowdown_at_least``
        (best current trial vs worst baseline trial), ``passed`` and a message that says by how much.
    """
    cur, base = statistics.median(current), statistics.median(baseline)
    if higher_is_better:
        slowdown, at_least = base / cur - 1.0, min(baseline) / max(current) - 1.0
    else:
        slowdown, at_least = cur / base - 1.0, min(current) / max(baseline) - 1.0
    regressed = at_least > threshold
    spread = max(_rel_range(current), _rel_range(baseline))
    verb = "slower" if slowdown > 0 else "faster"
    text = f"{name} {base:.4g} -> {cur:.4g} {unit}: {abs(slowdown) * 100:.1f}% {verb}"
    if regressed:
        text += (
            f", at least {at_least * 100:.1f}% across all trial pairs (> {threshold * 100:g}% allowed; "
            f"trial spread {spread * 100:.1f}%)"
        )
    elif slowdown > threshold:
        text += f", within the measured noise (trial spread {spread * 100:.1f}%): not a regression"
    return {
        "name": f"baseline {name}",
        "metric": name,
        "baseline": base,
        "measured": cur,
        "slowdown": slowdown,
        "slowdown_at_least": at_least,
        "threshold": threshold,
        "spread": spread,
        "passed": not regressed,
        "message": text,
    }


def naive_regression(current_mean: float, baseline_mean: float, threshold: float) -> bool:
    """What a bare percentage gate on mean latency would say (for the stability benchmark)."""
    return current_mean / baseline_mean - 1.0 > threshold
