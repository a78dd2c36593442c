"""Reading a small file someone else wrote (a config, a manifest, a baseline report) without trusting
it: a regular file, read up to a bound, so a FIFO or /dev/zero named as one cannot hang the read or
fill memory."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from deploykit.errors import DeployKitError


def read_small(path: Path, limit: int, error: type[DeployKitError], what: str) -> bytes:
    """The bytes of ``path``; raise ``error`` naming ``what`` when it is missing, not a regular file,
    unreadable or larger than ``limit`` bytes (FileNotFoundError propagates for callers that handle absence)."""
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(path)
    if not path.is_file():
        raise error(f"{path}: {what} is not a regular file")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise error(f"{path}: cannot read {what} ({e.strerror or type(e).__name__})") from e
    if len(data) > limit:
        raise error(f"{path}: {what} is larger than {limit // 1024} KiB")
    return data


def open_regular(path: Path, error: type[DeployKitError], what: str) -> BinaryIO:
    """``path`` opened for reading, only if it is a regular file: opened without blocking and checked on
    the open descriptor, so a FIFO or device put there (even after a listing said "file") never hangs
    the read; ``error`` names ``what`` otherwise."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise error(f"{path}: cannot read {what} ({e.strerror or type(e).__name__})") from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{path}: {what} is {kind_of(mode)}, not a regular file", hint="remove it or point elsewhere")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def kind_of(mode: int) -> str:
    """What a file's mode says it is, for a message ("a named pipe (FIFO)")."""
    for test, name in (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return name
    return "not a regular file"


__all__ = ["kind_of", "open_regular", "read_small"]
