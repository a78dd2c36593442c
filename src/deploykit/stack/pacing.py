"""The stack's frame arithmetic, apart from threads and clocks so it is tested with plain numbers:
which frames a phase releases, which one a model runs next after a slow frame (the newest that has
arrived; the ones before it are dropped), and one model's frames as they complete."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


def released(start: float, end: float, period: float) -> int:
    """How many frames arrive in [start, end): at start, start + period, ..."""
    return max(0, math.ceil((end - start) / period - 1e-9))


def next_frame(k: int, start: float, period: float, now: float, total: int) -> tuple[int, int]:
    """After frame ``k`` finished at ``now``: (the frame to run next, how many were dropped).

    Frames that arrived while the model was busy are dropped except the newest, which runs at once;
    with none arrived, the next frame is ``k + 1`` (the model waits for it). Frames past ``total``
    (after the phase's end) are neither run nor dropped.
    """
    newest = min(math.floor((now - start) / period + 1e-9), total - 1)
    if newest <= k + 1:
        return k + 1, 0
    return newest, newest - k - 1


@dataclass
class Frames:
    """One model's frames in one phase, in completion order."""

    latencies_ms: list[float] = field(default_factory=list)  # completion - arrival (consumers: - producer done)
    service_ms: list[float] = field(default_factory=list)  # completion - start of the run: the model alone
    starts_s: list[float] = field(default_factory=list)  # when each run began, from the phase start
    e2e_ms: list[float] = field(default_factory=list)  # consumers: completion - the chain head's arrival
    dropped_at: list[int] = field(default_factory=list)  # for each dropped or failed frame, its place in the series
    errors: int = 0
    first_error: str = ""
    seconds: float = 0.0  # the phase's length
    t0: float = 0.0  # the phase's start on the clock (seconds)

    def add(self, latency_s: float, service_s: float, start_s: float, e2e_s: float | None) -> None:
        self.latencies_ms.append(latency_s * 1e3)
        self.service_ms.append(service_s * 1e3)
        self.starts_s.append(start_s)
        if e2e_s is not None:
            self.e2e_ms.append(e2e_s * 1e3)


__all__ = ["Frames", "next_frame", "released"]
