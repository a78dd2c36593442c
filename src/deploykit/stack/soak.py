"""The stack's soak checks: what a long together phase shows, judged with the stack file's ``soak:``
(:class:`deploykit.config.SoakLimits`, the gate's ``gate.soak``: one place for each threshold).

* **Latency drift, per model**: the median latency of the phase's first window against its last (the
  window is ``soak.window_s``, a third of a shorter phase, as the gate's). A few seconds of frames under
  a busy machine move the median by more than a leak would, so drift is *judged* only on windows of at
  least ``min(soak.window_s, 10 s)`` (a phase of 30 s or more with the default 60-s window) holding at
  least 5 frames each; shorter, it is reported and the check says why it was not judged (skipped).
* **NaN/Inf, per model**: the outputs the timed run itself returned (ONNX Runtime's runner returns
  them), looked at in the model's thread after the frame is recorded, at most every
  ``soak.check_every_s`` — no extra inference delays a frame — and one untimed ``session.infer`` after
  the phase (a runner that returns nothing, as TensorRT's, is covered by that one).
* **Memory, for the process**: resident memory sampled every ``check_every_s`` by the phase's main
  thread, median of the first window against the last (``max_rss_growth_mib``); device memory the same
  way where a session can tell (a TensorRT session's ``device_memory_used``; ``max_device_growth_mib``).
  Judged on any run: the harness's own per-frame records are allocated before the phase starts.

Errors are the existing per-model ``errors`` check (:mod:`deploykit.stack.record`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from deploykit.config import SoakLimits
from deploykit.errors import TimeLimitExceeded
from deploykit.metrics.reasons import Verdict
from deploykit.metrics.soak import growth, nonfinite_outputs, rss_bytes, soak_window
from deploykit.record.model import Check
from deploykit.stack.pacing import Frames

MIN_JUDGED_WINDOW_S = 10.0  # drift is judged on windows this long (or soak.window_s where that is shorter)
MIN_WINDOW_FRAMES = 5  # ... holding at least this many frames each
ALL = "all models"  # the name of the process-wide checks (a model's name has no space)


class OutputCheck:
    """NaN/Inf in one model's outputs, looked at no more often than ``every_s``."""

    def __init__(self, every_s: float, names: Sequence[str] = ()) -> None:
        self.every_s, self.names = every_s, tuple(names)
        self.checks = self.bad = 0
        self.first = ""
        self._next = -math.inf

    def due(self, now: float) -> bool:
        """Whether to look at this frame's outputs (then not again for ``every_s``)."""
        if now < self._next:
            return False
        self._next = now + self.every_s
        return True

    def look(self, outputs: Any, where: str) -> None:
        """Count one check of ``outputs`` (nothing when the runner returned nothing to look at)."""
        bad = nonfinite_outputs(outputs, self.names)
        if bad is None:
            return
        self.checks += 1
        if bad:
            self.bad += 1
            self.first = self.first or f"output {bad[0]!r} {where}"

    def after(self, infer: Callable[[], Any], frames: Frames) -> None:
        """One untimed inference after the phase; a raise is one of the model's errors."""
        try:
            outputs = infer()
        except TimeLimitExceeded:
            raise
        except Exception as e:
            frames.error(e)
            return
        self.look(outputs, "in the untimed inference after the run")

    def to_dict(self) -> dict[str, Any]:
        return {"checks": self.checks, "bad": self.bad, "first": self.first}


@dataclass
class Watch:
    """What the together phase watches besides the frames: the outputs of each model and the memory."""

    limits: SoakLimits
    outputs: dict[str, OutputCheck]
    device_bytes: Callable[[], int] | None = None  # device memory in use, where a session can tell
    memory: list[tuple[float, int, int | None]] = field(default_factory=list)  # (s into the phase, RSS, device)

    def sample(self, t: float) -> None:
        device = None
        if self.device_bytes is not None:
            try:
                device = self.device_bytes()
            except Exception:  # a query that fails leaves a gap in the series, not a failed run
                device = None
        self.memory.append((t, rss_bytes(), device))


def make_watch(limits: SoakLimits, sessions: dict[str, Any]) -> Watch:
    """A watch over ``sessions`` (by model name): output names for the NaN/Inf messages, and the first
    session that can tell device memory (every model shares the device, so one is the device's)."""
    device = next(
        (s.device_memory_used for s in sessions.values() if callable(getattr(s, "device_memory_used", 0))), None
    )
    outputs = {
        n: OutputCheck(limits.check_every_s, [o.name for o in getattr(s, "outputs", ())]) for n, s in sessions.items()
    }
    return Watch(limits, outputs, device)


