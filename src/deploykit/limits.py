"""Bounds on what one run may spend: time per stage, memory per input tensor.

A stage past its time limit raises TimeLimitExceeded (exit 3). The limit is enforced in two steps:
at the deadline a SIGALRM raises in the main thread, and again every second after (code that
swallows one exception still stops); native code that never returns to Python is then ended by a
watchdog, which the command-line entry point enables (``hard_exit``): it prints the error line and
exits with the same code, leaving temporaries that the next run removes. Inside a notebook or a
worker thread only the first step applies.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from deploykit.errors import TimeLimitExceeded

HARD_EXIT_GRACE_S = 10.0
_STATE = {"hard_exit": False}


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


def enable_hard_exit() -> None:
    """Let time limits end the process when native code does not return (the CLI does this)."""
    _STATE["hard_exit"] = True


@contextlib.contextmanager
def time_limit(seconds: float, what: str, hint: str = "") -> Iterator[None]:
    """Raise TimeLimitExceeded in this block once ``seconds`` have passed."""
    error = TimeLimitExceeded(f"{what} ran past its time limit of {seconds:g} s",
                              hint=hint or "raise limits.stage_timeout_s (or limits.stage_timeouts.<stage>)")
    main = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    watchdog = _watchdog(seconds + HARD_EXIT_GRACE_S, error) if _STATE["hard_exit"] else None
    if not main:
        try:
            yield
        finally:
            if watchdog:
                watchdog.cancel()
        return

    def on_alarm(signum: int, frame: object) -> None:
        raise error

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if watchdog:
            watchdog.cancel()


def _watchdog(seconds: float, error: TimeLimitExceeded) -> threading.Timer:
    def expire() -> None:
        with contextlib.suppress(Exception):
            sys.stderr.write(f"error: {error.message}\nhint: {error.hint}\n")
            sys.stderr.flush()
        os._exit(error.exit_code)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


__all__ = ["LimitsConfig", "enable_hard_exit", "time_limit"]
