"""The command line's last line of defence: the work runs in a forked child, watched by its parent.

Some failures never come back to Python: native code (onnx's C++ shape inference, ONNX Runtime,
TensorRT) can crash with a signal, hang holding the interpreter lock (so no thread can time it out),
or be killed for memory. The parent, which imported only the CLI, turns each into one error line and
an exit code: a stage past its time limit (the child reports each stage's limit on a pipe) is exit 3;
a child killed by SIGKILL that the parent did not send (the kernel's OOM killer) is exit 3; any other
signal is exit 70, naming the stage it was in. Otherwise the child's exit code is the command's.

The parent forwards SIGTERM/SIGHUP to the child (Ctrl-C reaches it directly) and waits; the child dies with the parent
(PR_SET_PDEATHSIG). Supervision applies only where stdout and stderr are real file descriptors (not
an in-process test capturing them) and can be switched off with DEPLOYKIT_NO_SUPERVISOR=1.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Callable

GRACE_S = 10.0  # after a stage's limit, the child's own alarm gets this long (or half the limit) to end it
_REPORT = {"fd": -1, "json": False}


def wanted() -> bool:
    """Whether to supervise this process (see the module docstring)."""
    if os.environ.get("DEPLOYKIT_NO_SUPERVISOR") or not hasattr(os, "fork"):
        return False
    try:
        return sys.stdout.fileno() == 1 and sys.stderr.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


def report(line: str) -> None:
    """Tell the parent (if any) what the child is doing: ``limit <seconds> <what>`` or ``done``."""
    if _REPORT["fd"] >= 0:
        with contextlib.suppress(OSError):
            os.write(_REPORT["fd"], (line.replace("\n", " ") + "\n").encode())


def run(work: Callable[[], None], *, json_errors: bool = False) -> None:
    """Run ``work`` in a child; exit with its code, or with a clean error for what killed it
    (``json_errors``: as the JSON error object ``--log-format json`` promises)."""
    _REPORT["json"] = json_errors
    read_end, write_end = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _die_with_parent(parent)
        _REPORT["fd"] = write_end
        work()  # exits through sys.exit
        sys.exit(0)
    os.close(write_end)
    sys.exit(_watch(pid, read_end))


def _die_with_parent(parent: int) -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the request took (pid 1 may be the parent: a container)
        os._exit(1)


def _watch(pid: int, pipe: int) -> int:
    state = {"what": "", "deadline": None, "limit": 0.0, "we_killed": False, "buffer": b""}

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the child through the process group
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return _exit_code(status, state)
        timeout = 0.5 if state["deadline"] is None else max(0.0, min(0.5, state["deadline"] - time.monotonic()))
        with contextlib.suppress(InterruptedError):
            ready, _, _ = select.select([pipe], [], [], timeout)
            if ready:
                _read_reports(pipe, state)
        if state["deadline"] is not None and time.monotonic() > state["deadline"]:
            state["we_killed"] = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return _fail(
                f"{state['what']} ran past its time limit of {state['limit']:g} s (it did not stop "
                "when asked: stuck in native code)",
                "raise limits.stage_timeout_s (or "
                "limits.stage_timeouts.<stage>), or find what hangs with `deploykit inspect`",
                3,
            )


def _read_reports(pipe: int, state: dict) -> None:
    data = os.read(pipe, 65536)
    if not data:
        return
    state["buffer"] += data
    *lines, state["buffer"] = state["buffer"].split(b"\n")
    for raw in lines:
        words = raw.decode(errors="replace").split(" ", 2)
        if words[0] == "limit" and len(words) == 3:
            state["limit"], state["what"] = float(words[1]), words[2]
            state["deadline"] = time.monotonic() + state["limit"] + min(GRACE_S, max(1.0, state["limit"] / 2))
        elif words[0] == "done":
            state["deadline"] = None


def _exit_code(status: int, state: dict) -> int:
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    where = f" during {state['what']}" if state["what"] and state["deadline"] is not None else ""
    if signum == signal.SIGKILL and not state["we_killed"]:
        return _fail(
            f"the work was killed (SIGKILL){where}, most likely for running out of memory",
            "free memory, or lower the dims, batch sizes or sample counts",
            3,
        )
    if signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        return 128 + signum
    name = signal.Signals(signum).name if signum else "unknown"
    return _fail(
        f"native code crashed ({name}){where}",
        "a crash inside onnx, ONNX Runtime or TensorRT; "
        "`deploykit inspect` the model, and report it with the model attached",
        70,
    )


def _fail(message: str, hint: str, code: int) -> int:
    with contextlib.suppress(Exception):
        if _REPORT["json"]:  # the same objects the CLI writes (deploykit.cli.app._fail)
            import json

            kind = "EnvironmentProblem" if code == 3 else "InternalError"
            error = {"error": message, "hint": hint, "exit_code": code, "kind": kind}
            sys.stderr.write(json.dumps({"event": "error", **error}) + "\n")
            sys.stdout.write(json.dumps({"schema": "deploykit.error/1", **error}) + "\n")
            sys.stdout.flush()
        else:
            sys.stderr.write(f"error: {message}\nhint: {hint}\n")
        sys.stderr.flush()
    return code


__all__ = ["report", "run", "wanted"]