def drift(frames: Frames, limits: SoakLimits) -> dict[str, Any]:
    """The median latency of the phase's first window against its last, and whether it is judged."""
    w = soak_window(limits, frames.seconds)
    t, v = frames.starts_s, frames.latencies_ms
    first, last = v[t <= w], v[t >= frames.seconds - w]
    a = float(np.median(first)) if first.size else 0.0
    b = float(np.median(last)) if last.size else 0.0
    needed = min(limits.window_s, MIN_JUDGED_WINDOW_S)
    why = ""
    if w < needed:
        why = (
            f"the phase is too short to judge drift: windows of {w:.3g} s, judged from {needed:g} s, "
            f"a phase of {3 * needed:g} s or more"
        )
    elif min(first.size, last.size) < MIN_WINDOW_FRAMES:
        why = f"{first.size} and {last.size} frames in the windows (judged from {MIN_WINDOW_FRAMES} each)"
    return {
        "window_s": w,
        "first_p50_ms": a,
        "last_p50_ms": b,
        "drift": b / a - 1.0 if a > 0 and b > 0 else 0.0,
        "first_frames": int(first.size),
        "last_frames": int(last.size),
        "judged": not why,
        "not_judged": why,
    }


def memory(watch: Watch, seconds: float) -> dict[str, Any]:
    """Resident (and device) memory growth over the phase, with the limits they are judged against."""
    w = soak_window(watch.limits, seconds)
    device = [(t, d) for t, _, d in watch.memory if d is not None]
    return {
        "limits": asdict(watch.limits),
        "window_s": w,
        "rss": growth([(t, r) for t, r, _ in watch.memory], w),
        "device_memory": growth(device, w) if watch.device_bytes is not None and device else None,
    }


def model_checks(name: str, soak: dict[str, Any], limits: SoakLimits) -> list[Check]:
    """One model's drift and NaN/Inf checks."""
    d, n = soak["drift"], soak["nonfinite"]
    text = (
        f"median latency {d['first_p50_ms']:.3f} ms in the first {d['window_s']:.3g} s, {d['last_p50_ms']:.3f} ms "
        f"in the last ({d['drift'] * 100:+.1f}%)"
    )
    if d["judged"]:
        ok = d["drift"] <= limits.max_drift
        drift = Check(
            "soak",
            f"{name}: latency drift",
            "pass" if ok else "fail",
            ok,
            "drift",
            d["drift"],
            limits.max_drift,
            "<=",
            text,
            () if ok else (Verdict.ABOVE_LIMIT.code,),
        )
    else:  # the message is the reason alone: the numbers are the soak table's and the model line's
        drift = Check(
            "soak",
            f"{name}: latency drift",
            "skipped",
            True,
            "drift",
            d["drift"],
            None,
            "<=",
            d["not_judged"],
            (Verdict.NOT_JUDGED.code,),
        )
    bad = Check(
        "soak",
        f"{name}: NaN/Inf",
        "pass" if not n["bad"] else "fail",
        not n["bad"],
        "checks with NaN/Inf",
        float(n["bad"]),
        0.0,
        "<=",
        f"{n['bad']} of {n['checks']} output checks held NaN/Inf" + (f" (first: {n['first']})" if n["first"] else ""),
        (Verdict.NONFINITE.code,) if n["bad"] else (),
    )
    return [drift, bad]


def memory_checks(mem: dict[str, Any], limits: SoakLimits) -> list[Check]:
    """The process's resident memory growth check (and device memory's, where a session could tell)."""
    out = []
    for key, what, limit in (
        ("rss", "resident memory", limits.max_rss_growth_mib),
        ("device_memory", "device memory", limits.max_device_growth_mib),
    ):
        g = mem.get(key)
        if g is None:
            continue
        ok = g["growth_mib"] <= limit
        out.append(
            Check(
                "soak",
                f"{ALL}: {what} growth",
                "pass" if ok else "fail",
                ok,
                "growth MiB",
                g["growth_mib"],
                limit,
                "<=",
                f"{what} {g['first_mib']:.1f} -> {g['last_mib']:.1f} MiB (median of the first {mem['window_s']:.3g} s "
                f"vs the last, {g['samples']} samples)",
                () if ok else (Verdict.ABOVE_LIMIT.code,),
            )
        )
    return out


__all__ = [
    "ALL",
    "MIN_JUDGED_WINDOW_S",
    "MIN_WINDOW_FRAMES",
    "OutputCheck",
    "Watch",
    "drift",
    "make_watch",
    "memory",
    "memory_checks",
    "model_checks",
]
