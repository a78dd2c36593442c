"""One TensorRT logger per process, forwarding to Python logging and capturing messages for errors.

TensorRT keeps the first logger it is given for the whole process (later ones only trigger a
warning), so the backend shares one instance. Builds and loads capture what TensorRT logged at
WARNING and above, because the API itself only returns ``None`` on failure: the captured lines are
what turns "build failed" into "out of memory with a 4096 MiB workspace".
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Iterator
from typing import Any

_LOG = logging.getLogger("deploykit.tensorrt")
# TensorRT severities, most severe first: INTERNAL_ERROR=0, ERROR=1, WARNING=2, INFO=3, VERBOSE=4.
_PY_LEVELS = {0: logging.CRITICAL, 1: logging.ERROR, 2: logging.WARNING, 3: logging.DEBUG, 4: logging.DEBUG}
_KEEP_AT_MOST = 2  # WARNING
_MEMORY_WORDS = (
    "out of memory",
    "outofmemory",
    "could not be allocated",
    "insufficient memory",
    "cudaerrormemoryallocation",
    "cuda_error_out_of_memory",
    "requested amount of gpu memory",
)

_loggers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_loggers_lock = threading.Lock()


def get_logger(trt: Any) -> Any:
    """The process-wide logger for this TensorRT module (an ``ILogger`` subclass instance)."""
    with _loggers_lock:  # two threads asking at once must get the same logger: TensorRT keeps the first
        if trt not in _loggers:
            _loggers[trt] = _make_logger_class(trt)()
        return _loggers[trt]


def _make_logger_class(trt: Any) -> type:
    # Defined lazily: the base class lives in the tensorrt module, which is imported only on use.
    class CapturingLogger(trt.ILogger):
        """Captures per thread: the gate's concurrent sessions share this one logger.

        A message goes to every open capture of the thread that logs it (nested captures all see it).
        A message from a thread with no open capture (one of TensorRT's own worker threads) cannot be
        attributed, so it goes to every open capture.
        """

        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self._lock = threading.Lock()
            self._open: dict[int, list[list[tuple[int, str]]]] = {}  # thread id -> its open captures

        def log(self, severity: Any, msg: str) -> None:
            level = int(severity)
            _LOG.log(_PY_LEVELS.get(level, logging.DEBUG), "%s", msg)
            if level > _KEEP_AT_MOST:
                return
            with self._lock:
                targets = self._open.get(threading.get_ident()) or [r for rs in self._open.values() for r in rs]
                for records in targets:
                    records.append((level, msg))

        @contextlib.contextmanager
        def capture(self) -> Iterator[list[tuple[int, str]]]:
            """Collect WARNING-and-above messages logged inside the block (by this thread)."""
            records: list[tuple[int, str]] = []
            ident = threading.get_ident()
            with self._lock:
                self._open.setdefault(ident, []).append(records)
            try:
                yield records
            finally:
                with self._lock:
                    stack = self._open[ident]
                    del stack[next(i for i, r in enumerate(stack) if r is records)]
                    if not stack:
                        del self._open[ident]

    return CapturingLogger


def errors(records: list[tuple[int, str]]) -> list[str]:
    """The ERROR and INTERNAL_ERROR messages among captured records."""
    return [msg for level, msg in records if level <= 1]


def mentions_memory(records: list[tuple[int, str]]) -> bool:
    """Whether TensorRT's messages say a device allocation failed."""
    return any(word in msg.lower() for _, msg in records for word in _MEMORY_WORDS)


def last_lines(records: list[tuple[int, str]], n: int = 3) -> str:
    """The last ``n`` error messages (or warnings when there is no error), one per line."""
    picked = errors(records) or [msg for _, msg in records]
    return "\n".join(f"  {m.strip()}" for m in picked[-n:]) or "  (TensorRT logged no error)"
