"""Cells and the jobs that run them, with the device-independent work shared.

Everything before the build (export or ingest, surgery, quantize) does not depend on the target:
two cells whose configs give a stage the same inputs and settings share it. Each such stage gets a
*plan key* (stage, version, key config, toolchain facts, the parent's plan key: a recipe key computed
before any parent exists), and a shared job runs the pipeline up to a stage that ends some cell's
shared prefix or where prefixes branch. A cell job then runs the whole pipeline for one target; its
shared stages are found in the store by their recipe keys and show as reused.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from deploykit.config import Config, config_from_raw
from deploykit.errors import DeployKitError, InternalError
from deploykit.matrix.spec import MatrixSpec, Model, TargetSpec, read_model_config
from deploykit.progress import SilentReporter
from deploykit.stages import Stage, StageContext, default_stages
from deploykit.store.artifacts import Store
from deploykit.store.hashing import canonical, canonical_json, digest_value

DEVICE_KIND = "engine"  # the first stage that writes this kind, and every stage after it, runs on the target


@dataclass(frozen=True)
class Cell:
    id: str  # model/precision/target
    model: str
    precision: str
    target: TargetSpec
    config_path: Path
    overrides: dict[str, Any]
    chain: tuple[tuple[str, str], ...] = ()  # (stage, plan key) of its shared stages, in order
    job: str = ""  # the shared job whose output it builds on ("" when none)
    error: DeployKitError | None = None  # found while planning: the cell reports it and never runs
    key: str = ""  # identifies the cell's recipe in the driver's ledger


@dataclass(frozen=True)
class Job:
    id: str
    kind: Literal["shared", "cell"]
    model: str
    config_path: Path
    overrides: dict[str, Any]
    until: str | None  # the last stage it runs (None: every stage)
    stages: tuple[str, ...]  # for a shared job, the stages it owns
    deps: tuple[str, ...]  # shared jobs that must finish first, nearest last
    requests: dict[str, float]
    key: str
    cells: tuple[str, ...]  # the cells that build on it


@dataclass(frozen=True)
class Plan:
    spec: MatrixSpec
    models: tuple[Model, ...]
    cells: tuple[Cell, ...]
    jobs: dict[str, Job] = field(default_factory=dict)  # in an order where deps come first


def shared_stages(stages: list[Stage]) -> list[Stage]:
    """The device-independent stages: everything before the first stage that builds an engine."""
    out = []
    for stage in stages:
        if stage.output_kind == DEVICE_KIND:
            break
        out.append(stage)
    return out


def cell_overrides(
    spec: MatrixSpec, model: Model, target: TargetSpec, precision: str, extra: dict[str, Any]
) -> dict[str, Any]:
    """Matrix, model, target and command-line overrides; the cell's own precision and backend win. A
    target that names its TensorRT version lints for that version (unless its own overrides say otherwise)."""
    return {
        **spec.overrides,
        **model.overrides,
        **({"lint.versions": [target.tensorrt]} if target.tensorrt else {}),
        **target.overrides,
        **extra,
        "quantize.precision": precision,
        "build.backend": target.backend,
    }


def make_plan(spec: MatrixSpec, models: list[Model], store: Store, extra: dict[str, Any] | None = None) -> Plan:
    """Every cell (model x precision x target) with its config checked, and the jobs that run them."""
    planned: dict[Any, Any] = {}  # cells whose configs are the same are planned once; files read once
    targets = {t.name: (digest_value(canonical(t)), canonical_json(t.overrides)) for t in spec.targets}
    cells = [
        _cell(spec, m, t, p, store, extra or {}, planned, *targets[t.name])
        for m in models
        for p in spec.precisions
        for t in spec.targets
    ]
    jobs, by_key = _shared_jobs(cells)
    requests = {t.name: t.requests() for t in spec.targets}
    out = []
    for c in cells:
        if c.error is not None:
            out.append(c)
            continue
        shared = by_key.get(c.chain[-1][1]) if c.chain else None
        # not dataclasses.replace(): three times faster, and a matrix has up to 10,000 cells
        c = Cell(
            c.id,
            c.model,
            c.precision,
            c.target,
            c.config_path,
            c.overrides,
            c.chain,
            shared.id if shared else "",
            None,
            c.key,
        )
        jobs[c.id] = Job(
            c.id,
            "cell",
            c.model,
            c.config_path,
            c.overrides,
            None,
            (),
            (*shared.deps, shared.id) if shared else (),
            requests[c.target.name],
            c.key,
            (c.id,),
        )
        out.append(c)
    return Plan(spec, tuple(models), tuple(out), jobs)


@dataclass(frozen=True)
class _Planned:
    """What a cell's config gives: its shared chain and its digest, or the error that stops it."""

    chain: tuple[tuple[str, str], ...] = ()
    config: str = ""  # digest of the canonical config
    error: DeployKitError | None = None


