"""Building the run record (:mod:`deploykit.record.model`): from a run's stage statuses (the
pipeline calls :func:`build_record`), or from the store (:func:`from_store`: a recorded run by name
or identity, or any artifact by digest, whose lineage becomes the record).

The stages tell the record what they are (:class:`StageInfo`: their names in pipeline order, their
typed summaries, their reports and their checks); callers pass ``deploykit.stages.default_stages()``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Protocol

from deploykit.errors import ArtifactCorrupt, DeployKitError, UsageError
from deploykit.quant.flavours import flavour_for
from deploykit.record import model as records
from deploykit.record.model import RunRecord, StageStatus
from deploykit.store import clock
from deploykit.store.artifacts import Artifact, Store


class StageInfo(Protocol):
    """What a record needs of a stage."""

    name: str

    def summary(self, artifact: Artifact) -> Any:
        """The stage's typed summary of an artifact it wrote (its ``failure()`` says why a check failed)."""
        ...

    def report(self, artifact: Artifact) -> dict[str, Any] | None:
        """The report a person reads, or None."""
        ...

    def checks(self, artifact: Artifact) -> list[records.Check]:
        """The verdicts the artifact records."""
        ...


def build_record(
    identity: tuple[str, str, str, str],
    rows: Sequence[StageStatus],
    artifacts: dict[str, Artifact],
    stages: Sequence[StageInfo],
    store: Store,
    *,
    error: DeployKitError | None = None,
    source: str = "run",
) -> RunRecord:
    """The record of one run (or of stored artifacts): every check, warning and report, in pipeline order.

    Args:
        identity: (config name, precision, backend, flavour).
        rows: each stage's status, in the order the stages ran.
        artifacts: stage name -> the artifact it wrote or reused.
        stages: the pipeline's stages (``deploykit.stages.default_stages()``).
        store: where the artifacts live (for their lineage).
        error: the error that stopped the run, when one did (not a failed check).
        source: "run" for a run, "artifact" for a record built from an artifact's lineage.
    """
    known = {s.name: s for s in stages}
    checks, details = [], {}
    for name in [s.name for s in stages if s.name in artifacts]:
        stage, artifact = known[name], artifacts[name]
        checks += stage.checks(artifact)
        report = stage.report(artifact)
        if report is not None:
            details[name] = report
    details["lineage"] = lineage_rows(store, artifacts)
    details["source"] = source
    gate = rows_by_stage(rows).get("gate")
    newest = max(artifacts.values(), key=lambda a: a.manifest.created, default=None)
    name, precision, backend, flavour = identity
    return RunRecord(
        name=name,
        precision=precision,
        backend=backend,
        flavour=flavour,
        stages=tuple(rows),
        checks=tuple(checks),
        warnings=tuple(_warnings(details, flavour, backend)),
        gate_cached=gate is not None and gate.status == "reused",
        error=error.message if error is not None else "",
        hint=error.hint if error is not None else "",
        error_code=error.exit_code if error is not None else 0,
        details=details,
        workdir=str(store.root),
        created=clock.stamp(),
        tools=dict(newest.manifest.tools) if newest else {},
        device=dict(newest.manifest.device) if newest else {},
    )


def rows_by_stage(rows: Sequence[StageStatus]) -> dict[str, StageStatus]:
    return {r.stage: r for r in rows}


def _warnings(details: dict[str, Any], flavour: str, backend: str) -> list[str]:
    """What a reader must know to trust the verdicts and numbers."""
    out = [f"ingest: {w}" for w in (details.get("ingest") or {}).get("warnings", [])]
    out += [f"quantize: {w}" for w in (details.get("quantize") or {}).get("warnings", [])]
    data_warning = ((details.get("parity") or {}).get("data") or {}).get("warning")
    if data_warning:
        out.append(f"parity: {data_warning}")
    gate = details.get("gate")
    if gate:
        out += [f"gate: {w}" for w in gate.get("warnings", [])]
        load = gate.get("load") or {}
        if load.get("loaded"):
            out.append(
                f"gate: measured under load (CPU pressure {load.get('cpu_pressure')}, load "
                f"{load.get('loadavg1')} on {load.get('cpus')} CPUs): the numbers may be low; "
                "--remeasure on a quiet machine"
            )
        if flavour and flavour_for(flavour).foreign(backend):
            out.append(
                f"gate: this is a TensorRT-flavour graph timed with {backend} on the CPU ({gate['evaluator']}); "
                "the number says nothing about TensorRT speed — build with --backend tensorrt on the GPU"
            )
    return out


