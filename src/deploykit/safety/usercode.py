"""Importing code the user named (a model factory, a data function) from the config's folder."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def importable_from(folder: Path) -> Iterator[None]:
    """Put the config's folder first on sys.path while importing code the user named from it."""
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(str(folder))
