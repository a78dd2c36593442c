"""The whole deploykit error tree; the CLI maps each class to one exit code.

    DeployKitError (70)               root; carries a ``hint`` telling the user what to do
    ├── GateFailed (1)                the model ran but missed a gate
    │   ├── ParityFailed              outputs differ from the reference beyond tolerance
    │   └── TargetMissed              latency / FPS target missed
    ├── UsageError (2)                bad command line or API call
    │   └── ConfigError               config file missing, malformed, unknown key, bad value
    ├── EnvironmentProblem (3)        the machine cannot do what was asked
    │   ├── BackendUnavailable        backend library, driver or device missing
    │   ├── EngineIncompatible        a TensorRT plan built for another TensorRT version or GPU
    │   └── WorkdirError              artifact store not writable
    ├── InvalidInput (4)              a model, data file or artifact is not what it should be
    │   ├── ModelError                ONNX file or torch factory unusable
    │   ├── DataError                 input data does not match the model
    │   └── ArtifactCorrupt           stored artifact changed after it was written
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


class InvalidInput(DeployKitError):
    exit_code = 4


class ModelError(InvalidInput):
    pass


class DataError(InvalidInput):
    pass


class ArtifactCorrupt(InvalidInput):
    pass


class InternalError(DeployKitError):
    exit_code = 70


def first_line(e: BaseException, empty: str | None = None) -> str:
    """The first line of an exception's message (a library's long report starts with what matters);
    for an exception without a message, ``empty``, or by default its type's name."""
    text = str(e).strip()
    if text:
        return text.splitlines()[0]
    return type(e).__name__ if empty is None else empty