def from_store(
    workdir: str, ref: str, stages: Sequence[StageInfo], *, precision: str | None = None, backend: str | None = None
) -> tuple[RunRecord, str]:
    """The record ``ref`` names in the store, and a note when several runs match.

    ``ref`` is a run name (the config's ``name``; with several precisions/backends recorded the newest
    is taken, narrowed by ``precision`` / ``backend``), a record identity (``tiny.int8.onnxruntime.onnxruntime``)
    or an artifact digest (prefix), whose lineage becomes a record of stored artifacts.
    """
    store = Store(workdir)
    found, note = records.pick(store.root, ref, precision=precision, backend=backend)
    if found is not None:
        verify_record(store, found, stages)  # a record renders only what its artifacts say
        return found, note
    if precision is not None or backend is not None:
        raise UsageError(
            f"no recorded run of {ref!r} with precision {precision or 'any'} and backend {backend or 'any'}",
            hint=f"recorded: {', '.join(r.identity for r in records.find(store.root, ref)) or 'none'}",
        )
    if store.has_run(ref):  # a store written before run records
        roles = {role: _peek(store, d) for role, d in store.run_refs(ref).items()}
        return _stored(store, ref, roles, stages, "run"), ""
    try:
        artifact = store.get(ref)
    except UsageError as e:
        raise records.no_record(store.root, ref) from e
    roles = _ancestors(store, artifact, artifact.manifest.stage)
    return _stored(store, f"artifact {artifact.digest[:12]} ({artifact.kind})", roles, stages, "artifact"), ""


def verify_record(store: Store, record: RunRecord, stages: Sequence[StageInfo]) -> None:
    """Raise ArtifactCorrupt naming the record when it says anything its artifacts do not.

    Every verdict, warning and report in a record is derived from the artifacts its stages name
    (:func:`build_record`); they are derived again from those artifacts (each verified, files
    re-hashed) and must come out the same. What a run alone knows (ran or reused, seconds, the
    error that stopped it) cannot be checked this way: a keyed store's MAC covers it.
    """
    from deploykit.store.jsonio import dumps

    path = records.path_of(store.root, record)
    artifacts = {}
    for row in record.stages:
        if not row.digest:
            if row.status != "failed" or not record.error:  # only the stage that stopped a run has none
                why = "" if record.error else " and the record names no error that stopped it"
                raise ArtifactCorrupt(
                    f"{path}: its {row.stage} stage is {row.status!r} without an artifact{why}",
                    hint=f"delete {path} and rerun the config",
                )
            continue
        artifact = _peek(store, row.digest)
        m = artifact.manifest
        if (m.stage, m.kind, m.created) != (row.stage, row.kind, row.created):
            raise ArtifactCorrupt(
                f"{path}: its {row.stage} stage names artifact {row.digest[:12]}, a "
                f"{m.stage} {m.kind} made {m.created}, not the {row.kind} made "
                f"{row.created} it records",
                hint=f"delete {path} and rerun the config",
            )
        artifacts[row.stage] = store.get(row.digest)  # the reports are read: their files are re-hashed
    identity = (record.name, record.precision, record.backend, record.flavour)
    derived = build_record(
        identity, record.stages, artifacts, stages, store, source=record.details.get("source", "run")
    )
    said, made = (json.loads(dumps(r.to_dict())) for r in (record, derived))
    said["details"].pop("partial", None)
    for key in ("checks", "warnings", "details", "gate_cached", "tools", "device"):
        if said[key] != made[key]:
            raise ArtifactCorrupt(
                f"{path}: its {key} disagree with the artifacts it names{_first_difference(key, said[key], made[key])}",
                hint=f"delete {path} and rerun the config; deploykit renders a record only as its artifacts say",
            )


def _first_difference(key: str, said: Any, made: Any) -> str:
    """`` (the record says gate ... pass, gate artifact 1a2b3c says fail)`` for checks, else ''."""
    if key != "checks" or not isinstance(said, list):
        return ""
    for a, b in zip(said, made, strict=False):
        if a != b:
            return (
                f" (the record says {a.get('group')} {a.get('name')!r}: {a.get('status')}; its artifacts "
                f"say {b.get('group')} {b.get('name')!r}: {b.get('status')})"
            )
    return f" (the record holds {len(said)} checks, its artifacts {len(made)})"


