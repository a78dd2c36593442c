"""Trace ranges around every stage and every timed inference: NVTX ranges for Nsight Systems on a GPU
machine, the same ranges as a Chrome trace (``chrome://tracing``, https://ui.perfetto.dev) on the CPU.

Off by default, and then free: a span is one global read. Turned on by ``--trace out.json`` (the CLI),
``with deploykit.tracing.trace("out.json"):`` (Python), or ``DEPLOYKIT_TRACE=out.json`` (any run; the
trace is written when the process exits). ``DEPLOYKIT_TRACE=nvtx`` pushes NVTX ranges only (what an
``nsys profile -t cuda,nvtx,osrt deploykit gate ...`` run wants) and keeps no events, so an hour-long
run traced that way holds no more memory than an untraced one. NVTX ranges need the ``nvtx`` package;
without it they are a no-op and the Chrome trace says so in its metadata.

Inside a timed loop the Chrome trace costs one store per iteration: :func:`deploykit.metrics.latency.
time_iterations` records each iteration's start beside its duration and the events are written after
the loop. An NVTX range has to be pushed live, so with NVTX on each timed call is wrapped
(:func:`wrap`) — a few hundred nanoseconds that a trace of a sub-millisecond model shows.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ENV = "DEPLOYKIT_TRACE"
DOMAIN = "deploykit"


class Tracer:
    """Collected Chrome-trace events (complete events, ``ph: X``, microseconds) and the NVTX hook."""

    def __init__(self, path: Path | None, nvtx: Any) -> None:
        from deploykit.metrics import latency

        self.path, self.nvtx = path, nvtx
        self.origin_ns = latency.CLOCK_NS()
        self.events: list[dict[str, Any]] = []
        self.threads: dict[int, str] = {}
        self.lock = threading.Lock()

    def complete(self, name: str, start_ns: int, dur_ns: int, args: dict[str, Any] | None = None) -> None:
        """Keep one event for the Chrome trace; nothing without a file to write (NVTX only: a long run's
        events would grow without bound and never be read)."""
        if self.path is None:
            return
        tid = threading.get_native_id()
        event = {
            "name": name,
            "ph": "X",
            "pid": os.getpid(),
            "tid": tid,
            "ts": (start_ns - self.origin_ns) / 1e3,
            "dur": dur_ns / 1e3,
            "cat": name.split(" ")[0],
        }
        if args:
            event["args"] = args
        with self.lock:
            self.threads.setdefault(tid, threading.current_thread().name)
            self.events.append(event)

    def document(self) -> dict[str, Any]:
        names = [
            {"name": "thread_name", "ph": "M", "pid": os.getpid(), "tid": tid, "args": {"name": name}}
            for tid, name in sorted(self.threads.items())
        ]
        return {
            "traceEvents": names + self.events,
            "displayTimeUnit": "ms",
            "otherData": {"producer": "deploykit", "nvtx": "on" if self.nvtx else "off (no nvtx package)"},
        }

    def write(self) -> None:
        if self.path is None:
            return
        # atomically: a trace a viewer opens is whole or absent
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.document()))
        os.replace(tmp, self.path)


_ACTIVE: Tracer | None = None


def _nvtx() -> Any:
    try:
        import nvtx  # type: ignore[import-not-found]
    except ImportError:
        return None
    return nvtx


def start(path: str | Path | None) -> Tracer:
    """Turn tracing on (``path``: where the Chrome trace goes; None: NVTX ranges only)."""
    global _ACTIVE
    _ACTIVE = Tracer(Path(path) if path is not None else None, _nvtx())
    return _ACTIVE


def stop() -> Tracer | None:
    """Turn tracing off and write the trace; returns the tracer that was on."""
    global _ACTIVE
    tracer, _ACTIVE = _ACTIVE, None
    if tracer is not None:
        tracer.write()
    return tracer


@contextlib.contextmanager
def trace(path: str | Path | None) -> Iterator[Tracer]:
    """Trace the block: ``with trace("out.json"): deploykit.convert(...)``; the file is written at its end
    (also when the block raises)."""
    tracer = start(path)
    try:
        yield tracer
    finally:
        if _ACTIVE is tracer:
            stop()


def active() -> Tracer | None:
    return _ACTIVE


_OFF = contextlib.nullcontext()  # reusable: what span() returns when tracing is off


def span(name: str, **args: Any) -> contextlib.AbstractContextManager[None]:
    """A named range: an NVTX push/pop and a Chrome-trace event (a no-op when tracing is off: one global
    read and a shared null context, no generator per call — the stack harness opens one per frame)."""
    tracer = _ACTIVE
    return _OFF if tracer is None else _span(tracer, name, args)


@contextlib.contextmanager
def _span(tracer: Tracer, name: str, args: dict[str, Any]) -> Iterator[None]:
    from deploykit.metrics import latency

    if tracer.nvtx is not None:
        tracer.nvtx.push_range(name, domain=DOMAIN)
    begin = latency.CLOCK_NS()
    try:
        yield
    finally:
        tracer.complete(name, begin, latency.CLOCK_NS() - begin, args or None)
        if tracer.nvtx is not None:
            tracer.nvtx.pop_range(domain=DOMAIN)


def wrap(run: Callable[[], Any], name: str) -> Callable[[], Any]:
    """``run`` inside an NVTX range per call when NVTX is on; ``run`` itself otherwise."""
    tracer = _ACTIVE
    if tracer is None or tracer.nvtx is None:
        return run
    push, pop = tracer.nvtx.push_range, tracer.nvtx.pop_range

    def traced() -> Any:
        push(name, domain=DOMAIN)
        try:
            return run()
        finally:
            pop(domain=DOMAIN)

    return traced


def iterations(name: str, starts_ns: Sequence[int], durations_ms: Sequence[float], **args: Any) -> None:
    """Chrome-trace events for a timed loop's iterations, from the starts and durations it recorded."""
    tracer = _ACTIVE
    if tracer is None or tracer.path is None:
        return
    for i, (begin, ms) in enumerate(zip(starts_ns, durations_ms, strict=False)):
        tracer.complete(name, begin, int(ms * 1e6), {"i": i, **args})


def _from_environment() -> None:
    value = os.environ.get(ENV, "").strip()
    if not value or _ACTIVE is not None:
        return
    start(None if value.lower() == "nvtx" else value)
    atexit.register(stop)


_from_environment()

__all__ = ["ENV", "active", "iterations", "span", "start", "stop", "trace", "wrap"]
