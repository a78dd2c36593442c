"""Cells in a pool of local processes sharing the driver's store (the default: no Ray needed).

A job starts when the machine has the CPUs (and GPUs) its target asks for, so the pool never
oversubscribes the cores a gate is timing on. A job whose process dies (killed, out of memory) is
run again up to ``retries`` times, like a Ray task; every other failure is the job's own record.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
from pathlib import Path
from typing import Any

from deploykit.errors import EnvironmentProblem
from deploykit.matrix.plan import Job
from deploykit.matrix.worker import JobOutcome, JobSpec, run_in_store

Completion = tuple[str, "JobOutcome | EnvironmentProblem"]

# Imported once in the fork server, so each worker starts with them loaded instead of importing them
# again (seconds each on a busy machine). ORT's quantizer pulls in torch: only when a cell quantizes.
PRELOAD = (
    "deploykit.matrix.worker",
    "deploykit.pipeline.runner",
    "deploykit.stages.ingest",
    "deploykit.stages.surgery",
    "deploykit.stages.build",
    "deploykit.stages.parity",
    "deploykit.stages.gate",
    "deploykit.backends.onnxruntime",
    "onnxruntime",
)
PRELOAD_QUANTIZE = ("deploykit.stages.quantize", "deploykit.quant.quantize", "onnxruntime.quantization")


def local_resources(workers: int | None = None) -> dict[str, float]:
    """What this machine offers cells: its cores (or ``workers``) and its NVIDIA GPUs."""
    gpus = len(list(Path("/dev").glob("nvidia[0-9]*"))) if Path("/dev").is_dir() else 0
    return {"CPU": float(workers or os.cpu_count() or 1), "GPU": float(gpus)}


class LocalExecutor:
    name = "local"

    def __init__(self, store_root: Path, workers: int | None, retries: int, quantizes: bool = True) -> None:
        self.store_root, self.retries = str(store_root), retries
        self.total = local_resources(workers)
        self.used: dict[str, float] = {}
        # Workers fork from a fresh single-threaded server, never from this process (its threads: the
        # live view, the manager's) and never re-import everything as spawned processes would.
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(list(PRELOAD + (PRELOAD_QUANTIZE if quantizes else ())))
        self._manager = self._ctx.Manager()
        self.queue = self._manager.Queue()
        self._pool = self._new_pool()
        self._running: dict[cf.Future[JobOutcome], tuple[Job, JobSpec]] = {}
        self._deaths: dict[str, int] = {}

    def _new_pool(self) -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(max_workers=max(1, int(self.total["CPU"])), mp_context=self._ctx)

    def nodes(self) -> dict[str, dict[str, float]]:
        return {"this machine": self.total}

    def can_start(self, job: Job) -> bool:
        return all(self.used.get(k, 0.0) + v <= self.total.get(k, 0.0) for k, v in job.requests.items())

    def submit(self, job: Job, spec: JobSpec, inputs: list[tuple[str, list[str]]]) -> None:
        """Start ``job``; ``inputs`` are not needed here: the job reads the driver's store."""
        for k, v in job.requests.items():
            self.used[k] = self.used.get(k, 0.0) + v
        self._running[self._pool.submit(run_in_store, spec, self.store_root, self.queue)] = (job, spec)

    def wait(self, timeout: float) -> list[Completion]:
        done, _ = cf.wait(list(self._running), timeout=timeout, return_when=cf.FIRST_COMPLETED)
        out: list[Completion] = []
        broken = False
        for future in done:
            job, spec = self._running.pop(future)
            try:
                out.append((job.id, future.result()))
            except cf.process.BrokenProcessPool:
                broken = True
                self._release(job)
                out += self._died(job, spec)
                continue
            self._release(job)
        if broken:  # every job of a broken pool fails with it: retry them on a fresh pool
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()
            for future, (job, spec) in list(self._running.items()):
                del self._running[future]
                self._release(job)
                out += self._died(job, spec)
        return out

    def _died(self, job: Job, spec: JobSpec) -> list[Completion]:
        self._deaths[job.id] = self._deaths.get(job.id, 0) + 1
        if self._deaths[job.id] > self.retries:
            return [
                (
                    job.id,
                    EnvironmentProblem(
                        f"{job.id}: the worker process died {self._deaths[job.id]} times (retries: {self.retries})",
                        hint="look for an out-of-memory kill (dmesg); lower --jobs or raise the target's CPU request",
                    ),
                )
            ]
        self.submit(job, spec, [])
        return []

    def _release(self, job: Job) -> None:
        for k, v in job.requests.items():
            self.used[k] -= v

    def busy(self) -> bool:
        return bool(self._running)

    def events(self) -> list[dict[str, Any]]:
        out = []
        while True:
            try:
                out.append(self.queue.get_nowait())
            except Exception:  # queue.Empty, or the manager gone at shutdown
                return out

    def cancel(self) -> None:
        # The pool's own worker processes, started by this executor: an interrupted matrix stops them.
        processes = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        self._running.clear()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._manager.shutdown()
