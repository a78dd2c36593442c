"""A soak: run one timed call for minutes and report what only time shows.

Latency drift (the median of the first window against the last), resident memory growth (and
device memory where the session can tell), NaN/Inf in any output (checked every ``check_every_s``
outside the timed call), and errors (a call that raised is counted, the soak goes on). Memory stays
bounded however long the soak runs — the first window's latencies, a rolling last window, one row per
second and a fixed histogram — so the soak's own bookkeeping never reads as a leak.

The caller (the gate, the stack harness) turns :func:`soak_checks` into verdicts; a soak is measured
on every run, never reused from the cache.
"""

from __future__ import annotations

import collections
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deploykit.errors import TimeLimitExceeded
from deploykit.metrics import latency, realtime

_MIB = float(1 << 20)
MAX_ERRORS = 1000  # a call that fails every time fails the soak long before this; stop counting there
# Latency histogram for p99.9 over a soak of any length: log-spaced from 1 us to 100 s, ~0.5 % per bin.
_EDGES = np.geomspace(1e-3, 1e5, 4001)


def rss_bytes() -> int:
    """This process's resident memory now (Linux: /proc/self/statm; elsewhere the peak, from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass
class _Series:
    """Bounded bookkeeping of the soak's latencies."""

    window_s: float
    first: list[float] = field(default_factory=list)
    last: collections.deque[tuple[float, float]] = field(default_factory=collections.deque)
    seconds: list[list[float]] = field(default_factory=list)  # [second, runs, p50 ms, max ms]
    bucket: list[float] = field(default_factory=list)
    counts: np.ndarray = field(default_factory=lambda: np.zeros(len(_EDGES) + 1, np.int64))
    late: int = 0
    run_late: int = 0
    longest_late: int = 0
    n: int = 0
    top: float = 0.0

    def add(self, t: float, ms: float, deadline_ms: float | None) -> None:
        self.n += 1
        self.top = max(self.top, ms)
        if t <= self.window_s:
            self.first.append(ms)
        self.last.append((t, ms))
        while self.last and self.last[0][0] < t - self.window_s:
            self.last.popleft()
        second = math.floor(t)
        if self.seconds and second != self.seconds[-1][0]:
            self._close()
        if not self.seconds or second != self.seconds[-1][0]:
            self.seconds.append([float(second), 0.0, 0.0, 0.0])
        self.bucket.append(ms)
        self.counts[int(np.searchsorted(_EDGES, ms))] += 1
        if deadline_ms is not None:
            over = ms > deadline_ms
            self.late += over
            self.run_late = self.run_late + 1 if over else 0
            self.longest_late = max(self.longest_late, self.run_late)

    def _close(self) -> None:
        if self.bucket:
            self.seconds[-1][1:] = [float(len(self.bucket)), float(np.median(self.bucket)), max(self.bucket)]
            self.bucket = []

    def p999(self) -> float:
        if not self.n:
            return 0.0
        i = int(np.searchsorted(np.cumsum(self.counts), math.ceil(0.999 * self.n)))
        return float(min(_EDGES[min(i, len(_EDGES) - 1)], self.top))  # the bin's upper edge, at most the max

    def drift(self) -> dict[str, Any]:
        self._close()
        if not self.first or not self.last:
            return {"window_s": self.window_s, "first_p50_ms": 0.0, "last_p50_ms": 0.0, "drift": 0.0}
        a, b = float(np.median(self.first)), float(np.median([v for _, v in self.last]))
        return {"window_s": self.window_s, "first_p50_ms": a, "last_p50_ms": b, "drift": b / a - 1.0 if a > 0 else 0.0}


