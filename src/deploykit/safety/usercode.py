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


def failed_inside(e: BaseException) -> tuple[str, str]:
    """What really failed when the user's code raised ``e``: the innermost exception of its cause chain
    and the file and line that raised it, as ``(" - inside: RuntimeError: ... (torchvision/x.py:163)",
    package)`` where ``package`` is the installed package that file belongs to ("" if none). A wrapper's
    message ("Could not import module 'SegformerForSemanticSegmentation'") hides the cause it chains."""
    from deploykit.errors import first_line

    root, seen = e, {id(e)}
    while True:
        nxt = root.__cause__ or (None if root.__suppress_context__ else root.__context__)
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(nxt))
        root = nxt
    frame = root.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    path, package = "", ""
    if frame is not None:
        path, package = _short(frame.tb_frame.f_code.co_filename)
        path = f" ({path}:{frame.tb_lineno})"
    if root is e:
        return path, package
    return f" - inside: {type(root).__name__}: {first_line(root)}{path}", package


def _short(filename: str) -> tuple[str, str]:
    """A file as ``package/module.py`` below site-packages (and the package), else as it is."""
    parts = Path(filename).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            rest = parts[len(parts) - parts[::-1].index(marker) :]
            return "/".join(rest), (rest[0].removesuffix(".py") if rest else "")
    return filename, ""