def _cell(
    spec: MatrixSpec,
    model: Model,
    target: TargetSpec,
    precision: str,
    store: Store,
    extra: dict[str, Any],
    planned: dict[Any, Any],
    target_digest: str,
    target_overrides: str,
) -> Cell:
    overrides = cell_overrides(spec, model, target, precision, extra)
    cell_id = f"{model.id}/{precision}/{target.name}"
    # what the overrides are made of, but the target's name: targets that differ only by name plan alike
    memo = (model.id, precision, target.backend, target.tensorrt, target_overrides)
    if memo not in planned:
        planned[memo] = _plan_config(model.path, overrides, store, planned)
    done = planned[memo]
    key = hashlib.sha256(f"{cell_id}\0{done.config}\0{target_digest}".encode()).hexdigest()
    return Cell(
        cell_id,
        model.id,
        precision,
        target,
        model.path,
        overrides,
        done.chain,
        error=done.error,
        key=f"matrix-{key[:24]}" if done.error is None else "",
    )


def _plan_config(path: Path, overrides: dict[str, Any], store: Store, planned: dict[Any, Any]) -> _Planned:
    try:
        if ("file", path) not in planned:  # each model's file is read once, whatever its cells override
            planned["file", path] = read_model_config(path), path.parent.resolve()
        raw, folder = planned["file", path]
        config = config_from_raw(raw, overrides, folder, str(path))
        # digest_value canonicalises: canonical() first would walk the whole config twice (a third of planning)
        return _Planned(shared_chain(config, store), digest_value(config))
    except DeployKitError as e:
        return _Planned(error=e)
    except Exception as e:  # a user pass or data function that breaks while its key is computed
        return _Planned(error=InternalError(f"{path}: planning the cell failed: {type(e).__name__}: {e}"))


def shared_chain(config: Config, store: Store) -> tuple[tuple[str, str], ...]:
    """(stage, plan key) of each device-independent stage that applies to ``config``."""
    ctx = StageContext(config, store, SilentReporter())
    chain, parent = [], ""
    for stage in shared_stages(default_stages()):
        if not stage.applies(ctx):
            continue
        parent = digest_value(
            {
                "stage": stage.name,
                "version": stage.version,
                "parent": parent,
                "config": stage.key_config(ctx),  # canonicalised once, with the rest, by digest_value
                "env": stage.key_env(ctx),
            }
        )
        chain.append((stage.name, parent))
    return tuple(chain)


@dataclass
class _Node:
    stage: str
    key: str
    parent: str
    cells: list[Cell] = field(default_factory=list)
    children: set[str] = field(default_factory=set)
    ends: bool = False  # the last shared stage of some cell


def _shared_jobs(cells: list[Cell]) -> tuple[dict[str, Job], dict[str, Job]]:
    """One job per plan node that ends a cell's prefix or where prefixes branch; the rest fold into it."""
    nodes: dict[str, _Node] = {}
    for cell in (c for c in cells if c.error is None):
        parent = ""
        for stage, key in cell.chain:
            node = nodes.setdefault(key, _Node(stage, key, parent))
            node.cells.append(cell)
            if parent:
                nodes[parent].children.add(key)
            parent = key
        if cell.chain:
            nodes[cell.chain[-1][1]].ends = True
    is_job = {k: n.ends or len(n.children) > 1 for k, n in nodes.items()}
    jobs: dict[str, Job] = {}
    by_key: dict[str, Job] = {}
    for key, node in nodes.items():  # insertion order: a parent precedes its children
        if not is_job[key]:
            continue
        owned, up = [node.stage], node.parent
        while up and not is_job[up]:
            owned.insert(0, nodes[up].stage)
            up = nodes[up].parent
        dep = by_key.get(up)
        first = node.cells[0]
        job = Job(
            f"{first.model}:{'+'.join(owned)}:{key[:6]}",
            "shared",
            first.model,
            first.config_path,
            first.overrides,
            node.stage,
            tuple(owned),
            (*dep.deps, dep.id) if dep else (),
            {"CPU": 1.0},
            f"matrix-{key[:24]}",
            tuple(c.id for c in node.cells),
        )
        jobs[job.id] = by_key[key] = job
    return jobs, by_key


def unsatisfiable(requests: dict[str, float], nodes: dict[str, dict[str, float]]) -> str:
    """Why no node can run a job asking for ``requests`` ("" when some node can)."""
    for resources in nodes.values():
        if all(resources.get(k, 0.0) >= v for k, v in requests.items()):
            return ""
    asked = ", ".join(f"{k}: {v:g}" for k, v in sorted(requests.items()))
    have = "; ".join(
        f"{name}: " + (", ".join(f"{k} {v:g}" for k, v in sorted(r.items()) if _shown(k)) or "nothing")
        for name, r in nodes.items()
    )
    return f"no node has {asked} (nodes: {have})"


def _shown(resource: str) -> bool:
    return not resource.startswith("node:") and resource not in ("memory", "object_store_memory")
