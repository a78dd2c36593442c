"""The whole deploykit error tree; the CLI maps each class to one exit code.

DeployKitError (70)               root; carries a ``hint`` telling the user what to do
├── GateFailed (1)                the model ran but missed a gate
│   ├── ParityFailed              outputs differ from the reference beyond tolerance
│   ├── TargetMissed              latency / FPS target missed
│   └── LintFailed                the graph bound for TensorRT fails the TensorRT lint (deploykit.lint)
├── UsageError (2)                bad command line or API call
│   └── ConfigError               config file missing, malformed, unknown key, bad value
├── EnvironmentProblem (3)        the machine cannot do what was asked
│   ├── BackendUnavailable        backend library, driver or device missing
│   ├── EngineIncompatible        a TensorRT plan built for another TensorRT version or GPU
│   ├── WorkdirError              artifact store not writable, or not laid out as a store
│   ├── DiskFull                  no space left where deploykit writes (ENOSPC, EDQUOT)
│   └── TimeLimitExceeded         a stage ran past its limit (limits.stage_timeout_s)
├── InvalidInput (4)              a model, data file or artifact is not what it should be
│   ├── ModelError                ONNX file or torch factory unusable
│   ├── DataError                 input data does not match the model
│   └── ArtifactCorrupt           stored artifact changed after it was written
│       └── Untrusted             no valid keyed MAC in a keyed store (DEPLOYKIT_STORE_KEY)
└── InternalError (70)            a bug in deploykit
"""

from __future__ import annotations


class DeployKitError(Exception):
    """Root of every error deploykit raises on purpose."""

    exit_code = 70

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class GateFailed(DeployKitError):
    exit_code = 1


class ParityFailed(GateFailed):
    pass


class TargetMissed(GateFailed):
    pass


class LintFailed(GateFailed):
    pass


class UsageError(DeployKitError):
    exit_code = 2


class ConfigError(UsageError):
    pass


class EnvironmentProblem(DeployKitError):
    exit_code = 3


class BackendUnavailable(EnvironmentProblem):
    pass


class EngineIncompatible(EnvironmentProblem):
    pass


class WorkdirError(EnvironmentProblem):
    pass


class DiskFull(EnvironmentProblem):
    pass


class TimeLimitExceeded(EnvironmentProblem):
    pass


class InvalidInput(DeployKitError):
    exit_code = 4


class ModelError(InvalidInput):
    pass


class DataError(InvalidInput):
    pass


class ArtifactCorrupt(InvalidInput):
    pass


class Untrusted(ArtifactCorrupt):
    """A manifest or run record without a valid MAC for the store's key: re-made where a run would
    reuse it, refused everywhere else."""


class InternalError(DeployKitError):
    exit_code = 70


_FULL = (28, 122)  # ENOSPC, EDQUOT


def is_disk_full(e: BaseException | None) -> bool:
    """Whether ``e`` or an exception it was raised from is a full disk or quota."""
    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, OSError) and e.errno in _FULL:
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def disk_full(e: BaseException | None, where: object = "") -> DiskFull:
    """The DiskFull error for a full disk met while doing ``where`` (a stage, a path)."""
    detail = getattr(e, "strerror", None) or (str(e) if e is not None else "") or "No space left on device"
    filename = getattr(e, "filename", None)
    return DiskFull(
        f"{where or filename}: disk full ({detail})" + (f" writing {filename}" if filename and where else ""),
        hint="free space on that disk (or pass a --workdir on another), then rerun",
    )


def disk_nearly_full(path: object, below: int = 1 << 20) -> bool:
    """Whether the filesystem holding ``path`` has less than ``below`` bytes available."""
    import os

    try:
        st = os.statvfs(str(path))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < below


def os_error(e: OSError, where: object, what: str) -> EnvironmentProblem:
    """An OSError met while doing ``what`` to ``where``, as the environment problem it is."""
    if is_disk_full(e):
        return disk_full(e, where)
    return WorkdirError(
        f"{where}: cannot {what} ({e.strerror or type(e).__name__})",
        hint="check the folder's permissions and free space",
    )


def first_line(e: BaseException, empty: str | None = None, limit: int = 300) -> str:
    """The first non-empty line of an exception's message (a library's long report starts with what
    matters), at most ``limit`` characters; for an exception without a message, ``empty``, or by
    default its type's name (a bare assert has no message)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__ if empty is None else empty
    return lines[0][:limit]
