"""``deploykit artifacts verify`` and ``gc``: check every object, manifest, recipe and run record;
remove what nothing references.

``verify`` re-hashes every file of every object, checks each manifest against its folder, each
recipe against the artifact it names, and each run record against the objects it names. ``gc``
keeps every object a recipe or a run record names, and their parents, transitively; it removes the
rest, recipes whose object is gone, and temporaries whose owner is gone. It runs only while no
other store is open on the workdir (every open store holds ``users.lock`` shared), so an object a
running process has looked up but not yet named is never removed under it.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from deploykit.errors import ArtifactCorrupt, DeployKitError, WorkdirError
from deploykit.store.artifacts import DIGEST, MANIFEST, RECIPE_KEY, RUN_NAME, Manifest, Store
from deploykit.store.tempspace import clean_stale


@dataclass
class VerifyReport:
    objects: int = 0
    recipes: int = 0
    runs: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(store: Store) -> VerifyReport:
    """Check everything in the store; the report lists one line per problem."""
    report = VerifyReport()
    manifests = _verify_objects(store, report)
    for ref in sorted((store.root / "recipes").iterdir()):
        report.recipes += 1
        problem = _recipe_problem(store, ref, manifests)
        if problem:
            report.problems.append(f"{ref}: {problem}")
    for run in sorted((store.root / "runs").iterdir()):
        report.runs += 1
        name = run.name.removesuffix(".json")
        if not run.name.endswith(".json") or not RUN_NAME.fullmatch(name):
            report.problems.append(f"{run}: not a run record (runs/<name>.json)")
            continue
        try:
            refs = store.run_refs(name)
        except ArtifactCorrupt as e:
            report.problems.append(e.message)
            continue
        report.problems += [
            f"{run}: {role} names artifact {d[:12]}, which the store does not hold"
            for role, d in sorted(refs.items())
            if d not in manifests
        ]
    return report


def _verify_objects(store: Store, report: VerifyReport) -> dict[str, Manifest | None]:
    """Digest -> manifest (None when the object does not verify) for every object folder."""
    manifests: dict[str, Manifest | None] = {}
    for path in sorted((store.root / "objects").iterdir()):
        report.objects += 1
        if not DIGEST.fullmatch(path.name):
            report.problems.append(f"{path}: not an artifact (object folders are named by their digest)")
            continue
        try:
            manifests[path.name] = store.check(path, deep=True)
        except ArtifactCorrupt as e:
            manifests[path.name] = None
            report.problems.append(e.message)
    for digest, m in sorted(manifests.items()):
        for role, parent in sorted((m.parents if m else {}).items()):
            if parent not in manifests:
                report.problems.append(
                    f"{store.root / 'objects' / digest / MANIFEST}: parent {role} {parent[:12]} is not in the store"
                )
    return manifests


def _recipe_problem(store: Store, ref: Path, manifests: dict[str, Manifest | None]) -> str:
    if not RECIPE_KEY.fullmatch(ref.name) or not ref.is_file() or ref.is_symlink():
        return "not a recipe (recipes/<key> is a file holding a digest)"
    digest = ref.read_bytes().decode("ascii", "replace").strip()
    if not DIGEST.fullmatch(digest):
        return "does not hold an artifact digest"
    if digest not in manifests:
        return f"names artifact {digest[:12]}, which the store does not hold (`deploykit artifacts gc` removes it)"
    m = manifests[digest]
    if m is not None and m.recipe_key != ref.name:
        return f"names artifact {digest[:12]}, which recipe {m.recipe_key[:12]} made, not this one"
    return ""


@dataclass
class GcReport:
    removed_objects: list[str] = field(default_factory=list)
    removed_recipes: list[str] = field(default_factory=list)
    removed_temporaries: list[str] = field(default_factory=list)
    kept: int = 0


def gc(store: Store, *, dry_run: bool = False) -> GcReport:
    """Remove unreferenced objects, dangling recipes and stale temporaries; never a referenced object."""
    if not store.exclusive():
        raise WorkdirError(
            f"{store.root}: another deploykit process has this store open",
            hint="run `deploykit artifacts gc` when no convert uses the workdir",
        )
    try:
        return _collect(store, dry_run)
    finally:
        store.shared()


def _collect(store: Store, dry_run: bool) -> GcReport:
    report = GcReport()
    objects = store.root / "objects"
    roots, dangling = _roots(store)
    keep = _reachable(objects, roots)
    for path in sorted(objects.iterdir()):
        if path.name in keep:
            report.kept += 1
            continue
        report.removed_objects.append(path.name)
        if not dry_run:
            dead = store.root / "tmp" / f".dead-{uuid.uuid4().hex}"
            path.rename(dead)  # gone from objects/ at once; then removed at leisure
            shutil.rmtree(dead, ignore_errors=True)
    for ref in dangling:
        report.removed_recipes.append(ref.name)
        if not dry_run:
            ref.unlink(missing_ok=True)
    if not dry_run:
        report.removed_temporaries = clean_stale(store.root / "tmp")
    return report


def _roots(store: Store) -> tuple[set[str], list[Path]]:
    """Digests named by recipes and run records; recipes whose object is gone."""
    roots, dangling = set(), []
    for ref in sorted((store.root / "recipes").iterdir()):
        try:
            digest = ref.read_bytes().decode("ascii", "replace").strip()
        except OSError:
            continue
        if DIGEST.fullmatch(digest):
            if (store.root / "objects" / digest).exists():
                roots.add(digest)
            elif RECIPE_KEY.fullmatch(ref.name) and ref.is_file():
                dangling.append(ref)
    for run in sorted((store.root / "runs").glob("*.json")):
        try:
            roots |= set(store.run_refs(run.name.removesuffix(".json")).values())
        except DeployKitError:  # a corrupt run record keeps nothing alive; verify reports it
            continue
    return roots, dangling


def _reachable(objects: Path, roots: set[str]) -> set[str]:
    """``roots`` and their parents, transitively (an unreadable manifest keeps its object, not its parents)."""
    keep, todo = set(), list(roots)
    while todo:
        digest = todo.pop()
        if digest in keep:
            continue
        keep.add(digest)
        try:
            manifest = Manifest.read(objects / digest / MANIFEST)
        except ArtifactCorrupt:
            continue
        todo += [d for d in manifest.parents.values() if DIGEST.fullmatch(d)]
        todo += [
            v
            for k, v in manifest.summary.items()
            if k.endswith("_artifact") and isinstance(v, str) and DIGEST.fullmatch(v)
        ]
    return keep


__all__ = ["GcReport", "VerifyReport", "gc", "verify"]
