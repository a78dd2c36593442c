"""Where the user called deploykit from, so a message names what they typed: ``dims=`` for the
Python API, ``--dim`` on the command line. The CLI enters :func:`command_line` once; everything else
is the Python API."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_CLI: ContextVar[bool] = ContextVar("deploykit_command_line", default=False)


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Messages raised inside name command-line flags."""
    token = _CLI.set(True)
    try:
        yield
    finally:
        _CLI.reset(token)


def spelled(python: str, cli: str) -> str:
    """``python`` (a parameter, ``dims=``) or ``cli`` (its flag, ``--dim``), for the surface in use."""
    return cli if _CLI.get() else python
