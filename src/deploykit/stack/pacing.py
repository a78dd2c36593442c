"""The stack's frame arithmetic, apart from threads and clocks so it is tested with plain numbers:
which frames a phase releases, which one a model runs next after a slow frame (the newest that has
arrived; the ones before it are dropped), and one model's frames as they complete (in memory allocated
before the phase, so a soak's memory check does not count the harness's own bookkeeping)."""

from __future__ import annotations

import math

import numpy as np


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


class Frames:
    """One model's frames in one phase, in completion order.

    The per-frame numbers live in buffers allocated (and written, so the pages are resident) before the
    phase starts, sized for every frame the phase can release: recording a frame allocates nothing, so
    the resident memory a soak watches grows by what the models hold, not by the harness's bookkeeping.
    A buffer that fills (it should not) doubles.
    """

    def __init__(self, capacity: int = 0) -> None:
        size = max(16, capacity)
        self._values = np.full((4, size), np.nan)  # latency ms, service ms, start s, end-to-end ms
        self._dropped = np.full(size, -1, dtype=np.int64)
        self._n = self._n_e2e = self._n_dropped = 0
        self.errors = 0
        self.first_error = ""
        self.seconds = 0.0  # the phase's length
        self.t0 = 0.0  # the phase's start on the clock (seconds)

    @property
    def latencies_ms(self) -> np.ndarray:
        """completion - arrival (consumers: - producer done), per completed frame."""
        return self._values[0, : self._n]

    @property
    def service_ms(self) -> np.ndarray:
        """completion - start of the run: the model's own time."""
        return self._values[1, : self._n]

    @property
    def starts_s(self) -> np.ndarray:
        """When each run began, from the phase start."""
        return self._values[2, : self._n]

    @property
    def e2e_ms(self) -> np.ndarray:
        """Consumers: completion - the chain head's arrival."""
        return self._values[3, : self._n_e2e]

    @property
    def dropped_at(self) -> np.ndarray:
        """For each dropped or failed frame, its place in the series (the completed frame it came before)."""
        return self._dropped[: self._n_dropped]

    def add(self, latency_s: float, service_s: float, start_s: float, e2e_s: float | None) -> None:
        if self._n == self._values.shape[1]:
            self._values = np.concatenate([self._values, np.full_like(self._values, np.nan)], axis=1)
        i = self._n
        self._values[0, i], self._values[1, i], self._values[2, i] = latency_s * 1e3, service_s * 1e3, start_s
        if e2e_s is not None:
            self._values[3, self._n_e2e] = e2e_s * 1e3
            self._n_e2e += 1
        self._n = i + 1

    def error(self, e: Exception) -> None:
        """A run that raised: counted (the model goes on), the first one kept in words."""
        self.errors += 1
        self.first_error = self.first_error or f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"

    def drop(self, count: int = 1) -> None:
        """``count`` frames missed (dropped or failed) before the next completed one."""
        while self._n_dropped + count > self._dropped.size:
            self._dropped = np.concatenate([self._dropped, np.full_like(self._dropped, -1)])
        self._dropped[self._n_dropped : self._n_dropped + count] = self._n
        self._n_dropped += count


__all__ = ["Frames", "next_frame", "released"]
