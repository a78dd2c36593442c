"""What a writer of the store can do without the key: edit an artifact and recompute every digest
(files, identity, seal), repoint its recipe, and rewrite a run record to match. The store's own code
does the hashing here, as an attacker could."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any


def by_stage(store: Path, stage: str) -> Path:
    """The (first) object folder a stage wrote."""
    for m in sorted((store / "objects").glob("*/manifest.json")):
        if json.loads(m.read_text()).get("stage") == stage:
            return m.parent
    raise AssertionError(f"no {stage} artifact in {store}")


def reseal(
    store: Path,
    folder: Path,
    *,
    files: Callable[[Path], None] = lambda f: None,
    manifest: Callable[[dict[str, Any]], None] = lambda m: None,
    recipe: str | None = None,
) -> Path:
    """Edit ``folder``'s files and manifest, recompute its digests, move it to its new digest, and point
    its recipe (or ``recipe``, a key of the writer's choosing) at it. Returns the new folder."""
    from deploykit.store.manifest import Manifest

    files(folder)
    data = json.loads((folder / "manifest.json").read_text())
    data["files"] = {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in data["files"]}
    manifest(data)
    if recipe is not None:
        data["recipe_key"] = recipe
    m = dataclasses.replace(Manifest(**data), digest="", seal="")
    m = dataclasses.replace(m, digest=m.identity())
    m = dataclasses.replace(m, seal=m.expected_seal())
    (folder / "manifest.json").write_bytes(m.to_bytes())
    (folder / "manifest.mac").unlink(missing_ok=True)  # the writer has no key to make a new one
    new = store / "objects" / m.digest
    if new != folder:
        shutil.move(folder, new)
    (store / "recipes" / m.recipe_key).write_text(m.digest)
    return new


def rewrite_record(store: Path, identity: str, change: Callable[[dict[str, Any]], None]) -> Path:
    """Edit a run record and write it back as deploykit writes one (canonical JSON)."""
    from deploykit.record.model import RunRecord
    from deploykit.store.jsonio import dumps

    path = store / "records" / f"{identity}.json"
    data = json.loads(path.read_text())
    change(data)
    record = RunRecord.from_dict(data)
    path.write_text(dumps(record.to_dict()))
    return path
