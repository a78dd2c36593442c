"""Time limits: a stage past its limit raises; native code that never returns is ended by the
watchdog the CLI enables, with the error line and exit 3."""

from __future__ import annotations

import time

import pytest

from deploykit.errors import TimeLimitExceeded
from deploykit.safety.limits import LimitsConfig, time_limit
from tests.hostile.harness import assert_fails_cleanly, deploykit


def test_python_code_past_its_limit_raises():
    start = time.monotonic()
    with pytest.raises(TimeLimitExceeded, match="the loop ran past its time limit of 0.3 s"):
        with time_limit(0.3, "the loop"):
            while True:
                pass
    assert time.monotonic() - start < 5


def test_code_that_swallows_the_alarms_still_fails():
    swallowed = 0
    with pytest.raises(TimeLimitExceeded):
        with time_limit(0.2, "stubborn"):
            for _ in range(3):
                try:
                    time.sleep(10)
                except Exception:  # a stage's own `except Exception` catches each one
                    swallowed += 1
    assert swallowed == 3  # re-raised every second, and the late result is refused at the end


def test_the_limit_is_lifted_when_the_block_ends():
    with time_limit(0.2, "quick"):
        pass
    time.sleep(0.5)  # no alarm left behind


STUCK = """
import ctypes, os, signal, sys
from torch import nn


def build():
    how = os.environ["HOW"]
    if how == "hang":
        sum(range(10**9, 10**9 + 10**12))  # C code holding the interpreter lock: no alarm is ever seen
    elif how == "crash":
        ctypes.string_at(0)  # SIGSEGV in native code
    elif how == "oom":
        os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's OOM killer does
    return nn.Identity()
"""


@pytest.mark.parametrize(
    "how, limit, code, words",
    [
        ("hang", 3, 3, "stage export ran past its time limit of 3 s"),  # importing torch takes a second or two
        ("crash", 600, 70, "native code crashed (SIGSEGV) during stage export"),
        pytest.param("oom", 600, 3, "killed (SIGKILL) during stage export", marks=pytest.mark.slow),
    ],
)
def test_the_command_line_ends_what_python_cannot(tmp_path, how, limit, code, words):
    """Supervised by its parent, the CLI turns a hang in native code, a crash and an OOM kill into
    one error line and an exit code."""
    (tmp_path / "stuck.py").write_text(STUCK)
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text(
        'name: stuck\nsource: {factory: "stuck:build"}\ninputs: [{name: x, shape: [1, 4]}]\n'
        f"limits: {{stage_timeouts: {{export: {limit}}}}}\ngate: {{allow_missing_target: true}}\n"
    )
    start = time.monotonic()
    run = deploykit("export", cfg, "-w", tmp_path / "store", env={"HOW": how}, timeout=120)
    assert_fails_cleanly(run, code, words)
    assert time.monotonic() - start < 60


@pytest.mark.parametrize(
    "bad",
    [
        {"stage_timeout_s": 0},
        {"stage_timeout_s": float("inf")},
        {"stage_timeouts": {"gate": float("nan")}},
        {"max_input_mib": -1},
    ],
)
def test_limits_must_be_positive_and_finite(bad):
    with pytest.raises(ValueError):
        LimitsConfig(**bad)
