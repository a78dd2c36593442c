"""Reading a small file someone else wrote (a config, a manifest, a baseline report) without trusting
it: a regular file, read up to a bound, so a FIFO or /dev/zero named as one cannot hang the read or
fill memory."""

from __future__ import annotations

from pathlib import Path

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


__all__ = ["read_small"]
