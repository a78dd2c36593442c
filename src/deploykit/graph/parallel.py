"""Run one graph on many samples with every core busy, and get the results back in order.

One batch-1 inference leaves much of a second core idle even with ONNX Runtime's intra-op threads
on both: YOLOv8n at 1024x1024 took 236-272 ms a tapped sample on 2 threads and 181-185 ms a sample
as two 1-thread runs side by side; a text recognizer 11.5 ms against 7.1-8.5 ms (2-core VM). So the
loops that run one graph over a list of samples (calibration, the FP32 reference) run
:func:`runs_at_once` samples at a time, each inference on its share of the cores. ONNX Runtime's
``run`` releases the GIL and one session may be run from several threads at once.

Nothing computed from the results changes: they come back in the samples' order, and a 1-thread
inference computes the same bits as a 2-thread one (compared on the four public models in
``bench/bench_real_models.py``: every tapped FP32 tensor as written, and the outputs of their INT8
graphs as ONNX Runtime's kernels compute them).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cores() -> int:
    """The cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def runs_at_once() -> int:
    """Inferences to run side by side: two where there are two cores or more (a third sample in
    flight would only hold another sample's outputs in memory)."""
    return 2 if cores() >= 2 else 1


# Side by side, up to runs + 1 samples' results are alive at once (those running and the one being
# read): where that would take more than this share of the machine's memory, samples run one at a time.
MEMORY_SHARE = 0.25


def runs_within_memory(bytes_each: int) -> int:
    """:func:`runs_at_once`, or 1 where that many results of ``bytes_each`` bytes would take more than
    :data:`MEMORY_SHARE` of this machine's memory (a calibration tap of a high-resolution model)."""
    runs = runs_at_once()
    return runs if (runs + 1) * bytes_each <= MEMORY_SHARE * _memory() else 1


def _memory() -> float:
    """This machine's memory in bytes (unlimited where the OS does not say)."""
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return float("inf")


def threads_per_run(runs: int | None = None) -> int:
    """Intra-op threads for a session that :func:`in_order` runs ``runs`` (default :func:`runs_at_once`)
    at a time."""
    return max(1, cores() // (runs_at_once() if runs is None else runs))


class Background(Generic[R]):
    """``work()`` running on a thread of its own (:func:`in_background`); :meth:`result` waits for it."""

    def __init__(self, work: Callable[[], R]) -> None:
        self._outcome: tuple[bool, object] = (False, RuntimeError("the background work never ran"))
        self._thread = threading.Thread(target=self._run, args=(work,), name="deploykit-ahead")
        self._thread.start()

    def _run(self, work: Callable[[], R]) -> None:
        try:
            self._outcome = (True, work())
        except BaseException as e:  # raised again where the result is read
            self._outcome = (False, e)

    def result(self) -> R:
        """The work's result, or its exception raised here."""
        self._thread.join()
        done, value = self._outcome
        if not done:
            raise value  # type: ignore[misc]
        return value  # type: ignore[return-value]


def in_background(work: Callable[[], R]) -> Background[R]:
    """``work()`` started on a thread of its own, so that its inferences overlap single-core work on the
    caller's (placing Q/DQ in Python); ``.result()`` gives its result or raises its exception.

    A plain thread, joined: a one-thread pool shut down and dropped right after its submit left the
    quantize stage waiting for ever on a future whose thread had gone (once, a full suite beside four
    CPU burners), and a join has no hand-over to miss."""
    return Background(work)


def in_order(work: Callable[[T], R], items: Iterable[T], runs: int | None = None) -> Iterator[R]:
    """``work(item)`` for each item, ``runs`` (default :func:`runs_at_once`) at a time on worker
    threads, yielded in the items' order. The items are drawn on the caller's thread, at most ``runs``
    ahead of the result it is reading; an exception in ``work`` is raised where its result is read."""
    runs = runs_at_once() if runs is None else runs
    if runs <= 1:
        yield from map(work, items)
        return
    pool = ThreadPoolExecutor(runs, thread_name_prefix="deploykit-run")
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(work, item))
            if len(pending) >= runs:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
