"""The artifact store: immutable, content-addressed folders, each with a manifest.

Layout under the workdir::

    objects/<digest>/           one artifact: its files + manifest.json (+ manifest.mac, keyed), nothing else
    recipes/<recipe key>        text file holding the digest the recipe produced
    runs/<name>.json            human names for the artifacts of a run (like git refs)
    records/<identity>.json     the run record of each (name, precision, backend, flavour): every verdict
                                (+ records/<identity>.mac in a keyed store)
    tmp/<host>-<pid>-<rand>/    one process's temporaries (staging folders, atomic-write
                                temporaries, $TMPDIR of the quantizers), held by an flock
    lock                        held while publishing, so concurrent runs never interleave
    users.lock                  shared by every open store, exclusive for `artifacts gc`

**Identity.** The content digest (the folder's name) hashes the whole manifest except what differs
between two runs of one recipe: ``created``, ``timings`` and the summary keys the stage declares
``measured`` (a pass's seconds, a CPU speed check); so every file's digest, kind, stage, recipe
key, config, parents, tools, device and the ``summary`` with its verdicts. ``seal`` hashes every
field but itself, so the measured ones are covered too, and the file must be byte for byte the
canonical JSON of its fields. An artifact verifies when its manifest does, every file it lists
has its digest, and it holds no file it does not list. The **recipe key** hashes what produced it;
``recipes/<key>`` is trusted only when the artifact it names carries that key.

**Failures are named.** A file, manifest, recipe or run record that does not verify raises
ArtifactCorrupt (exit 4): never a silent rebuild, a silent pass or a silent omission. A recipe
whose artifact was deleted (by hand, as the hints advise) simply reruns.

**Concurrency.** Guarantees for writers in several processes, containers and hosts on one
workdir (a shared filesystem included): an artifact appears whole or not at all (written in a
private folder, fsynced, renamed under ``lock``); two writers of one recipe publish the same
digest or, for a stage that measures (gate), each a complete artifact with the recipe naming the
last; a live writer's temporaries are never removed and a dead one's are removed by the next store
opened (see :mod:`deploykit.store.tempspace`: flock liveness plus age, never a PID); ``gc`` runs only
while no other process has the store open. On NFS this needs working locks (NFSv4, or v3 with
NLM; not ``nolock`` or ``local_lock``). An adversary who can write the store can recompute every
digest: verification proves the store consistent, not who wrote it, unless the store is keyed
(``DEPLOYKIT_STORE_KEY``, :mod:`deploykit.store.key`): then every manifest carries a MAC, and one
without a valid MAC is re-made by :meth:`Store.lookup` and refused everywhere else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deploykit.errors import ArtifactCorrupt, InternalError, Untrusted, UsageError, WorkdirError, os_error
from deploykit.safety.smallfile import read_small
from deploykit.store import clock
from deploykit.store import key as storekey
from deploykit.store.hashing import digest_file, digest_value
from deploykit.store.manifest import DIGEST, MANIFEST, RECIPE_KEY, SCHEMA_VERSION, Manifest
from deploykit.store.tempspace import TempSpace, clean_stale

LAYOUT = ("objects", "recipes", "runs", "records", "tmp")
RUN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_PROCESS_LOCKS: dict[str, threading.Lock] = {}  # byte-range locks do not exclude this process's threads
_USERS: dict[str, list[int]] = {}  # store -> [descriptor with the shared lock, open stores in this process]


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


class Store:
    """Artifacts under one workdir. Opening checks the layout and that the workdir is writable,
    and removes temporaries whose owner is gone. Use as a context manager (or call ``close``) to
    remove this process's own temporaries promptly; they are otherwise removed at exit or by the
    next store opened."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).absolute()  # temporaries are handed to code that may chdir
        self.key = storekey.store_key()  # DEPLOYKIT_STORE_KEY: manifests and records carry a MAC
        _prepare(self.root)
        self._temp = TempSpace(self.root / "tmp")
        self._users_key = str(self.root.resolve())
        self._users_fd = _users_acquire(self._users_key, self.root)
        clean_stale(self.root / "tmp")

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Remove this process's temporaries and drop its hold on the store (idempotent)."""
        self._temp.close()
        key, self._users_key = getattr(self, "_users_key", None), None
        if key is not None:
            _users_release(key)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- reading -------------------------------------------------------------------------------

    def lookup(self, recipe_key: str) -> Artifact | None:
        """The verified artifact a recipe produced before, or None (never produced, or deleted)."""
        digest = self._recipe_target(recipe_key)
        if digest is None or not (self.root / "objects" / digest).exists():
            return None  # the object was removed by hand: the recipe simply reruns
        try:
            artifact = self.get(digest)
        except Untrusted:
            return None  # not written with this store's key: re-made, never trusted
        if artifact.manifest.recipe_key != recipe_key:
            raise ArtifactCorrupt(
                f"{self.root / 'recipes' / recipe_key}: names artifact {digest[:12]}, which recipe "
                f"{artifact.manifest.recipe_key[:12]} made, not this one",
                hint=f"delete {self.root / 'recipes' / recipe_key} and rerun; see `deploykit artifacts verify`",
            )
        return artifact

    def _recipe_target(self, recipe_key: str) -> str | None:
        if not RECIPE_KEY.fullmatch(recipe_key):
            raise UsageError(f"{recipe_key!r} is not a recipe key")
        ref = self.root / "recipes" / recipe_key
        try:
            text = read_small(ref, 4096, ArtifactCorrupt, "recipe")
        except FileNotFoundError:
            return None
        digest = text.decode("ascii", "replace").strip()
        if not DIGEST.fullmatch(digest):
            raise ArtifactCorrupt(f"{ref}: recipe does not hold an artifact digest", hint=f"delete {ref} and rerun")
        return digest

    def get(self, digest_or_prefix: str) -> Artifact:
        """Load and verify one artifact; raise ArtifactCorrupt if anything in it changed."""
        path = self._resolve(digest_or_prefix)
        manifest = self.check(path, deep=True)
        return Artifact(path, manifest)

    def manifest(self, digest: str) -> Artifact:
        """An artifact whose manifest and file list verify, without re-hashing its files (reports)."""
        path = self._resolve(digest)
        return Artifact(path, self.check(path, deep=False))

    def _resolve(self, prefix: str) -> Path:
        if not re.fullmatch(r"[0-9a-f]{1,64}", prefix or ""):
            raise UsageError(f"{prefix!r} is not an artifact digest (hex)", hint="see `deploykit artifacts ls`")
        exact = self.root / "objects" / prefix
        if len(prefix) == 64 and exact.exists():
            return exact
        matches = [p for p in (self.root / "objects").iterdir() if p.name.startswith(prefix)]
        if len(matches) != 1:
            what = "no artifact" if not matches else f"{len(matches)} artifacts"
            raise UsageError(f"{self.root}: {what} match {prefix!r}", hint="see `deploykit artifacts ls`")
        return matches[0]

    def check(self, path: Path, *, deep: bool = True) -> Manifest:
        """Verify one object folder (``deep``: re-hash its files too); return its manifest."""
        if path.is_symlink() or not path.is_dir():
            raise ArtifactCorrupt(f"{path}: not an artifact folder", hint=f"delete {path}")
        manifest = Manifest.read(path / MANIFEST)
        if (
            manifest.identity() != path.name
            or manifest.digest != path.name
            or manifest.seal != manifest.expected_seal()
        ):
            raise ArtifactCorrupt(
                f"{path / MANIFEST}: manifest does not match the artifact's digest",
                hint=f"delete {path} and rerun; deploykit never trusts an edited artifact",
            )
        if self.key is not None:
            storekey.check(self.key, "manifest", path / MANIFEST, manifest.to_bytes(), path / storekey.MANIFEST_MAC)
        present = _listing(path, strict=False)
        for name, expected in manifest.files.items():
            f = path / name
            if name not in present:
                raise ArtifactCorrupt(f"{f}: file listed in the manifest is missing", hint=f"delete {path} and rerun")
            actual = digest_file(f) if deep else expected
            if actual != expected:
                raise ArtifactCorrupt(
                    f"{f}: content changed after the artifact was written "
                    f"(sha256 {actual[:12]}, manifest says {expected[:12]})",
                    hint=f"delete {path} and rerun; deploykit never trusts an edited artifact",
                )
        extra = sorted(set(present) - set(manifest.files) - {MANIFEST, storekey.MANIFEST_MAC})
        if extra:
            raise ArtifactCorrupt(
                f"{path / extra[0]}: file not listed in the artifact's manifest"
                + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""),
                hint=f"delete {path} and rerun; an artifact holds only what it lists",
            )
        return manifest

    def scan(self) -> tuple[list[Artifact], list[str]]:
        """Every object whose manifest and file list verify (oldest first), and a line per one that does not."""
        good, problems = [], []
        for p in sorted((self.root / "objects").iterdir()):
            try:
                good.append(Artifact(p, self.check(p, deep=False)))
            except ArtifactCorrupt as e:
                problems.append(e.message)
        return sorted(good, key=lambda a: a.manifest.created), problems

    def list(self) -> list[Artifact]:
        """Every artifact, oldest first; raise ArtifactCorrupt naming the first that does not verify."""
        good, problems = self.scan()
        if problems:
            raise ArtifactCorrupt(
                problems[0] + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
                hint="see `deploykit artifacts verify`",
            )
        return good

    # -- writing -------------------------------------------------------------------------------

    def temporaries(self) -> Path:
        """This process's locked folder for temporaries (created on first use)."""
        try:
            return self._temp.folder()
        except OSError as e:
            raise os_error(e, self.root / "tmp", "create a temporary folder") from e

    @contextlib.contextmanager
    def staging(self, stage: str) -> Iterator[Path]:
        """A private temporary folder for a stage to write into; removed if the stage fails."""
        tmp = self.temporaries() / f"{stage}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @contextlib.contextmanager
    def tempdir(self) -> Iterator[Path]:
        """Point ``tempfile`` and ``$TMPDIR`` (child processes) at a locked folder in this store's
        ``tmp/``: what the quantizers and our own helpers write there is cleaned with it. Both are
        process-wide, so concurrent runs in threads share one such folder (in the first run's
        store), kept until the last of them ends."""
        try:
            with _SCRATCH["lock"]:
                if _SCRATCH["users"] == 0:
                    _scratch_begin(self.root / "tmp")
                _SCRATCH["users"] += 1
                folder = _SCRATCH["space"].folder()
        except OSError as e:
            raise os_error(e, self.root / "tmp", "create a temporary folder") from e
        try:
            yield folder
        finally:
            with _SCRATCH["lock"]:
                _SCRATCH["users"] -= 1
                if _SCRATCH["users"] == 0:
                    _scratch_end()

    def publish(self, tmp: Path, manifest: Manifest) -> Artifact:
        """Hash ``tmp``'s files, write the manifest, and atomically move it into the store."""
        try:
            return self._publish(tmp, manifest)
        except OSError as e:
            raise os_error(e, self.root / "objects", "publish an artifact") from e

    def _publish(self, tmp: Path, manifest: Manifest) -> Artifact:
        if not RECIPE_KEY.fullmatch(manifest.recipe_key):
            raise UsageError(f"{manifest.recipe_key!r} is not a recipe key")
        files = {
            name: digest_file(tmp / name)
            for name in _listing(tmp, strict=True)
            if name not in (MANIFEST, storekey.MANIFEST_MAC)
        }
        manifest = dataclasses.replace(
            manifest, files=files, digest="", seal="", schema_version=SCHEMA_VERSION, created=clock.stamp()
        )
        manifest = dataclasses.replace(manifest, digest=manifest.identity())
        manifest = dataclasses.replace(manifest, seal=manifest.expected_seal())
        digest = manifest.digest
        self._write_atomic(tmp / MANIFEST, manifest.to_bytes())
        if self.key is not None:
            mac = storekey.mac(self.key, "manifest", MANIFEST, manifest.to_bytes())
            self._write_atomic(tmp / storekey.MANIFEST_MAC, mac.encode())
        _fsync_tree(tmp)
        final = self.root / "objects" / digest
        with self.lock():
            if final.exists() and not self._untrusted(final):
                shutil.rmtree(tmp, ignore_errors=True)  # same content published before (verified below)
            else:
                if final.exists():  # same content, but not written with this store's key: ours replaces it
                    final.rename(self.temporaries() / f".untrusted-{uuid.uuid4().hex}")
                os.rename(tmp, final)
                _fsync_dir(final.parent)
            self._write_atomic(self.root / "recipes" / manifest.recipe_key, digest.encode())
        return self.get(digest)

    def _untrusted(self, path: Path) -> bool:
        """Whether a keyed store's object lacks a valid MAC (an unkeyed store trusts what verifies)."""
        try:
            self.check(path, deep=False)
        except Untrusted:
            return True
        except ArtifactCorrupt:
            return False  # the verification after publishing names what is wrong with it
        return False

    def name_run(self, name: str, artifacts: dict[str, str]) -> Path:
        path = self._run_path(name)
        try:
            self._write_atomic(path, json.dumps(artifacts, indent=2, sort_keys=True).encode())
        except OSError as e:
            raise os_error(e, path, "write the run record") from e
        return path

    def run_refs(self, name: str) -> dict[str, str]:
        """A run's role -> digest record; ArtifactCorrupt when it is not one."""
        path = self._run_path(name)
        try:
            data = json.loads(read_small(path, 1 << 20, ArtifactCorrupt, "run record"))
        except FileNotFoundError:
            raise UsageError(f"{path}: no run named {name!r}", hint="see `deploykit artifacts ls`") from None
        except (ValueError, RecursionError) as e:
            raise ArtifactCorrupt(f"{path}: run record unreadable or not JSON", hint=f"delete {path} and rerun") from e
        if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and DIGEST.fullmatch(v) for k, v in data.items()
        ):
            raise ArtifactCorrupt(
                f"{path}: run record is not a map of roles to artifact digests", hint=f"delete {path} and rerun"
            )
        return data

    def write_record(self, name: str, data: bytes) -> Path:
        """``records/<name>.json`` (a run record, :mod:`deploykit.record.model`), written atomically."""
        path = self.root / "records" / self._run_path(name).name  # named as runs are
        try:
            if self.key is not None:
                mac = storekey.mac(self.key, "run record", path.name, data)
                self._write_atomic(path.with_suffix(storekey.RECORD_MAC), mac.encode())
            self._write_atomic(path, data)
        except OSError as e:
            raise os_error(e, path, "write the run record") from e
        return path

    def has_run(self, name: str) -> bool:
        return RUN_NAME.fullmatch(name) is not None and self._run_path(name).exists()

    def _run_path(self, name: str) -> Path:
        if not RUN_NAME.fullmatch(name or ""):
            raise UsageError(
                f"run name {name!r}: use letters, digits, '_', '-' and '.' (no path)",
                hint="the run name is the config's 'name'",
            )
        return self.root / "runs" / f"{name}.json"

    def _write_atomic(self, path: Path, data: bytes) -> None:
        """Write via a temporary in this process's folder, then rename: a kill leaves no stray file."""
        tmp = self.temporaries() / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """The store-wide publish lock (threads of this process, other processes, other hosts)."""
        with _PROCESS_LOCKS.setdefault(str(self.root.resolve()), threading.Lock()):
            try:
                f = open(self.root / "lock", "a")
            except OSError as e:
                raise os_error(e, self.root / "lock", "open the store's lock") from e
            with f:
                fcntl.flock(f, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)

    def exclusive(self) -> bool:
        """Try to become the store's only user (for gc); False when another store (any process) is open."""
        if _USERS.get(self._users_key or "", [0, 0])[1] > 1:
            return False
        try:
            fcntl.flock(self._users_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def shared(self) -> None:
        """Go back to a shared use after :meth:`exclusive`."""
        fcntl.flock(self._users_fd, fcntl.LOCK_SH)


_SCRATCH: dict[str, Any] = {"lock": threading.Lock(), "users": 0, "space": None, "saved": (None, None)}


def _scratch_begin(tmp_root: Path) -> None:
    import tempfile

    _SCRATCH["space"] = TempSpace(tmp_root)
    folder = str(_SCRATCH["space"].folder())
    _SCRATCH["saved"] = (tempfile.tempdir, os.environ.get("TMPDIR"))
    tempfile.tempdir, os.environ["TMPDIR"] = folder, folder


def _scratch_end() -> None:
    import tempfile

    saved, saved_env = _SCRATCH["saved"]
    tempfile.tempdir = saved
    if saved_env is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved_env
    _SCRATCH["space"].close()
    _SCRATCH["space"] = None


def _prepare(root: Path) -> None:
    """Create the layout; refuse a workdir whose parts are not what they must be."""
    for name in (*LAYOUT, "lock", "users.lock"):
        p = root / name
        want_dir = name in LAYOUT
        if p.is_symlink() or (p.exists() and p.is_dir() != want_dir):
            raise WorkdirError(
                f"{p}: is not a {'folder' if want_dir else 'regular file'} (this workdir is not "
                "laid out as an artifact store)",
                hint="pass another --workdir, or remove that entry",
            )
    try:
        for sub in LAYOUT:
            (root / sub).mkdir(parents=True, exist_ok=True)
        probe = root / "tmp" / f".probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        if isinstance(e, (NotADirectoryError, FileExistsError)):
            raise WorkdirError(f"{root}: is not a folder", hint="pass a folder as --workdir") from e
        problem = os_error(e, root, "write the artifact store")
        if isinstance(problem, WorkdirError):
            problem = WorkdirError(
                f"{root}: artifact store is not writable ({e.strerror})",
                hint="pass a writable --workdir, or fix the folder's permissions",
            )
        raise problem from e


def _users_acquire(key: str, root: Path) -> int:
    """This process's shared hold on the store: one descriptor per store, counted, so that closing
    one Store never drops the lock another Store of this process relies on (byte-range semantics)."""
    with _PROCESS_LOCKS.setdefault("users:" + key, threading.Lock()):
        entry = _USERS.get(key)
        if entry is None:
            try:
                fd = os.open(root / "users.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                raise os_error(e, root / "users.lock", "open the store's users lock") from e
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits while a gc runs
            entry = _USERS[key] = [fd, 0]
        entry[1] += 1
        return entry[0]


def _users_release(key: str) -> None:
    with _PROCESS_LOCKS.setdefault("users:" + key, threading.Lock()):
        entry = _USERS.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _USERS[key]
            os.close(entry[0])


def _listing(folder: Path, *, strict: bool) -> list[str]:
    """Relative names of the regular files under ``folder``; a link or special file is refused."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            if p.is_symlink() or not (p.is_dir() or p.is_file()):
                what = f"{p}: links and special files are not allowed in an artifact"
                if strict:
                    raise InternalError(what, hint="a stage must write regular files only; report it")
                raise ArtifactCorrupt(what, hint=f"delete {folder} and rerun")
        out += [(Path(dirpath) / n).relative_to(folder).as_posix() for n in filenames]
    return sorted(out)


def recipe_key(stage: str, version: int, parents: dict[str, str], config: Any, env: dict[str, Any]) -> str:
    """Hash of everything that determines a stage's output; never timestamps or log levels."""
    return digest_value({"stage": stage, "version": version, "parents": parents, "config": config, "env": env})


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


__all__ = [
    "DIGEST",
    "MANIFEST",
    "RECIPE_KEY",
    "RUN_NAME",
    "SCHEMA_VERSION",
    "Artifact",
    "Manifest",
    "Store",
    "recipe_key",
]
