"""Real-time statistics of a latency series: the worst case, deadline misses, drift.

A consumer that ships into a frame budget cares about the frame that arrives late, not the median
one. The gate and the stack harness (:mod:`deploykit.stack`) both hand this module per-frame
latencies in arrival order (every iteration, never a sample of them) and read the same numbers:

* :func:`worst_case` — p50, p99, p99.9, max and jitter (p99 - p50);
* :func:`deadline_misses` — the share of frames over a deadline (a dropped frame is a miss) and the
  longest run of consecutive misses (a planner tolerates one late frame, not ten in a row);
* :func:`drift` — the median of the first window against the last one (a soak's slow leak);
* :func:`averaged` — means of ``n`` consecutive runs (trtexec's ``--avgRuns``).

Pure functions on numbers: no clock, no session, so they are tested with made-up series.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def worst_case(latencies_ms: Sequence[float]) -> dict[str, Any]:
    """p50, p99, p99.9, max and jitter (p99 - p50) in ms over every value given."""
    arr = np.asarray(latencies_ms, dtype=np.float64)
    if arr.size == 0:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "p999_ms": 0.0, "max_ms": 0.0, "jitter_ms": 0.0, "n": 0}
    p50, p99, p999 = (float(v) for v in np.percentile(arr, [50, 99, 99.9]))
    return {
        "p50_ms": p50,
        "p99_ms": p99,
        "p999_ms": p999,
        "max_ms": float(arr.max()),
        "jitter_ms": p99 - p50,
        "n": int(arr.size),
    }


def longest_run(flags: Sequence[bool]) -> int:
    """The longest run of consecutive true values."""
    best = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


def deadline_misses(
    latencies_ms: Sequence[float], deadline_ms: float, *, dropped: Sequence[int] = ()
) -> dict[str, Any]:
    """Frames over ``deadline_ms`` (a latency equal to it is on time).

    Args:
        latencies_ms: the latency of each completed frame, in arrival order.
        deadline_ms: the per-frame budget.
        dropped: for each frame that never ran (the model was still busy with an older one), its
            position in the series (the index of the completed frame it was skipped before); each
            counts as a miss, and runs of misses span them.

    Returns:
        ``frames`` (completed + dropped), ``misses``, ``dropped``, ``miss_rate``, ``longest_miss_run``.
    """
    late = [v > deadline_ms for v in latencies_ms]
    series: list[bool] = []
    drops = sorted(dropped)
    d = 0
    for i, flag in enumerate(late):
        while d < len(drops) and drops[d] <= i:
            series.append(True)
            d += 1
        series.append(flag)
    series += [True] * (len(drops) - d)
    frames, misses = len(series), sum(series)
    return {
        "deadline_ms": deadline_ms,
        "frames": frames,
        "misses": misses,
        "dropped": len(drops),
        "miss_rate": misses / frames if frames else 0.0,
        "longest_miss_run": longest_run(series),
    }


def deadline_check(stats: dict[str, Any], max_miss_rate: float) -> dict[str, Any]:
    """The deadline's verdict as a gate check dict (``name`` "deadline <ms> ms", measured the miss rate)."""
    rate, ok = stats["miss_rate"], stats["miss_rate"] <= max_miss_rate
    dropped = f", {stats['dropped']} dropped" if stats.get("dropped") else ""
    text = (
        f"deadline {stats['deadline_ms']:g} ms: {stats['misses']} of {stats['frames']} frames late "
        f"({rate * 100:.2f}%{dropped}; longest run {stats['longest_miss_run']}) "
        f"{'<=' if ok else '>'} allowed {max_miss_rate * 100:g}%"
    )
    return {
        "name": f"deadline {stats['deadline_ms']:g} ms",
        "metric": "miss rate",
        "target": max_miss_rate,
        "measured": rate,
        "passed": ok,
        "message": text,
        "statistic": "share of frames over the deadline, every timed iteration of every trial",
    }


def averaged(latencies_ms: Sequence[float], n: int) -> list[float]:
    """Means of ``n`` consecutive values (a last, shorter group is dropped unless it is the only one)."""
    if n <= 1:
        return list(latencies_ms)
    arr = np.asarray(latencies_ms, dtype=np.float64)
    full = arr.size // n
    if full == 0:
        return [float(arr.mean())] if arr.size else []
    return [float(x) for x in arr[: full * n].reshape(full, n).mean(axis=1)]


__all__ = ["averaged", "deadline_check", "deadline_misses", "longest_run", "worst_case"]
