"""The pass interface: a small class with ``requires`` -> ``run`` -> ``ensures``.

A pass declares typed parameters (a frozen dataclass with real defaults) and whether it changes
numerics; the runner checks the graph after it and, unless it declares a numeric change, that
ONNX Runtime gives the same outputs before and after.

Errors a pass raises::

    PassError            the model does not fit the pass (a cycle, an unsupported node): exit 4
    └── PassConfigError  the pass's parameters do not fit the model (a missing input,
                         a wrong rank, a tensor that does not exist): exit 2
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class NoParams:
    """This pass takes no parameters."""


@dataclass(frozen=True)
class PassResult:
    """What a pass returns: the model, whether it changed, and why not when it did not.

    The runner adds the generic part of the report (nodes added/removed/modified, op histograms,
    time); ``details`` holds what only the pass knows (which nodes it folded, which pattern matched).
    """

    model: onnx.ModelProto
    modified: bool
    reason: str = ""  # why nothing changed, when nothing did
    details: dict[str, Any] | None = None  # what the pass did, in its own words (counts, names)
    warnings: tuple[str, ...] = field(default=())  # shown to the user; the run goes on


class PassError(Exception):
    """The model does not fit the pass; the runner names the pass (and ``node`` when given)."""

    def __init__(self, message: str, *, node: str = "", hint: str = "") -> None:
        super().__init__(message)
        self.node = node
        self.hint = hint


class PassConfigError(PassError):
    """The pass's parameters do not fit the model (exit 2: fix the config, not the model)."""


class Pass:
    """Base of every surgery pass.

    Subclasses set ``name``, ``description`` (one line, shown by ``deploykit surgery --list``),
    ``Params`` (a frozen dataclass whose field defaults are the real defaults) and implement
    ``run``. ``shorthand`` names the parameter a bare value fills, so that
    ``set_dims: {images: [1, 3, 640, 640]}`` means ``set_dims: {shapes: {images: [...]}}``.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    version: ClassVar[int] = 1  # bump when the same params give another graph (it belongs in cache keys)
    Params: ClassVar[type] = NoParams
    changes_numerics: ClassVar[bool] = False
    shorthand: ClassVar[str | None] = None

    def __init__(self, params: Any = None) -> None:
        self.params = params if params is not None else self.Params()

    def requires(self, model: onnx.ModelProto) -> None:
        """Raise PassError (or PassConfigError) if the pass cannot run on ``model``."""

    def run(self, model: onnx.ModelProto) -> PassResult:
        """Return the transformed model; never modify ``model`` in place."""
        raise NotImplementedError

    def ensures(self, model: onnx.ModelProto) -> None:
        """Raise PassError if the result breaks what the pass promises."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params!r})"
