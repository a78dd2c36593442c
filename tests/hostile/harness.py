"""Running the installed ``deploykit`` console script on hostile input, and what every case asserts:
the exit code, one ``error:`` line naming the culprit, no traceback anywhere, and a store that is
byte for byte what it was (or only grown by complete artifacts that verify)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
CONSOLE_SCRIPT = Path(sys.executable).parent / "deploykit"
TRACEBACK_MARKERS = ("Traceback (most recent call last)", 'File "', "Segmentation fault", "core dumped")


@dataclass
class Run:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    @property
    def error_lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.startswith("error:")]

    def __str__(self) -> str:
        return f"deploykit {' '.join(self.args)} -> {self.code}\n--- stdout\n{self.out[-3000:]}\n--- stderr\n{self.err[-3000:]}"


def deploykit(*args: str | Path, cwd: Path | None = None, timeout: float = 240, env: dict | None = None) -> Run:
    """The console script in a subprocess, importing this worktree's sources."""
    full_env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "250", "NO_COLOR": "1", **(env or {})}
    full_env.pop("DEPLOYKIT_DEBUG", None)
    done = subprocess.run([str(CONSOLE_SCRIPT), *map(str, args)], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=timeout)
    return Run(tuple(map(str, args)), done.returncode, done.stdout, done.stderr)


def assert_fails_cleanly(run: Run, code: int, *names: str) -> str:
    """Exit ``code``, no traceback, exactly one error line naming each of ``names``; return that line."""
    assert run.code == code, str(run)
    for text in (run.out, run.err):
        assert not any(m in text for m in TRACEBACK_MARKERS), str(run)
    lines = run.error_lines
    assert len(lines) == 1, str(run)
    for name in names:
        assert name in lines[0], f"{name!r} not named in {lines[0]!r}\n{run}"
    return lines[0]


def assert_no_traceback(run: Run) -> None:
    for text in (run.out, run.err):
        assert not any(m in text for m in TRACEBACK_MARKERS), str(run)


def snapshot(store: Path) -> dict[str, str]:
    """Path -> sha256 of every file under the store's objects/, recipes/ and runs/."""
    out = {}
    for sub in ("objects", "recipes", "runs"):
        root = store / sub
        for p in sorted(root.rglob("*")) if root.is_dir() else ():
            if p.is_file() or p.is_symlink():
                out[p.relative_to(store).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() \
                    else "link:" + os.readlink(p)
    return out


def assert_store_kept(store: Path, before: dict[str, str]) -> None:
    """Nothing that was there changed; anything new is a whole artifact that verifies (or its recipe)."""
    from deploykit.artifacts import Store

    after = snapshot(store)
    changed = [k for k, v in before.items() if after.get(k) != v]
    assert not changed, f"changed or removed: {changed}"
    new_objects = {k.split("/")[1] for k in set(after) - set(before) if k.startswith("objects/")}
    if new_objects:
        with Store(store) as s:
            for digest in new_objects:
                s.check(store / "objects" / digest, deep=True)
