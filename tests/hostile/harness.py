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
        return (
            f"deploykit {' '.join(self.args)} -> {self.code}\n"
            f"--- stdout\n{self.out[-3000:]}\n--- stderr\n{self.err[-3000:]}"
        )


def deploykit(*args: str | Path, cwd: Path | None = None, timeout: float = 240, env: dict | None = None) -> Run:
    """The console script in a subprocess, importing this worktree's sources."""
    full_env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "250", "NO_COLOR": "1", **(env or {})}
    full_env.pop("DEPLOYKIT_DEBUG", None)
    try:
        done = subprocess.run(
            [str(CONSOLE_SCRIPT), *map(str, args)],
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:  # a hang is a finding, reported like any other failure
        return Run(tuple(map(str, args)), 124, str(e.stdout or ""), f"(hung: killed after {timeout} s)")
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
                out[p.relative_to(store).as_posix()] = (
                    hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "link:" + os.readlink(p)
                )
    return out


def assert_store_kept(store: Path, before: dict[str, str]) -> None:
    """Nothing that was there changed; anything new is a whole artifact that verifies (or its recipe)."""
    from deploykit.store.artifacts import Store

    after = snapshot(store)
    changed = [k for k, v in before.items() if after.get(k) != v]
    assert not changed, f"changed or removed: {changed}"
    new_objects = {k.split("/")[1] for k in set(after) - set(before) if k.startswith("objects/")}
    if new_objects:
        with Store(store) as s:
            for digest in new_objects:
                s.check(store / "objects" / digest, deep=True)


# -- many cases at once -------------------------------------------------------------------------
# Each run pays for interpreter start and imports (onnx alone takes seconds on a loaded machine):
# a suite runs all its cases' commands concurrently once, and each test then checks its own.

WORKERS = int(os.environ.get("DEPLOYKIT_HOSTILE_WORKERS", str(min(4, 2 * (os.cpu_count() or 1)))))


@dataclass
class Case:
    id: str
    make: object  # (folder, cfg, store) -> list of argument tuples, run in order
    code: int
    names: tuple[str, ...]
    names_file: bool  # the error line also names the config file
    store_kept: bool
    timeout: float
    slow: bool
    env: dict[str, str] | None = None  # extra environment of its commands (e.g. DEPLOYKIT_STORE_KEY)


@dataclass
class Outcome:
    case: Case
    store: Path
    before: dict[str, str]
    runs: list[Run]
    files: dict[str, Path]
    setup_error: BaseException | None = None


class Suite:
    """Hostile cases registered with :meth:`case`, run together by :meth:`run_all`."""

    def __init__(self) -> None:
        self.cases: dict[str, Case] = {}

    def case(
        self,
        id: str,
        code: int,
        *names: str,
        names_file: bool = False,
        store_kept: bool = True,
        timeout: float = 240,
        slow: bool = False,
        env: dict[str, str] | None = None,
    ):
        """Register a case; ``slow`` ones (each run imports onnx: a second of CPU) run under -m slow."""

        def register(make):
            assert id not in self.cases, id
            self.cases[id] = Case(id, make, code, names, names_file, store_kept, timeout, slow, env)
            return make

        return register

    def in_default_suite(self, ids: set[str]) -> None:
        """Only the cases named run in the default suite; the rest are slow. A name that is no case
        is an error (it would silently move its case out of the default suite)."""
        unknown = ids - set(self.cases)
        assert not unknown, f"no such hostile cases: {sorted(unknown)}"
        for c in self.cases.values():
            c.slow = c.id not in ids

    def params(self) -> list:
        import pytest

        return [pytest.param(c.id, marks=[pytest.mark.slow] if c.slow else []) for c in self.cases.values()]

    def run_selected(self, request, root: Path, built: tuple[Path, Path]) -> dict[str, Outcome]:
        """Run the cases of the tests pytest selected in this module (all at once)."""
        selected = {
            item.callspec.params["case"]
            for item in request.session.items
            if item.module is request.module and hasattr(item, "callspec") and "case" in item.callspec.params
        }
        return self.run_all(root, built, selected)

    def run_all(self, root: Path, built: tuple[Path, Path], only: set[str] | None = None) -> dict[str, Outcome]:
        import shutil
        from concurrent.futures import ThreadPoolExecutor

        outcomes = {}
        for case in self.cases.values():
            if only is not None and case.id not in only:
                continue
            folder = root / case.id
            shutil.copytree(built[0].parent, folder / "project")
            shutil.copytree(built[1], folder / "store", symlinks=True)
            cfg, store = folder / "project" / "deploykit.yaml", folder / "store"
            files: dict[str, Path] = {"cfg": cfg}
            try:
                commands = case.make(folder, cfg, store, files)
                outcomes[case.id] = Outcome(case, store, snapshot(store), [], files)
                outcomes[case.id].commands = commands  # type: ignore[attr-defined]
            except Exception as e:  # reported by the case's own test
                outcomes[case.id] = Outcome(case, store, {}, [], files, e)

        def go(outcome: Outcome) -> None:
            for args in getattr(outcome, "commands", []):
                outcome.runs.append(
                    deploykit(*args, cwd=outcome.store.parent, timeout=outcome.case.timeout, env=outcome.case.env)
                )

        with ThreadPoolExecutor(WORKERS) as pool:
            list(pool.map(go, [o for o in outcomes.values() if o.setup_error is None]))
        return outcomes

    @staticmethod
    def check(outcome: Outcome) -> None:
        if outcome.setup_error is not None:
            raise outcome.setup_error
        case = outcome.case
        assert outcome.runs, "the case ran no command"
        for run in outcome.runs:
            line = assert_fails_cleanly(run, case.code, *case.names)
            if case.names_file:
                assert str(outcome.files["cfg"]) in line, line
        if case.store_kept:
            assert_store_kept(outcome.store, outcome.before)
