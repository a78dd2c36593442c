"""``run_matrix``: read the matrix file, plan the cells, run them locally or on Ray, write the report."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from deploykit.config.load import merged_overrides
from deploykit.errors import UsageError
from deploykit.matrix.driver import Driver, View
from deploykit.matrix.plan import make_plan
from deploykit.matrix.result import MatrixResult
from deploykit.matrix.spec import MatrixSpec, load_matrix, resolve_models
from deploykit.store.artifacts import Store

DEFAULT_STORE = ".deploykit"
MAX_JOBS = 1024  # processes of the local pool (or Ray's local CPUs)


def run_matrix(
    source: str | Path,
    *,
    ray: str | None = None,
    jobs: int | None = None,
    workdir: str | Path | None = None,
    report_dir: str | Path | None = None,
    rerun: tuple[str, ...] = (),
    view: View | None = None,
    overrides: Mapping[str, Any] | None = None,
    **fields: Any,
) -> MatrixResult:
    """Run every model x precision x target cell of a matrix file; never raises for a failing cell.

    Args:
        source: the matrix.yaml.
        ray: None runs a local process pool; ``local`` starts a one-machine Ray cluster; ``auto``
            joins the cluster on this machine; ``ray://HOST:10001`` or ``HOST:6379`` joins that one.
            An already initialised Ray connection in this process is used as it is.
        jobs: local pool size (default: the machine's cores); for ``ray="local"``, its CPUs.
        workdir: the driver's artifact store (default: the file's ``store``, else .deploykit).
        report_dir: where to write matrix.json, junit.xml and summary.md.
        rerun: stages to run again even where their artifacts exist.
        view: redrawn after every change (the CLI's live table).
        overrides: config fields for every cell by dotted name (``{"gate.iterations": 50}``).
        **fields: the same, dots written as ``__`` (``gate__iterations=50``).

    Raises:
        ConfigError: the matrix file is invalid (exit 2), before anything runs.
        EnvironmentProblem: ``ray`` given but Ray not installed or not reachable (exit 3).
    """
    from deploykit.stages import default_stages

    if jobs is not None and not 1 <= jobs <= MAX_JOBS:
        raise UsageError(
            f"--jobs {jobs}: the pool size must be between 1 and {MAX_JOBS}", hint="leave it out for one job per core"
        )
    known = [s.name for s in default_stages()]
    unknown = [s for s in rerun if s not in known]
    if unknown:
        raise UsageError(f"--rerun {unknown[0]}: no such stage; stages: {', '.join(known)}")
    if ray is not None:
        from deploykit.matrix.ray_executor import require_ray

        require_ray()  # before anything else runs, with the install line
    path = Path(source)
    spec = load_matrix(path)
    models = resolve_models(spec, path)
    store = Store(_store_root(spec, workdir))
    executor = _executor(spec, store, ray, jobs, quantizes=any(p != "fp32" for p in spec.precisions))
    try:  # connected (or the pool started) before planning hashes any data: a dead cluster fails first
        plan = make_plan(spec, models, store, merged_overrides(overrides, fields))
        result = Driver(path.stem, plan, executor, store, view, rerun).run()
    finally:
        with contextlib.suppress(Exception):  # closing a cluster that is already gone
            executor.close()
    if view is not None:
        view.update(result)
    if report_dir is not None:
        from deploykit.matrix.report import write

        result = replace(result, report_files=write(result, Path(report_dir)))
    return result


def _store_root(spec: MatrixSpec, workdir: str | Path | None) -> Path:
    if workdir is not None:
        return Path(workdir)
    if spec.store:
        p = Path(spec.store)
        return p if p.is_absolute() else spec.base_dir / p
    return Path(DEFAULT_STORE)


def _executor(spec: MatrixSpec, store: Store, ray: str | None, jobs: int | None, quantizes: bool) -> Any:
    if ray is None:
        from deploykit.matrix.local_executor import LocalExecutor

        return LocalExecutor(store.root, jobs, spec.retries, quantizes)
    from deploykit.matrix.ray_executor import RayExecutor

    return RayExecutor(ray, store, spec.retries, spec.transfer, num_cpus=jobs)
