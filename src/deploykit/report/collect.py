"""What a report shows, gathered from a finished run (a RunResult) or from the store (a run name or an
artifact digest): stage timeline, artifact lineage, the parity and gate reports, tools and device."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from deploykit.artifacts import Artifact, Store
from deploykit.errors import ArtifactCorrupt, UsageError

REPORT_FILES = {"parity-report": "parity.json", "bench-report": "gate.json"}
# Stages at the same lineage depth are shown in the order the pipeline runs them.
PIPELINE_ORDER = ("export", "ingest", "surgery", "quantize", "build", "parity", "gate")


@dataclass
class ReportData:
    title: str
    stages: list[dict[str, Any]]  # {stage, status, seconds, digest, kind, created, note}
    lineage: list[dict[str, Any]]  # depth-first rows: {depth, role, digest, kind, stage, version, created}
    parity: dict[str, Any] | None = None
    gate: dict[str, Any] | None = None
    quantize: dict[str, Any] | None = None  # the quantize artifact's summary, with its precision.json as "patch"
    tools: dict[str, str] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    workdir: str = ""

    @property
    def passed(self) -> bool:
        failed_stage = any(s["status"] == "failed" or s["note"] for s in self.stages)
        return not failed_stage and all(r is None or r.get("passed", True) for r in (self.parity, self.gate))


def from_result(result: Any) -> ReportData:
    """From a RunResult: this run's own stage statuses and times."""
    stages = [{"stage": r.stage, "status": r.status, "seconds": r.seconds, "note": r.error,
               "digest": r.artifact.digest if r.artifact else "", "kind": r.artifact.kind if r.artifact else "",
               "created": r.artifact.manifest.created if r.artifact else ""} for r in result.stages]
    return _finish(f"deploykit run {result.name}", stages, dict(result.artifacts), str(result.workdir))


def from_store(workdir: str, ref: str) -> ReportData:
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
    ordered = _in_lineage_order(store, roles)
    stages = [{"stage": a.manifest.stage, "status": "stored", "seconds": a.manifest.timings.get("run_s", 0.0),
               "digest": a.digest, "kind": a.kind, "created": a.manifest.created, "note": _failure(a)}
              for a in ordered]
    return _finish(title, stages, roles, str(store.root), store)


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


def _in_lineage_order(store: Store, roles: dict[str, Artifact]) -> list[Artifact]:
    """Distinct artifacts, parents before children (then by creation time)."""
    distinct = {a.digest: a for a in roles.values()}
    depth: dict[str, int] = {}

    def level(a: Artifact) -> int:
        if a.digest not in depth:
            parents = [_peek(store, d) for d in a.manifest.parents.values()]
            depth[a.digest] = 1 + max((level(p) for p in parents), default=-1)
        return depth[a.digest]

    order = {name: i for i, name in enumerate(PIPELINE_ORDER)}
    return sorted(distinct.values(), key=lambda a: (level(a), order.get(a.manifest.stage, 99), a.manifest.created))


def _failure(artifact: Artifact) -> str:
    summary = artifact.manifest.summary
    if summary.get("passed") is False:
        return "; ".join(summary.get("failures") or summary.get("inconclusive") or ["failed"])
    return ""


def _finish(title: str, stages: list[dict[str, Any]], roles: dict[str, Artifact], workdir: str,
            store: Store | None = None) -> ReportData:
    store = store or Store(workdir)
    data = ReportData(title=title, stages=stages, lineage=lineage_rows(store, roles), workdir=workdir)
    for artifact in {a.digest: a for a in roles.values()}.values():
        if artifact.manifest.stage == "quantize" or artifact.kind in REPORT_FILES:
            artifact = store.get(artifact.digest)  # its files are read: verify them first
        if artifact.manifest.stage == "quantize":
            data.quantize = _quantize(artifact)
        name = REPORT_FILES.get(artifact.kind)
        if name:
            setattr(data, "parity" if artifact.kind == "parity-report" else "gate",
                    json.loads(artifact.file(name).read_text()))
    newest = max(roles.values(), key=lambda a: a.manifest.created, default=None)
    if newest is not None:
        data.tools, data.device = dict(newest.manifest.tools), dict(newest.manifest.device)
    return data


def _quantize(artifact: Artifact) -> dict[str, Any]:
    patch = artifact.path / "precision.json"
    return {**artifact.manifest.summary, "patch": json.loads(patch.read_text()) if patch.is_file() else {}}


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