def run_soak(
    run: Callable[[], Any],
    infer: Callable[[], Mapping[str, Any]],
    seconds: float,
    limits: Any,
    *,
    device_bytes: Callable[[], int] | None = None,
    deadline_ms: float | None = None,
) -> dict[str, Any]:
    """Time ``run`` back to back for ``seconds``; every ``limits.check_every_s`` check ``infer()``'s outputs
    and sample memory (outside the timed calls).

    Args:
        run: the timed call (the gate's runner).
        infer: one inference returning outputs by name, for the NaN/Inf check.
        seconds: how long to soak.
        limits: the soak's settings (:class:`deploykit.config.SoakLimits`: window_s, check_every_s).
        device_bytes: device memory in use now, where the session can tell (a GPU); None otherwise.
        deadline_ms: the target's deadline, to count misses over the soak.
    """
    window = soak_window(limits, seconds)
    series = _Series(window)
    memory: list[tuple[float, int, int | None]] = []
    errors: dict[str, Any] = {"count": 0, "first": ""}
    nonfinite: dict[str, Any] = {"checks": 0, "bad": 0, "first": ""}
    clock, start = latency.CLOCK_NS, latency.now_s()
    next_check = start
    while True:
        now = latency.now_s()
        if now - start >= seconds or errors["count"] >= MAX_ERRORS:
            break
        if now >= next_check:
            _check(infer, now - start, nonfinite, errors)
            memory.append((now - start, rss_bytes(), device_bytes() if device_bytes else None))
            next_check = now + limits.check_every_s
        t0 = clock()
        try:
            run()
        except TimeLimitExceeded:
            raise
        except Exception as e:  # counted, and the soak goes on: a flaky call is what a soak exists to find
            _error(errors, now - start, e)
            continue
        series.add((t0 / 1e9) - start, (clock() - t0) / 1e6, deadline_ms)
    end = latency.now_s() - start
    memory.append((end, rss_bytes(), device_bytes() if device_bytes else None))
    out = {
        "seconds": round(end, 3),
        "iterations": series.n,
        "drift": series.drift(),
        "worst_case": {"p999_ms": series.p999(), "max_ms": series.top, "p999_resolution": "0.5%"},
        "rss": growth([(t, r) for t, r, _ in memory], window),
        "device_memory": growth([(t, d) for t, _, d in memory if d is not None], window) if device_bytes else None,
        "nonfinite": nonfinite,
        "errors": errors,
        "per_second": series.seconds,
    }
    if deadline_ms is not None:
        out["deadline"] = {
            "deadline_ms": deadline_ms,
            "frames": series.n,
            "misses": series.late,
            "dropped": 0,
            "miss_rate": series.late / series.n if series.n else 0.0,
            "longest_miss_run": series.longest_late,
        }
    return out


def _check(infer: Callable[[], Mapping[str, Any]], t: float, nonfinite: dict[str, Any], errors: dict[str, Any]) -> None:
    nonfinite["checks"] += 1
    try:
        outputs = infer()
    except TimeLimitExceeded:
        raise
    except Exception as e:
        _error(errors, t, e)
        return
    bad = nonfinite_outputs(outputs) or []
    if bad:
        nonfinite["bad"] += 1
        nonfinite["first"] = nonfinite["first"] or f"output {bad[0]!r} at {t:.1f} s"


def nonfinite_outputs(outputs: Any, names: Sequence[str] = ()) -> list[str] | None:
    """The outputs holding NaN or Inf (floating or complex arrays), by name (by ``names`` in order for a
    list of outputs, else ``#i``); None when ``outputs`` is neither a mapping nor a list (a runner that
    returns nothing, as TensorRT's timed runner: there is nothing to look at)."""
    if isinstance(outputs, Mapping):
        items = [(str(k), v) for k, v in outputs.items()]
    elif isinstance(outputs, (list, tuple)):
        items = [(names[i] if i < len(names) else f"#{i}", v) for i, v in enumerate(outputs)]
    else:
        return None
    return [n for n, v in items if isinstance(v, np.ndarray) and v.dtype.kind in "fc" and not np.isfinite(v).all()]


