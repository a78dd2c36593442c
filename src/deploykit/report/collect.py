"""What a report shows, gathered from a finished run (a RunResult) or from the store (a run name or an
artifact digest): stage timeline, artifact lineage, the stages' reports, tools and device.

The stages tell the report what they are (:class:`StageInfo`: their names in pipeline order, their
typed summaries, their reports); callers pass ``deploykit.stages.default_stages()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from deploykit.artifacts import Artifact, Store
from deploykit.errors import ArtifactCorrupt, UsageError


class StageInfo(Protocol):
    """What a report needs of a stage."""

    name: str

    def summary(self, artifact: Artifact) -> Any:
        """The stage's typed summary of an artifact it wrote (its ``failure()`` says why a check failed)."""
        ...

    def report(self, artifact: Artifact) -> dict[str, Any] | None:
        """The report a person reads, or None."""
        ...


@dataclass
class ReportData:
    title: str
    stages: list[dict[str, Any]]  # {stage, status, seconds, digest, kind, created, note}
    lineage: list[dict[str, Any]]  # depth-first rows: {depth, role, digest, kind, stage, version, created}
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)  # stage name -> its report
    tools: dict[str, str] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    workdir: str = ""

    @property
    def parity(self) -> dict[str, Any] | None:
        return self.reports.get("parity")  # parity.json

    @property
    def gate(self) -> dict[str, Any] | None:
        return self.reports.get("gate")  # gate.json

    @property
    def quantize(self) -> dict[str, Any] | None:
        return self.reports.get("quantize")  # the summary, with its precision.json as "patch"

    @property
    def passed(self) -> bool:
        failed_stage = any(s["status"] == "failed" or s["note"] for s in self.stages)
        return not failed_stage and all(r is None or r.get("passed", True) for r in (self.parity, self.gate))


def from_result(result: Any, stages: Sequence[StageInfo]) -> ReportData:
    """From a RunResult: this run's own stage statuses and times."""
    rows = [{"stage": r.stage, "status": r.status, "seconds": r.seconds, "note": r.error,
             "digest": r.artifact.digest if r.artifact else "", "kind": r.artifact.kind if r.artifact else "",
             "created": r.artifact.manifest.created if r.artifact else ""} for r in result.stages]
    return _finish(f"deploykit run {result.name}", rows, dict(result.artifacts), str(result.workdir),
                   {s.name: s for s in stages})


def from_store(workdir: str, ref: str, stages: Sequence[StageInfo]) -> ReportData:
    """From the store: ``ref`` is a run name (``runs/<name>.json``) or an artifact digest (prefix)."""
    store = Store(workdir)
    if store.has_run(ref):
        roles = {role: _peek(store, d) for role, d in store.run_refs(ref).items()}
        title = f"deploykit run {ref}"
    else:
        try:
            artifact = store.get(ref)
        except UsageError as e:
            raise UsageError(f"{ref!r} is neither a run name nor an artifact in {workdir}",
                             hint="see `deploykit artifacts ls`; run names are the config's 'name'") from e
        roles = _ancestors(store, artifact, artifact.manifest.stage)
        title = f"deploykit artifact {artifact.digest[:12]} ({artifact.kind})"
    known = {s.name: s for s in stages}
    ordered = _in_lineage_order(store, roles, list(known))
    rows = [{"stage": a.manifest.stage, "status": "stored", "seconds": a.manifest.timings.get("run_s", 0.0),
             "digest": a.digest, "kind": a.kind, "created": a.manifest.created, "note": _failure(a, known)}
            for a in ordered]
    return _finish(title, rows, roles, str(store.root), known, store)


def _peek(store: Store, digest: str) -> Artifact:
    """An artifact whose manifest verifies, without re-hashing its files: reports only read, and
    models can be large."""
    try:
        return store.manifest(digest)
    except UsageError as e:
        raise ArtifactCorrupt(f"{store.root / 'objects' / digest}: named by the run but not in the store",
                              hint="rerun the config to rebuild it") from e


def _ancestors(store: Store, artifact: Artifact, role: str) -> dict[str, Artifact]:
    out = {role: artifact}
    for parent_role, digest in artifact.manifest.parents.items():
        for r, a in _ancestors(store, _peek(store, digest), parent_role).items():
            out.setdefault(r, a)
    return out


def _in_lineage_order(store: Store, roles: dict[str, Artifact], pipeline_order: list[str]) -> list[Artifact]:
    """Distinct artifacts, parents before children (then in pipeline order, then by creation time)."""
    distinct = {a.digest: a for a in roles.values()}
    depth: dict[str, int] = {}

    def level(a: Artifact) -> int:
        if a.digest not in depth:
            parents = [_peek(store, d) for d in a.manifest.parents.values()]
            depth[a.digest] = 1 + max((level(p) for p in parents), default=-1)
        return depth[a.digest]

    order = {name: i for i, name in enumerate(pipeline_order)}
    return sorted(distinct.values(), key=lambda a: (level(a), order.get(a.manifest.stage, 99), a.manifest.created))


def _failure(artifact: Artifact, stages: dict[str, StageInfo]) -> str:
    stage = stages.get(artifact.manifest.stage)
    return stage.summary(artifact).failure() if stage is not None else ""


def _finish(title: str, stages: list[dict[str, Any]], roles: dict[str, Artifact], workdir: str,
            known: dict[str, StageInfo], store: Store | None = None) -> ReportData:
    store = store or Store(workdir)
    data = ReportData(title=title, stages=stages, lineage=lineage_rows(store, roles), workdir=workdir)
    for artifact in {a.digest: a for a in roles.values()}.values():
        stage = known.get(artifact.manifest.stage)
        if stage is None:
            continue
        report = stage.report(store.get(artifact.digest))  # its files are read: verify them first
        if report is not None:
            data.reports[stage.name] = report
    newest = max(roles.values(), key=lambda a: a.manifest.created, default=None)
    if newest is not None:
        data.tools, data.device = dict(newest.manifest.tools), dict(newest.manifest.device)
    return data


def lineage_rows(store: Store, roles: dict[str, Artifact]) -> list[dict[str, Any]]:
    """Depth-first rows from each leaf (an artifact no other artifact of the run names as parent)."""
    parents = {d for a in roles.values() for d in a.manifest.parents.values()}
    leaves = {a.digest: (r, a) for r, a in roles.items() if a.digest not in parents}
    rows: list[dict[str, Any]] = []
    shown: set[str] = set()

    def walk(artifact: Artifact, role: str, depth: int) -> None:
        m = artifact.manifest
        repeat = artifact.digest in shown  # a shared parent: its own parents are listed once, above
        rows.append({"depth": depth, "role": role, "digest": artifact.digest, "kind": artifact.kind,
                     "stage": m.stage, "version": m.stage_version, "created": m.created, "repeat": repeat})
        shown.add(artifact.digest)
        for r, d in sorted(m.parents.items()) if not repeat else ():
            walk(_peek(store, d), r, depth + 1)

    for role, artifact in sorted(leaves.values(), key=lambda ra: ra[1].manifest.created):
        walk(artifact, role, 0)
    return rows
