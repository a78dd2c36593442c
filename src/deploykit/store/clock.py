"""The one timestamp format: UTC ISO 8601 to the millisecond, so records and artifacts of one store
sort by it (two stages finishing within one second still order correctly)."""

from __future__ import annotations

import time


def stamp(at: float | None = None) -> str:
    """``at`` (seconds since the epoch; now if omitted) as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    at = time.time() if at is None else at
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1000):03d}Z"
