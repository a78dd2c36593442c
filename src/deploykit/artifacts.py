"""The artifact store: immutable, content-addressed folders, each with a manifest.

Layout under the workdir::

    objects/<digest>/           one artifact: its files + manifest.json
    recipes/<recipe key>        text file holding the digest the recipe produced
    runs/<name>.json            human names for the artifacts of a run (like git refs)
    tmp/<stage>-<pid>-<rand>/   artifacts being written; renamed into objects/ when complete
    lock                        held while publishing, so concurrent runs never interleave

The **content digest** (identity) hashes every file's digest with the artifact's kind, stage and
recipe key; the **recipe key** hashes what produced it. A rerun whose recipe key exists reuses the artifact after verifying
every file against the manifest: a mismatch is an error, never a silent rebuild.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deploykit.errors import ArtifactCorrupt, UsageError, WorkdirError
from deploykit.hashing import digest_file, digest_value

SCHEMA_VERSION = 1
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Manifest:
    kind: str
    stage: str
    stage_version: int
    recipe_key: str
    config: dict[str, Any]
    parents: dict[str, str]  # role -> parent digest
    files: dict[str, str]  # relative path -> sha256
    tools: dict[str, str]
    device: dict[str, Any]
    timings: dict[str, float]
    summary: dict[str, Any] = field(default_factory=dict)  # what the stage measured or decided
    digest: str = ""
    created: str = ""
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def read(cls, path: Path) -> Manifest:
        data = json.loads(path.read_text())
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ArtifactCorrupt(
                f"{path}: manifest schema {data.get('schema_version')} is not {SCHEMA_VERSION}",
                hint="this store was written by another deploykit version; use a fresh --workdir",
            )
        return cls(**data)


@dataclass(frozen=True)
class Artifact:
    """A published, verified artifact: a folder plus its manifest."""

    path: Path
    manifest: Manifest

    @property
    def digest(self) -> str:
        return self.manifest.digest

    @property
    def kind(self) -> str:
        return self.manifest.kind

    def file(self, name: str) -> Path:
        if name not in self.manifest.files:
            raise ArtifactCorrupt(f"{self.path}: artifact has no file {name!r}")
        return self.path / name


def content_digest(manifest: Manifest, files: dict[str, str]) -> str:
    """Identity: the files' digests plus what made them. Two stages that write the same bytes (a
    surgery pass that changed nothing) get two artifacts, each keeping its own manifest and report;
    a rerun of the same recipe that writes the same bytes gets the same artifact."""
    return digest_value({"kind": manifest.kind, "stage": manifest.stage, "recipe_key": manifest.recipe_key,
                         "files": files})


class Store:
    """Artifacts under one workdir. Opening checks that the workdir is writable."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        try:
            for sub in ("objects", "recipes", "runs", "tmp"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            probe = self.root / "tmp" / f".probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise WorkdirError(
                f"{self.root}: artifact store is not writable ({e.strerror})",
                hint="pass a writable --workdir, or fix the folder's permissions",
            ) from e
        self._clean_stale_tmp()

    # -- reading -------------------------------------------------------------------------------

    def lookup(self, recipe_key: str) -> Artifact | None:
        """The verified artifact a recipe produced before, or None."""
        ref = self.root / "recipes" / recipe_key
        if not ref.exists():
            return None
        digest = ref.read_text().strip()
        if not (self.root / "objects" / digest).is_dir():
            return None  # the object was removed by hand: the recipe simply reruns
        return self.get(digest)

    def get(self, digest_or_prefix: str) -> Artifact:
        """Load and verify one artifact; raise ArtifactCorrupt if any file changed."""
        path = self._resolve(digest_or_prefix)
        manifest = Manifest.read(path / MANIFEST)
        self._verify(path, manifest)
        return Artifact(path, manifest)

    def _resolve(self, prefix: str) -> Path:
        exact = self.root / "objects" / prefix
        if len(prefix) == 64 and exact.is_dir():
            return exact
        matches = [p for p in (self.root / "objects").iterdir() if p.name.startswith(prefix)] if prefix else []
        if len(matches) != 1:
            what = "no artifact" if not matches else f"{len(matches)} artifacts"
            raise UsageError(f"{self.root}: {what} match {prefix!r}", hint="see `deploykit artifacts ls`")
        return matches[0]

    def _verify(self, path: Path, manifest: Manifest) -> None:
        for name, expected in manifest.files.items():
            f = path / name
            actual = digest_file(f) if f.is_file() else "missing"
            if actual != expected:
                raise ArtifactCorrupt(
                    f"{f}: content changed after the artifact was written (sha256 {actual[:12]}, manifest says {expected[:12]})",
                    hint=f"delete {path} and rerun; deploykit never trusts an edited artifact",
                )
        if content_digest(manifest, manifest.files) != path.name or manifest.digest != path.name:
            raise ArtifactCorrupt(
                f"{path / MANIFEST}: manifest does not match the artifact's digest",
                hint=f"delete {path} and rerun",
            )

    def list(self) -> list[Artifact]:
        out = []
        for p in sorted((self.root / "objects").iterdir()):
            with contextlib.suppress(OSError, ValueError, TypeError):
                out.append(Artifact(p, Manifest.read(p / MANIFEST)))
        return sorted(out, key=lambda a: a.manifest.created)

    # -- writing -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def staging(self, stage: str) -> Iterator[Path]:
        """A private temporary folder for a stage to write into; removed if the stage fails."""
        tmp = self.root / "tmp" / f"{stage}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def publish(self, tmp: Path, manifest: Manifest) -> Artifact:
        """Hash ``tmp``'s files, write the manifest, and atomically move it into the store."""
        files = {
            p.relative_to(tmp).as_posix(): digest_file(p)
            for p in sorted(tmp.rglob("*"))
            if p.is_file() and p.name != MANIFEST
        }
        digest = content_digest(manifest, files)
        manifest = Manifest(**{**asdict(manifest), "files": files, "digest": digest,
                               "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        _write_atomic(tmp / MANIFEST, json.dumps(asdict(manifest), indent=2, sort_keys=True))
        _fsync_tree(tmp)
        final = self.root / "objects" / digest
        with self.lock():
            if final.exists():
                shutil.rmtree(tmp, ignore_errors=True)  # same content published before
            else:
                try:
                    os.rename(tmp, final)
                except OSError as e:
                    raise WorkdirError(f"{final}: cannot publish artifact ({e.strerror})") from e
                _fsync_dir(final.parent)
            _write_atomic(self.root / "recipes" / manifest.recipe_key, digest)
        return self.get(digest)

    def name_run(self, name: str, artifacts: dict[str, str]) -> Path:
        path = self.root / "runs" / f"{name}.json"
        _write_atomic(path, json.dumps(artifacts, indent=2, sort_keys=True))
        return path

    def run_refs(self, name: str) -> dict[str, str]:
        path = self.root / "runs" / f"{name}.json"
        if not path.exists():
            raise UsageError(f"{path}: no run named {name!r}", hint="see `deploykit artifacts ls`")
        return json.loads(path.read_text())

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        with open(self.root / "lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _clean_stale_tmp(self) -> None:
        """Remove staging folders left by killed processes (their pid is gone)."""
        for p in (self.root / "tmp").iterdir():
            parts = p.name.rsplit("-", 2)
            if len(parts) == 3 and parts[1].isdigit() and not _pid_alive(int(parts[1])):
                shutil.rmtree(p, ignore_errors=True)


def recipe_key(stage: str, version: int, parents: dict[str, str], config: Any, env: dict[str, Any]) -> str:
    """Hash of everything that determines a stage's output; never timestamps or log levels."""
    return digest_value({"stage": stage, "version": version, "parents": parents, "config": config, "env": env})


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as e:
        return e.errno == errno.EPERM
    return True


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_tree(root: Path) -> None:
    for p in root.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["Artifact", "Manifest", "Store", "recipe_key"]