def _error(errors: dict[str, Any], t: float, e: Exception) -> None:
    errors["count"] += 1
    if not errors["first"]:
        errors["first"] = f"at {t:.1f} s: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def soak_window(limits: Any, seconds: float) -> float:
    """The first and the last window a soak of ``seconds`` compares: ``limits.window_s``, or a third of a
    shorter soak (the gate's soak and the stack's together phase alike)."""
    return min(limits.window_s, seconds / 3)


def growth(samples: list[tuple[float, int]], window: float) -> dict[str, Any]:
    """The median of the samples in the first window against those in the last, in MiB."""
    if not samples:
        return {"first_mib": 0.0, "last_mib": 0.0, "growth_mib": 0.0, "samples": 0}
    end = samples[-1][0]
    first = [v for t, v in samples if t <= window] or [samples[0][1]]
    last = [v for t, v in samples if t >= end - window] or [samples[-1][1]]
    a, b = float(np.median(first)) / _MIB, float(np.median(last)) / _MIB
    return {"first_mib": round(a, 3), "last_mib": round(b, 3), "growth_mib": round(b - a, 3), "samples": len(samples)}


def soak_checks(soak: dict[str, Any], limits: Any, max_miss_rate: float | None = None) -> list[dict[str, Any]]:
    """The soak's verdicts as gate check dicts: drift, memory growth, NaN/Inf, errors (and the deadline)."""
    d, rss, device = soak["drift"], soak["rss"], soak.get("device_memory")
    checks = [
        _check_dict(
            "soak latency drift",
            "drift",
            d["drift"],
            limits.max_drift,
            f"median {d['first_p50_ms']:.3f} ms in the first {d['window_s']:g} s, {d['last_p50_ms']:.3f} ms "
            f"in the last ({d['drift'] * 100:+.1f}%)",
            "last window's median latency / first window's - 1",
        ),
        _check_dict(
            "soak resident memory growth",
            "MiB",
            rss["growth_mib"],
            limits.max_rss_growth_mib,
            f"resident memory {rss['first_mib']:.1f} -> {rss['last_mib']:.1f} MiB",
            "median RSS of the last window - of the first",
        ),
    ]
    if device is not None:
        checks.append(
            _check_dict(
                "soak device memory growth",
                "MiB",
                device["growth_mib"],
                limits.max_device_growth_mib,
                f"device memory {device['first_mib']:.1f} -> {device['last_mib']:.1f} MiB",
                "median device memory in use, last window - first",
            )
        )
    n = soak["nonfinite"]
    checks.append(
        _check_dict(
            "soak NaN/Inf",
            "bad checks",
            float(n["bad"]),
            0.0,
            f"{n['bad']} of {n['checks']} output checks held NaN/Inf"
            + (f" (first: {n['first']})" if n["first"] else ""),
            "outputs checked every check_every_s",
        )
    )
    e = soak["errors"]
    checks.append(
        _check_dict(
            "soak errors",
            "errors",
            float(e["count"]),
            0.0,
            f"{e['count']} call(s) raised" + (f" (first {e['first']})" if e["first"] else ""),
            "calls that raised during the soak",
        )
    )
    if max_miss_rate is not None and soak.get("deadline"):
        check = realtime.deadline_check(soak["deadline"], max_miss_rate)
        checks.append(
            {
                **check,
                "name": f"soak {check['name']}",
                "statistic": "share of frames over the deadline, every soak iteration",
            }
        )
    return checks


def _check_dict(name: str, metric: str, measured: float, limit: float, what: str, statistic: str) -> dict[str, Any]:
    ok = measured <= limit
    return {
        "name": name,
        "metric": metric,
        "target": limit,
        "measured": measured,
        "passed": ok,
        "statistic": statistic,
        "message": f"{name}: {what}: {measured:.4g} {'<=' if ok else '>'} allowed {limit:g}",
    }


__all__ = ["growth", "nonfinite_outputs", "rss_bytes", "run_soak", "soak_checks", "soak_window"]
