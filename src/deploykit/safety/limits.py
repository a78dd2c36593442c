"""Bounds on what one run may spend: time per stage, memory per input tensor.

A stage past its time limit raises TimeLimitExceeded (exit 3). At the deadline a SIGALRM raises in
the main thread, and again every second after; a block that swallowed every one and finished late
still raises when it ends. Native code that never returns to the interpreter cannot see an alarm:
on the command line the supervising parent (:mod:`deploykit.safety.supervise`), told each stage's limit,
ends the work ``GRACE_S`` after it with the same error and exit code; the temporaries left behind
are removed by the next run. Inside a notebook or a worker thread only the alarm applies.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from deploykit.errors import TimeLimitExceeded


@dataclass(frozen=True)
class LimitsConfig:
    """``limits:`` in deploykit.yaml."""

    stage_timeout_s: float = 7200.0  # wall-clock limit of every stage ...
    stage_timeouts: dict[str, float] = field(default_factory=dict)  # ... or of the stages named here
    max_input_mib: float = 1024.0  # the largest input tensor (at the max shape) a config may ask for

    def __post_init__(self) -> None:
        for name, seconds in [("stage_timeout_s", self.stage_timeout_s), *self.stage_timeouts.items()]:
            if not (seconds > 0 and math.isfinite(seconds)):
                raise ValueError(f"{name} must be a positive number of seconds, got {seconds}")
        if not (self.max_input_mib > 0 and math.isfinite(self.max_input_mib)):
            raise ValueError(f"max_input_mib must be positive, got {self.max_input_mib}")

    def timeout(self, stage: str) -> float:
        return self.stage_timeouts.get(stage, self.stage_timeout_s)


@contextlib.contextmanager
def time_limit(seconds: float, what: str, hint: str = "") -> Iterator[None]:
    """Raise TimeLimitExceeded in this block once ``seconds`` have passed."""
    from deploykit.safety import supervise

    error = TimeLimitExceeded(
        f"{what} ran past its time limit of {seconds:g} s",
        hint=hint or "raise limits.stage_timeout_s (or limits.stage_timeouts.<stage>)",
    )
    supervise.report(f"limit {seconds} {what}")
    try:
        with _alarm(seconds, error):
            yield
    finally:
        supervise.report("done")


@contextlib.contextmanager
def _alarm(seconds: float, error: TimeLimitExceeded) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise error

    previous = signal.signal(signal.SIGALRM, on_alarm)
    deadline = time.monotonic() + seconds
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if time.monotonic() > deadline:
        raise error  # the block swallowed every alarm and finished late: its result is past the limit


__all__ = ["LimitsConfig", "time_limit"]
