"""Running onnx's native checks on an untrusted model where a crash cannot take deploykit with it.

onnx's checker and shape inference are C++; on some malformed graphs they abort instead of raising
(a Conv whose input has a lower rank than its weight fails an STL bounds assertion: SIGABRT), and
ONNX Runtime runs the same inference when it loads a model. :mod:`deploykit.safety.onnxguard` refuses the
structures known to do that; this catches the rest by mechanism: the checks first run in a forked
copy of this process. If that child dies by a signal or does not finish, the model is refused with
a ModelError naming the file and what the native code printed; if it finishes (whether the checks
passed or raised), the caller runs them for real, in-process, and maps their exceptions as usual.
Only onnx's single-threaded code runs in the child (never ONNX Runtime, whose thread pools do not
survive a fork).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from pathlib import Path
from typing import Any

from deploykit.errors import ModelError

TIMEOUT_S = 300.0
_2GB = 2**31 - 1


def probe(model: Any, path: Path) -> None:
    """Raise ModelError if onnx's checker or strict shape inference crashes or hangs on ``model``."""
    if not hasattr(os, "fork"):
        return
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run the checks, say nothing, exit 0 whatever Python raised
        os.close(read_end)
        os.dup2(write_end, 2)
        with contextlib.suppress(BaseException):
            _checks(model, path)
        os._exit(0)
    os.close(write_end)
    try:
        status, said = _wait(pid, read_end)
    finally:
        os.close(read_end)
    if status is None:
        raise ModelError(
            f"{path}: onnx's checker and shape inference did not finish within {TIMEOUT_S:g} s",
            hint="the graph is malformed or hostile; `deploykit inspect --no-runtime` shows it",
        )
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        detail = f": {said}" if said else ""
        raise ModelError(
            f"{path}: onnx's checker or shape inference crashed on this model ({name}){detail}",
            hint="the graph is malformed (e.g. an input rank its op does not accept); re-export it",
        )


def _checks(model: Any, path: Path) -> None:
    import onnx

    if model.ByteSize() < _2GB:
        onnx.checker.check_model(model, full_check=False)
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    else:
        onnx.checker.check_model(str(path))


def _wait(pid: int, pipe: int) -> tuple[int | None, str]:
    """(wait status or None on timeout, the last line the child wrote to stderr)."""
    deadline, said = time.monotonic() + TIMEOUT_S, b""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            with contextlib.suppress(OSError):
                while chunk := os.read(pipe, 65536):
                    said = (said + chunk)[-4096:]
            return status, _last_line(said)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None, ""
        with contextlib.suppress(InterruptedError):
            ready, _, _ = select.select([pipe], [], [], 0.05)
            if ready:
                said = (said + os.read(pipe, 65536))[-4096:]


def _last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    return last[last.index("Assertion") :][:300] if "Assertion" in last else last[-300:]  # not the header path


__all__ = ["probe"]
