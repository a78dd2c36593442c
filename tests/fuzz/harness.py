"""Driving the fuzz worker: restart it after a crash, time out a hang, classify each outcome."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.hostile.harness import SRC, TRACEBACK_MARKERS

EXIT_CODES = {0, 1, 2, 3, 4}  # success, gate failed, usage, environment, invalid input: never 70


@dataclass
class Outcome:
    code: int | None  # None: killed by a signal or hung
    err: str
    how: str  # "exit", "signal N", "hang", "died with N"

    def problem(self) -> str:
        """'' when the run ended as it must: success or a DeployKitError with its exit code."""
        if self.how != "exit":
            return f"{self.how}: {self.err[-2000:]}"
        if self.code not in EXIT_CODES:
            return f"exit {self.code}: {self.err[-2000:]}"
        if any(m in self.err for m in TRACEBACK_MARKERS):
            return f"traceback: {self.err[-2000:]}"
        return ""


class Worker:
    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(SRC), str(SRC.parent)]),
            "NO_COLOR": "1",
            "COLUMNS": "200",
        }
        env.pop("DEPLOYKIT_DEBUG", None)
        return subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker"],
            cwd=self.cwd,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )

    def run(self, *argv: str, timeout: float = 120) -> Outcome:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        proc.stdin.write(json.dumps({"argv": [str(a) for a in argv]}) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else ""
        if line:
            reply = json.loads(line)
            return Outcome(reply["code"], reply["err"], "exit")
        if not ready:
            proc.kill()
            proc.wait()
            self.proc = None
            return Outcome(None, "", "hang")
        code = proc.wait()
        self.proc = None
        if code < 0:
            return Outcome(None, "", f"signal {-code}")
        # The time-limit watchdog exits with the error's code after printing it: still a clean end.
        return Outcome(code, "", "exit" if code in EXIT_CODES else f"died with {code}")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
