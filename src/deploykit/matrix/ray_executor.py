"""Cells as Ray tasks: one task per job with its target's resource request.

The driver's store is the source of truth. A job gets the model's files (one bundle per model) and
its inputs (the artifacts of the shared job it builds on, and what an earlier run of it left) through
Ray's object store; the worker verifies them on arrival, runs in a store of its own node, and returns
the artifacts the driver lacks, which the driver verifies again as it imports them. No filesystem is
shared unless the matrix says ``transfer: shared``; then every node opens the store path itself.

Retries: ``max_retries`` re-runs a task whose worker process or node died; ``retry_exceptions`` is
off, and the worker turns every deploykit error into a returned record, so a deterministic failure
runs once.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any

from deploykit.config import load_config
from deploykit.errors import DeployKitError, EnvironmentProblem, InternalError
from deploykit.matrix.bundle import bundle_model
from deploykit.matrix.plan import Job
from deploykit.matrix.transfer import pack, size
from deploykit.matrix.worker import JobOutcome, JobSpec, run_on_node
from deploykit.store.artifacts import Store

INSTALL_HINT = "pip install 'deploykit[ray]'"
_SPECIAL = {"CPU": "num_cpus", "GPU": "num_gpus", "memory": "memory"}  # Ray takes these as their own options


def require_ray() -> Any:
    """The ``ray`` module, or EnvironmentProblem (exit 3) saying how to install it."""
    if importlib.util.find_spec("ray") is None:
        raise EnvironmentProblem(f"--ray needs Ray, which is not installed: {INSTALL_HINT}", hint=INSTALL_HINT)
    import ray

    return ray


def task_options(job: Job, retries: int) -> dict[str, Any]:
    """Ray task options for a job: its resource request, bounded retries for dead workers only."""
    opts: dict[str, Any] = {
        "max_retries": retries,
        "retry_exceptions": False,
        "name": job.id,
        "num_cpus": 0,
        "resources": {},
    }
    for key, amount in job.requests.items():
        if key in _SPECIAL:
            opts[_SPECIAL[key]] = int(amount) if key == "memory" else amount
        else:
            opts["resources"][key] = amount
    return opts


class RayExecutor:
    name = "ray"

    def __init__(self, address: str, store: Store, retries: int, transfer: str, num_cpus: int | None = None) -> None:
        self.ray = ray = require_ray()
        self.store, self.retries = store, retries
        self.shared = str(store.root.resolve()) if transfer == "shared" else None
        self.owned = not ray.is_initialized()
        if self.owned:
            _connect(ray, address, num_cpus)
        from ray.util.queue import Queue

        self.queue = Queue(actor_options={"num_cpus": 0})
        self._remote = ray.remote(run_on_node)
        self._running: dict[Any, Job] = {}
        self._bundles: dict[str, Any] = {}  # bundle digest -> object ref
        self._bundle_of: dict[str, str] = {}  # config + overrides -> bundle digest
        self._packages: dict[str, Any] = {}  # input name -> object ref
        self.put_bytes = 0

    def nodes(self) -> dict[str, dict[str, float]]:
        alive = [n for n in self.ray.nodes() if n.get("Alive")]
        return {f"{n.get('NodeManagerAddress', '?')}/{n['NodeID'][:8]}": dict(n.get("Resources", {})) for n in alive}

    def can_start(self, job: Job) -> bool:
        return True  # Ray queues a task until a node has its resources

    def submit(self, job: Job, spec: JobSpec, inputs: list[tuple[str, list[str]]]) -> None:
        bundle = self._bundle(job)
        packages = [self._package(name, digests) for name, digests in inputs]
        ref = self._remote.options(**task_options(job, self.retries)).remote(
            spec, bundle, self.queue, self.shared, *packages
        )
        self._running[ref] = job

    def _bundle(self, job: Job) -> Any:
        key = json.dumps([str(job.config_path), job.overrides], sort_keys=True, default=str)
        if key not in self._bundle_of:
            b = bundle_model(job.config_path, load_config(job.config_path, job.overrides))
            self._bundle_of[key] = b.digest
            if b.digest not in self._bundles:
                self._bundles[b.digest] = self.ray.put(b)
                self.put_bytes += sum(len(v) for v in b.files.values())
        return self._bundles[self._bundle_of[key]]

    def _package(self, name: str, digests: list[str]) -> Any:
        if self.shared is not None:
            return {}  # every node reads the shared store itself
        if name not in self._packages:
            package = pack(self.store, digests)
            self.put_bytes += size(package)
            self._packages[name] = self.ray.put(package)
        return self._packages[name]

    def wait(self, timeout: float) -> list[tuple[str, JobOutcome | DeployKitError]]:
        if not self._running:
            return []
        ready, _ = self.ray.wait(list(self._running), num_returns=len(self._running), timeout=timeout)
        return [(self._running[ref].id, self._result(ref)) for ref in ready]

    def _result(self, ref: Any) -> JobOutcome | DeployKitError:
        job = self._running.pop(ref)
        exceptions = self.ray.exceptions
        try:
            return self.ray.get(ref)
        except exceptions.RayTaskError as e:  # raised inside the task, outside the pipeline's own mapping
            cause = getattr(e, "cause", None)
            if isinstance(cause, DeployKitError):
                return cause
            return InternalError(
                f"{job.id}: the task raised {type(cause or e).__name__}: {_first_line(cause or e)}",
                hint="rerun with DEPLOYKIT_DEBUG=1 and report it",
            )
        except exceptions.TaskCancelledError:
            return EnvironmentProblem(f"{job.id}: cancelled")
        except exceptions.RayError as e:  # worker or node died more often than max_retries allows
            return EnvironmentProblem(
                f"{job.id}: the worker died and {self.retries} retries did not finish it: "
                f"{type(e).__name__}: {_first_line(e)}",
                hint="check the node's memory and logs (ray logs); retries is a matrix key",
            )

    def busy(self) -> bool:
        return bool(self._running)

    def events(self) -> list[dict[str, Any]]:
        try:
            n = self.queue.size()
            return list(self.queue.get_nowait_batch(n)) if n else []
        except Exception:  # the queue actor is gone (cluster shutting down): progress is best effort
            return []

    def cancel(self) -> None:
        for ref in list(self._running):
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # already finished or its worker is gone
                continue
        self._running.clear()

    def close(self) -> None:
        try:
            self.queue.shutdown()
        finally:
            if self.owned:
                self.ray.shutdown()


RAY_LOGS = "DEPLOYKIT_RAY_LOGS"  # set to 1 to see Ray's own INFO/WARNING lines on stderr


def _connect(ray: Any, address: str, num_cpus: int | None) -> None:
    """``local``: a fresh single-node cluster; ``auto``: the cluster on this machine; else its address.

    Ray's own INFO/WARNING lines stay off the user's stderr (its logs are in its session folder)
    unless ``DEPLOYKIT_RAY_LOGS=1``. Any failure to start or reach a cluster is the environment's
    (exit 3): Ray reports a start-up that took longer than its 30 s as a bare ``Exception``."""
    import logging
    import os

    quiet = os.environ.get(RAY_LOGS, "") in ("", "0")
    if quiet:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # its notice about usage statistics, and the upload
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR if quiet else logging.INFO}
    try:
        if address == "local":
            # A one-machine cluster: keep it on the loopback interface.
            ray.init(
                address="local", num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1", **options
            )
        else:
            ray.init(address=address, **options)
    except Exception as e:  # Ray raises bare Exception and TimeoutError for a slow start, ConnectionError elsewhere
        raise _start_failure(address, e) from e


def _start_failure(address: str, e: BaseException) -> EnvironmentProblem:
    """The one line for a Ray cluster that did not start or answer, with what to try."""
    text = _first_line(e)
    if isinstance(e, TimeoutError) or "timed out" in text.lower():
        return EnvironmentProblem(
            f"--ray {address}: Ray did not start in time ({text})",
            hint="the machine was too busy for Ray to start its processes within its 30 s: "
            "retry when it is quieter, give the matrix fewer jobs (-j), or run without "
            "--ray (the local process pool runs the same cells)",
        )
    return EnvironmentProblem(
        f"--ray {address}: cannot connect to a Ray cluster: {text}",
        hint="start one with `ray start --head`, pass its address (ray://HOST:10001), or use --ray local",
    )


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
