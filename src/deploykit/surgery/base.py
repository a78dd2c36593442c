"""The pass interface: a small class with ``requires`` -> ``run`` -> ``ensures``.

A pass declares typed parameters (a frozen dataclass with real defaults) and whether it changes
numerics; the runner checks the graph after it and, unless it declares a numeric change, that
ONNX Runtime gives the same outputs before and after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class NoParams:
    pass


@dataclass(frozen=True)
class PassResult:
    model: onnx.ModelProto
    modified: bool
    reason: str = ""  # why nothing changed, when nothing did
    details: dict[str, Any] | None = None  # what the pass did, in its own words (counts, names)


class PassError(Exception):
    """Raised by a pass whose precondition does not hold; the runner names the pass and node."""


class Pass:
    name: ClassVar[str]
    description: ClassVar[str]
    Params: ClassVar[type] = NoParams
    changes_numerics: ClassVar[bool] = False

    def __init__(self, params: Any = None) -> None:
        self.params = params if params is not None else self.Params()

    def requires(self, model: onnx.ModelProto) -> None:
        """Raise PassError if the pass cannot run on ``model``."""

    def run(self, model: onnx.ModelProto) -> PassResult:
        raise NotImplementedError

    def ensures(self, model: onnx.ModelProto) -> None:
        """Raise PassError if the result breaks what the pass promises."""