def verify_records(store: Store, stages: Sequence[StageInfo]) -> tuple[int, list[str]]:
    """How many run records the store holds, and one line per record that does not read back or
    disagrees with its artifacts (``deploykit artifacts verify``)."""
    good, problems = records.scan(store.root)
    count = len(good) + len(problems)
    for _path, record in good:
        try:
            verify_record(store, record, stages)
        except (ArtifactCorrupt, UsageError) as e:
            problems.append(e.message)
    return count, problems


def _stored(store: Store, name: str, roles: dict[str, Artifact], stages: Sequence[StageInfo], source: str) -> RunRecord:
    known = {s.name: s for s in stages}
    ordered = _in_lineage_order(store, roles, list(known))
    rows = [
        StageStatus(
            a.manifest.stage,
            "stored",
            a.manifest.timings.get("run_s", 0.0),
            a.digest,
            a.kind,
            a.manifest.created,
            _failure(a, known),
        )
        for a in ordered
    ]
    # Reports read the artifacts' files: verify them first (the lineage walk read manifests only).
    by_stage = {a.manifest.stage: store.get(a.digest) if a.manifest.stage in known else a for a in ordered}
    backend = next(
        (known["build"].summary(a).backend for a in ordered if a.manifest.stage == "build" and "build" in known), ""
    )
    quantized = next(
        (known["quantize"].summary(a) for a in ordered if a.manifest.stage == "quantize" and "quantize" in known), None
    )
    identity = (name, quantized.precision if quantized else "", backend, quantized.flavour if quantized else "")
    return build_record(identity, rows, by_stage, stages, store, source=source)


def _peek(store: Store, digest: str) -> Artifact:
    """An artifact whose manifest verifies, without re-hashing its files: reports only read, and
    models can be large."""
    try:
        return store.manifest(digest)
    except UsageError as e:
        raise ArtifactCorrupt(
            f"{store.root / 'objects' / digest}: named by the run but not in the store",
            hint="rerun the config to rebuild it",
        ) from e


def _ancestors(store: Store, artifact: Artifact, role: str) -> dict[str, Artifact]:
    out = {role: artifact}
    for parent_role, digest in artifact.manifest.parents.items():
        for r, a in _ancestors(store, _peek(store, digest), parent_role).items():
            out.setdefault(r, a)
    return out


def _in_lineage_order(store: Store, roles: dict[str, Artifact], pipeline_order: list[str]) -> list[Artifact]:
    """Distinct artifacts, parents before children (then in pipeline order, then by creation time)."""
    distinct = {a.digest: a for a in roles.values()}
    # Walk every ancestor: a run's refs name the model after quantize, not the surgery model before it.
    pending = list(distinct.values())
    while pending:
        a = pending.pop()
        for d in a.manifest.parents.values():
            if d not in distinct:
                distinct[d] = _peek(store, d)
                pending.append(distinct[d])
    depth: dict[str, int] = {}

    def level(a: Artifact) -> int:
        if a.digest not in depth:
            depth[a.digest] = 1 + max((level(distinct[d]) for d in a.manifest.parents.values()), default=-1)
        return depth[a.digest]

    order = {name: i for i, name in enumerate(pipeline_order)}
    return sorted(distinct.values(), key=lambda a: (level(a), order.get(a.manifest.stage, 99), a.manifest.created))


def _failure(artifact: Artifact, stages: dict[str, StageInfo]) -> str:
    stage = stages.get(artifact.manifest.stage)
    return stage.summary(artifact).failure() if stage is not None else ""


def lineage_rows(store: Store, roles: dict[str, Artifact]) -> list[dict[str, Any]]:
    """Depth-first rows from each leaf (an artifact no other artifact of the run names as parent)."""
    parents = {d for a in roles.values() for d in a.manifest.parents.values()}
    leaves = {a.digest: (r, a) for r, a in roles.items() if a.digest not in parents}
    rows: list[dict[str, Any]] = []
    shown: set[str] = set()

    def walk(artifact: Artifact, role: str, depth: int) -> None:
        m = artifact.manifest
        repeat = artifact.digest in shown  # a shared parent: its own parents are listed once, above
        rows.append(
            {
                "depth": depth,
                "role": role,
                "digest": artifact.digest,
                "kind": artifact.kind,
                "stage": m.stage,
                "version": m.stage_version,
                "created": m.created,
                "repeat": repeat,
            }
        )
        shown.add(artifact.digest)
        for r, d in sorted(m.parents.items()) if not repeat else ():
            walk(_peek(store, d), r, depth + 1)

    for role, artifact in sorted(leaves.values(), key=lambda ra: ra[1].manifest.created):
        walk(artifact, role, 0)
    return rows
