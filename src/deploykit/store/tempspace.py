"""Temporaries owned by a live process, safe on a workdir that containers and hosts share.

Every temporary file a process writes for a store lives in one folder under the store's ``tmp/``
(staging folders, the temporaries of atomic writes, ``$TMPDIR`` for the quantizers). The folder
holds ``.owner``, a file its creator keeps an exclusive ``flock`` on for as long as it uses the
folder; the kernel drops the lock when the process ends, however it ends (SIGKILL included).

Liveness is that lock and nothing else: never a PID, which means nothing in another PID namespace
or on another host. A cleaner that can take the lock knows the owner is gone; it renames the folder
to ``.dead-*`` (one cleaner wins) and removes it. A folder appears under its final name only with
its lock already held: it is made as ``.new-*``, locked, then renamed. ``.new-*`` folders and
entries without an ``.owner`` (older layouts, stray files) are removed once older than
``GRACE_S``.

Across hosts this relies on the filesystem's locks: Linux emulates ``flock`` on NFS with byte-range
locks the server arbitrates (NFSv4, or NLM for v3), so a writer on one host holds its folder
against a cleaner on another. Mounts with ``nolock`` or ``local_lock=flock|all`` keep locks local
to each host: do not share a workdir over them. A crashed host's locks are released by the server
when its lease expires (NFSv4: about 90 s); its temporaries are then cleaned by the next run. Byte
range locks do not exclude threads of the process that holds them, so this process also keeps its
own folders in ``_HELD`` and never cleans those.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import socket
import threading
import time
import uuid
from pathlib import Path

OWNER = ".owner"
GRACE_S = 600.0  # age after which an unlocked-by-design entry (.new-*, no .owner) is debris
_HELD: set[str] = set()  # folders held by this process (resolved paths)
_HELD_LOCK = threading.Lock()


class TempSpace:
    """This process's temporaries under ``tmp_root``: one locked folder, made on first use."""

    def __init__(self, tmp_root: Path) -> None:
        self.tmp_root = tmp_root
        self._path: Path | None = None
        self._fd: int | None = None
        self._guard = threading.Lock()

    def folder(self) -> Path:
        """The locked folder (created on first call)."""
        with self._guard:
            if self._path is None:
                self._path, self._fd = _create(self.tmp_root)
            return self._path

    def close(self) -> None:
        """Remove the folder and release its lock."""
        with self._guard:
            path, fd, self._path, self._fd = self._path, self._fd, None, None
        if path is None:
            return
        shutil.rmtree(path, ignore_errors=True)  # while still locked: no cleaner races the removal
        with _HELD_LOCK:
            _HELD.discard(str(path))
        if fd is not None:
            os.close(fd)


def _create(tmp_root: Path) -> tuple[Path, int]:
    setup = tmp_root / f".new-{uuid.uuid4().hex}"
    setup.mkdir()
    fd = os.open(setup / OWNER, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else can hold it
        # Who made it, for a person reading the folder; never read back to decide liveness.
        os.write(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}).encode())
        final = tmp_root / f"{_safe(socket.gethostname())}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        os.rename(setup, final)
    except BaseException:
        os.close(fd)
        shutil.rmtree(setup, ignore_errors=True)
        raise
    with _HELD_LOCK:
        _HELD.add(str(final))
    return final, fd


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", name)[:40] or "host"


def clean_stale(tmp_root: Path, now: float | None = None) -> list[str]:
    """Remove temporaries whose owner is gone; return the names removed."""
    now = time.time() if now is None else now
    removed = []
    try:
        entries = list(tmp_root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        with _HELD_LOCK:
            if str(entry) in _HELD:
                continue
        with contextlib.suppress(OSError):
            if _remove_if_stale(entry, now):
                removed.append(entry.name)
    return removed


def _remove_if_stale(entry: Path, now: float) -> bool:
    name = entry.name
    if name.startswith(".dead-"):
        return _remove(entry)
    if name.startswith(".new-") or not (entry.is_dir() and (entry / OWNER).exists()):
        old = now - entry.lstat().st_mtime > GRACE_S
        return _remove(entry) if old else False
    try:
        fd = os.open(entry / OWNER, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False  # being removed by its owner or another cleaner
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # the owner is alive (here, in another container, or on another host)
        dead = entry.with_name(f".dead-{uuid.uuid4().hex}")
        os.rename(entry, dead)  # claim it: a second cleaner finds nothing to lock
    finally:
        os.close(fd)
    return _remove(dead)


def _remove(path: Path) -> bool:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    return True


__all__ = ["GRACE_S", "TempSpace", "clean_stale"]
