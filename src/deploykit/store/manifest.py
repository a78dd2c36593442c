"""An artifact's manifest: what it is, what made it, what it holds; parsed and checked without trust.

The identity (the artifact folder's name) hashes every field except those two runs of one recipe
may differ in: ``created``, ``timings`` and the summary keys the stage declares ``measured``. The
``seal`` hashes every field but itself, and the file must be byte for byte the canonical JSON of
its fields (see :mod:`deploykit.store.artifacts`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from deploykit.errors import ArtifactCorrupt
from deploykit.safety.smallfile import read_small
from deploykit.store.hashing import digest_value

SCHEMA_VERSION = 2
MAX_MANIFEST_BYTES = 64 << 20
MANIFEST = "manifest.json"
DIGEST = re.compile(r"[0-9a-f]{64}")
RECIPE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_UNHASHED = ("digest", "seal", "created", "timings")  # left out of the identity; the seal covers them


@dataclass(frozen=True)
class Manifest:
    kind: str
    stage: str
    stage_version: int
    recipe_key: str
    config: Any
    parents: dict[str, str]  # role -> parent digest
    files: dict[str, str]  # relative path -> sha256
    tools: dict[str, str]
    device: dict[str, Any]
    timings: dict[str, float]
    summary: dict[str, Any] = field(default_factory=dict)  # what the stage measured or decided
    measured: list[str] = field(default_factory=list)  # summary keys that are timings: sealed, not identity
    digest: str = ""
    created: str = ""
    seal: str = ""
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def read(cls, path: Path) -> Manifest:
        """Parse and check one manifest file; raise ArtifactCorrupt naming it for anything wrong."""
        try:
            raw = read_small(path, MAX_MANIFEST_BYTES, ArtifactCorrupt, "manifest")
        except FileNotFoundError as e:
            raise ArtifactCorrupt(f"{path}: manifest missing", hint=f"delete {path.parent} and rerun") from e
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise ArtifactCorrupt(f"{path}: manifest is not valid JSON", hint=f"delete {path.parent} and rerun") from e
        if not isinstance(data, dict):
            raise ArtifactCorrupt(
                f"{path}: manifest is a JSON {type(data).__name__}, not an object",
                hint=f"delete {path.parent} and rerun",
            )
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ArtifactCorrupt(
                f"{path}: manifest schema {data.get('schema_version')!r} is not {SCHEMA_VERSION}",
                hint="this store was written by another deploykit version; use a fresh --workdir",
            )
        problem = _field_problem(data)
        if problem:
            raise ArtifactCorrupt(f"{path}: manifest {problem}", hint=f"delete {path.parent} and rerun")
        manifest = cls(**data)
        if manifest.to_bytes() != raw:
            raise ArtifactCorrupt(
                f"{path}: manifest was edited (it is not the file deploykit wrote)",
                hint=f"delete {path.parent} and rerun; deploykit never trusts an edited artifact",
            )
        return manifest

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    def identity(self) -> str:
        """The content digest: every field but those two runs of one recipe may differ in (the times
        it was made and took, and the summary keys the stage declares ``measured``)."""
        fields = {k: v for k, v in asdict(self).items() if k not in _UNHASHED}
        fields["summary"] = _without(fields["summary"], set(self.measured))
        return digest_value(fields)

    def expected_seal(self) -> str:
        return digest_value({k: v for k, v in asdict(self).items() if k != "seal"})


_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(Manifest)}


def _without(value: Any, keys: set[str]) -> Any:
    """``value`` with every mapping key in ``keys`` left out, at any depth."""
    if isinstance(value, dict):
        return {k: _without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_without(v, keys) for v in value]
    return value


def _field_problem(data: dict[str, Any]) -> str:
    """What is wrong with a manifest's fields, or ''."""
    names = set(_FIELD_TYPES)
    if set(data) != names:
        extra, missing = sorted(set(data) - names), sorted(names - set(data))
        return (
            f"has {'unknown fields ' + ', '.join(extra) if extra else ''}"
            f"{'; ' if extra and missing else ''}{'no field ' + ', '.join(missing) if missing else ''}"
        )
    kinds = {"str": str, "int": int, "Any": object}
    for name, tp in _FIELD_TYPES.items():
        want = dict if tp.startswith("dict") else list if tp.startswith("list") else kinds[tp]
        if not isinstance(data[name], want) or (want is int and isinstance(data[name], bool)):
            return f"field {name!r} is a {type(data[name]).__name__}"
    for name in ("files", "parents"):
        for key, value in data[name].items():
            if not (isinstance(value, str) and DIGEST.fullmatch(value)):
                return f"{name}[{key!r}] is not a sha256 digest"
    if not all(isinstance(k, str) for k in data["measured"]):
        return "field 'measured' is not a list of names"
    bad = next((n for n in data["files"] if not _safe_relative(n)), None)
    if bad is not None or MANIFEST in data["files"]:
        return f"lists a file outside the artifact ({bad or MANIFEST!r})"
    if not RECIPE_KEY.fullmatch(data["recipe_key"]):
        return "has a recipe key that is not a name"
    return ""


def _safe_relative(name: str) -> bool:
    p = PurePosixPath(name)
    return bool(name) and not p.is_absolute() and ".." not in p.parts and "\\" not in name and "\0" not in name


__all__ = ["DIGEST", "MANIFEST", "RECIPE_KEY", "SCHEMA_VERSION", "Manifest"]
