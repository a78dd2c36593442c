"""What runs in a pool process or a Ray task: one job's pipeline, reported as plain data.

Every deploykit error is caught here and becomes the job's record: a deterministic failure returns
normally, so Ray never retries it; only a worker that dies (killed, out of memory, node lost) makes
Ray run the task again.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploykit.errors import DeployKitError
from deploykit.matrix.bundle import Bundle, materialize
from deploykit.matrix.results import RunRecord, artifact_digests, record_of
from deploykit.matrix.transfer import Package, pack, size, unpack
from deploykit.store.artifacts import Store

NODE_DIR_ENV = "DEPLOYKIT_NODE_DIR"  # a worker node's private folder: its store and the model bundles


@dataclass(frozen=True)
class JobSpec:
    id: str
    config: str  # an absolute path (local pool, shared store) or a path inside the bundle
    overrides: dict[str, Any]
    until: str | None
    rerun: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobOutcome:
    id: str
    record: RunRecord
    node: str
    pid: int
    seconds: float
    package: Package = field(default_factory=dict)  # artifacts produced that the driver lacks
    transfer: dict[str, float] = field(default_factory=dict)  # seconds and bytes moved in and out


class EventReporter:
    """Forwards stage events, tagged with the job, to the driver's queue; never blocks a stage on it."""

    def __init__(self, job: str, sink: Any) -> None:
        self.job, self.sink = job, sink

    def event(self, name: str, **fields: Any) -> None:
        emit(self.sink, {"event": name, "job": self.job, **fields})

    @contextlib.contextmanager
    def task(self, description: str, total: int) -> Iterator[Any]:
        yield lambda n=1: None


def emit(sink: Any, event: dict[str, Any]) -> None:
    if sink is None:
        return
    with contextlib.suppress(Exception):  # progress is best effort: a lost event never fails a cell
        sink.put_nowait(event)


def node_dir() -> Path:
    return Path(os.environ.get(NODE_DIR_ENV) or Path(tempfile.gettempdir()) / "deploykit-node")


def _where() -> str:
    """The host, and the Ray node when this runs in a Ray worker (one host may run several nodes)."""
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        with contextlib.suppress(Exception):
            return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:8]}"
    return socket.gethostname()


def execute(spec: JobSpec, config_path: Path, store: Store, sink: Any) -> tuple[RunRecord, list[str]]:
    """Run the job's pipeline against ``store``; return its record and every artifact it holds."""
    from deploykit.config import load_config
    from deploykit.pipeline.runner import run_pipeline
    from deploykit.stages import default_stages

    result, error = None, None
    try:
        config = load_config(config_path, spec.overrides)
        result = run_pipeline(
            config, store, default_stages(), reporter=EventReporter(spec.id, sink), until=spec.until, rerun=spec.rerun
        )
    except DeployKitError as e:
        error, result = e, getattr(e, "result", None)
    except Exception as e:  # a bug, or user code failing outside the stages' own error mapping
        error = e
    return record_of(result, error), artifact_digests(result)


def run_in_store(spec: JobSpec, store_root: str, sink: Any) -> JobOutcome:
    """Local pool (and shared-filesystem clusters): the job reads and writes the driver's store."""
    start = time.perf_counter()
    emit(sink, {"event": "job_start", "job": spec.id, "pid": os.getpid(), "node": _where(), "time": time.time()})
    record, _ = execute(spec, Path(spec.config), Store(store_root), sink)
    return JobOutcome(spec.id, record, _where(), os.getpid(), round(time.perf_counter() - start, 4))


def run_on_node(spec: JobSpec, bundle: Bundle, sink: Any, shared_store: str | None, *packages: Package) -> JobOutcome:
    """Ray worker: materialize the model's files and the inputs here, run, return what is new.

    With ``shared_store`` the node reads and writes that store directly and nothing is returned.
    """
    start = time.perf_counter()
    emit(sink, {"event": "job_start", "job": spec.id, "pid": os.getpid(), "node": _where(), "time": time.time()})
    here = node_dir()
    config_path = materialize(bundle, here / "bundles")
    if shared_store is not None:
        record, _ = execute(spec, config_path, Store(shared_store), sink)
        return JobOutcome(spec.id, record, _where(), os.getpid(), round(time.perf_counter() - start, 4))
    store = Store(here / "store")
    t0 = time.perf_counter()
    known = {a.digest for p in packages for a in unpack(store, p, origin=f"job {spec.id}")}
    t_in = time.perf_counter() - t0
    record, digests = execute(spec, config_path, store, sink)
    t0 = time.perf_counter()
    out = pack(store, [d for d in digests if d not in known])
    transfer = {
        "in_s": round(t_in, 4),
        "out_s": round(time.perf_counter() - t0, 4),
        "in_bytes": sum(size(p) for p in packages),
        "out_bytes": size(out),
    }
    return JobOutcome(spec.id, record, _where(), os.getpid(), round(time.perf_counter() - start, 4), out, transfer)
