"""Run the installed ``deploykit`` console script in a subprocess, importing this checkout's code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def script() -> Path:
    """The console script beside the interpreter running the tests (the venv's ``bin/deploykit``)."""
    path = Path(sys.executable).parent / "deploykit"
    if not path.is_file():
        pytest.skip(f"no deploykit console script beside {sys.executable} (pip install -e . first)")
    return path


def deploykit(
    *args: str,
    cwd: Path | None = None,
    extra_path: tuple[Path, ...] = (),
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``deploykit ARGS`` as a user runs it: the entry point, a fresh interpreter, no terminal."""
    path = os.pathsep.join(str(p) for p in (*extra_path, SRC))
    environ = {**os.environ, "PYTHONPATH": path, "COLUMNS": "80", **(env or {})}
    environ.pop("DEPLOYKIT_DEBUG", None)
    return subprocess.run(
        [str(script()), *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def assert_one_error(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """Exit ``code``, stderr ending with exactly ``error: ...`` plus an optional ``hint: ...`` (after any
    progress lines), no traceback; returns the error line."""
    lines = proc.stderr.strip().splitlines()
    lines = lines[next((i for i, line in enumerate(lines) if line.startswith("error: ")), 0) :]
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert lines and lines[0].startswith("error: "), proc.stderr
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("hint: ")), proc.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
