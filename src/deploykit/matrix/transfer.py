"""Artifacts between stores that share no filesystem: packed as bytes, verified on arrival.

A package maps each artifact digest to its manifest and file bytes. ``unpack`` checks every file's
sha256 against the manifest and the manifest's content digest against the digest it was sent under
before publishing into the receiving store, so a corrupted or altered transfer is an error
(ArtifactCorrupt) and never lands. Publishing also records the artifact's recipe key, so the
receiving node's pipeline reuses it exactly when it would compute the same recipe.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import PurePosixPath
from typing import Any

from deploykit.errors import ArtifactCorrupt, UsageError
from deploykit.store.artifacts import MANIFEST, Artifact, Manifest, Store

Package = dict[str, dict[str, Any]]  # digest -> {"manifest": dict, "files": {relative path: bytes}}


def pack(store: Store, digests: list[str]) -> Package:
    """The named artifacts of ``store``, each verified as it is read."""
    out: Package = {}
    for digest in dict.fromkeys(digests):
        artifact = store.get(digest)
        out[digest] = {
            "manifest": asdict(artifact.manifest),
            "files": {name: artifact.file(name).read_bytes() for name in artifact.manifest.files},
        }
    return out


def size(package: Package) -> int:
    return sum(len(b) for entry in package.values() for b in entry["files"].values())


def has(store: Store, digest: str) -> bool:
    """Whether ``store`` holds this artifact intact (its files are verified)."""
    try:
        return store.get(digest).digest == digest
    except UsageError:  # no artifact with that digest
        return False


def unpack(store: Store, package: Package, origin: str = "transfer") -> list[Artifact]:
    """Publish every artifact of ``package`` that ``store`` lacks; return them all, verified."""
    out = []
    for digest, entry in package.items():
        if has(store, digest):
            out.append(store.get(digest))
            continue
        manifest = _verified(digest, entry, origin)
        with store.staging("import") as tmp:
            for name, data in entry["files"].items():
                target = tmp / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            artifact = store.publish(tmp, manifest)
        if artifact.digest != digest:  # publish re-hashes what it wrote: the bytes on disk changed
            raise ArtifactCorrupt(
                f"{origin}: artifact {digest[:12]} was stored as {artifact.digest[:12]}",
                hint="the receiving disk altered the files; check it and rerun",
            )
        out.append(artifact)
    return out


def _verified(digest: str, entry: dict[str, Any], origin: str) -> Manifest:
    try:
        manifest = Manifest(**entry["manifest"])
    except TypeError as e:
        raise ArtifactCorrupt(f"{origin}: artifact {digest[:12]} arrived with an unreadable manifest ({e})") from e
    files = entry["files"]
    for name in files:
        p = PurePosixPath(name)
        if p.is_absolute() or ".." in p.parts or name == MANIFEST:
            raise ArtifactCorrupt(f"{origin}: artifact {digest[:12]} names a file outside its folder: {name!r}")
    if set(files) != set(manifest.files):
        missing = sorted(set(manifest.files) ^ set(files))
        raise ArtifactCorrupt(
            f"{origin}: artifact {digest[:12]} arrived without the files its manifest lists: {', '.join(missing[:4])}",
            hint="rerun the matrix; the sender's store may be damaged",
        )
    for name, data in files.items():
        actual = hashlib.sha256(data).hexdigest()
        if actual != manifest.files[name]:
            raise ArtifactCorrupt(
                f"{origin}: {name} of artifact {digest[:12]} arrived with sha256 {actual[:12]}, "
                f"the manifest says {manifest.files[name][:12]}",
                hint="the transfer altered it; rerun the matrix",
            )
    if manifest.identity() != digest or manifest.digest != digest or manifest.seal != manifest.expected_seal():
        raise ArtifactCorrupt(
            f"{origin}: artifact {digest[:12]}: its manifest does not give that digest",
            hint="rerun the matrix; the sender's store may be damaged",
        )
    return manifest
