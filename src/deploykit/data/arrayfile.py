"""Reading untrusted .npy / .npz files: the header is checked before any array is read.

``np.load(allow_pickle=False)`` never unpickles, but it reads an ``.npz`` member lazily (an object
array fails at that later read, outside the caller's ``try``) and trusts the header's shape (a
30-byte member can claim terabytes, and a compressed one can inflate to them). Here every array's
dtype must be numeric and its size at most ``max_bytes``, checked from the header, and any failure
is a DataError naming the file and the member.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np

from deploykit.errors import DataError

MAX_BYTES = 4 << 30


def read_arrays(path: Path, max_bytes: int = MAX_BYTES, mmap: bool = False) -> Iterator[tuple[str, np.ndarray]]:
    """(member name, array) for an .npz, or ('', array) for an .npy. With ``mmap`` an .npy is
    memory-mapped read-only once its header passed the same checks (a stack of samples is then read
    a slice at a time); .npz members are always read whole."""
    from deploykit.safety.smallfile import open_regular

    try:
        with open_regular(path, DataError, "array file") as f:  # a FIFO named .npy never blocks the read
            is_zip = zipfile.is_zipfile(f)
        if is_zip:
            yield from _npz(path, max_bytes)
            return
        with open_regular(path, DataError, "array file") as f:
            _check_header(f, path, "", max_bytes)
            f.seek(0)
            yield "", _mapped(path) if mmap else _load(f, path, "")
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from e


def _npz(path: Path, max_bytes: int) -> Iterator[tuple[str, np.ndarray]]:
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, ValueError) as e:
        raise DataError(f"{path}: not a readable .npz file ({e})") from e
    with archive:
        members = [m for m in archive.infolist() if not m.is_dir()]
        for info in members:
            if not info.filename.endswith(".npy"):
                raise DataError(f"{path}: member {info.filename!r} is not an .npy array")
            if info.file_size > max_bytes + 4096:
                raise DataError(
                    f"{path}: member {info.filename!r} inflates to {info.file_size} bytes (at most {max_bytes})",
                    hint="split the data into smaller files",
                )
        for info in members:
            name = info.filename[:-4]
            try:
                with archive.open(info) as f:
                    _check_header(f, path, name, max_bytes)
                with archive.open(info) as f:
                    yield name, _load(f, path, name)
            except (zipfile.BadZipFile, EOFError, ValueError, OSError) as e:
                if isinstance(e, DataError):
                    raise
                raise DataError(f"{path}: member {name!r} is unreadable ({e})") from e


def _check_header(f: IO[bytes], path: Path, member: str, max_bytes: int) -> None:
    where = f"{path}" + (f": member {member!r}" if member else "")
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    except (ValueError, EOFError, SyntaxError, TypeError) as e:
        raise DataError(f"{where}: not a readable .npy array ({str(e)[:200]})") from e
    if dtype.hasobject or dtype.kind not in "biuf":
        raise DataError(
            f"{where}: holds {dtype} values; data must be numeric arrays (no objects, strings)",
            hint="save plain numeric arrays (np.save / np.savez)",
        )
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > max_bytes:
        raise DataError(
            f"{where}: declares {list(shape)} {dtype} = {nbytes} bytes (at most {max_bytes})",
            hint="split the data into smaller files",
        )


def _mapped(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, EOFError) as e:  # e.g. a file shorter than its header declares
        raise DataError(f"{path}: truncated or unreadable array ({str(e)[:200]})") from e


def _load(f: IO[bytes], path: Path, member: str) -> np.ndarray:
    try:
        return np.lib.format.read_array(f, allow_pickle=False)
    except (ValueError, EOFError, OSError, zipfile.BadZipFile) as e:
        where = f"{path}" + (f": member {member!r}" if member else "")
        raise DataError(f"{where}: truncated or unreadable array ({str(e)[:200]})") from e


__all__ = ["MAX_BYTES", "read_arrays"]
