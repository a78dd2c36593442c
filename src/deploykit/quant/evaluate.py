"""Moved: sessions are made by :func:`deploykit.graph.run.session_from_onnx` (the evaluator is a
parameter), the FP16 emulation lives in :mod:`deploykit.graph.emulate`.

DEPRECATED, for merging branches written against the old names only; nothing in deploykit imports
this module. Delete it once those branches are merged (issue 11).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.graph.emulate import (  # noqa: F401  (re-exported)
    FP8_UNSAFE_OPTIMIZERS,
    emulate_fp16,
    has_float8,
    has_low_precision_float,
    ort_disabled_optimizers,
)
from deploykit.graph.proto import expose_tensors  # noqa: F401  (re-exported)
from deploykit.graph.run import OrtSession as GraphSession  # noqa: F401  (re-exported)
from deploykit.graph.run import session_from_onnx

if TYPE_CHECKING:
    import onnx


def load(model: onnx.ModelProto | str | Path) -> onnx.ModelProto:
    """Deprecated: :func:`deploykit.graph.files.load_model` for paths."""
    from deploykit.graph.files import load_model

    return load_model(Path(model)) if isinstance(model, (str, Path)) else model


def open_as_written(model: Any, threads: int = 0, *, expose: tuple[str, ...] = ()) -> GraphSession:
    """Deprecated: ``session_from_onnx(model, "as_written", ...)``."""
    return session_from_onnx(model, "as_written", threads=threads, expose=expose)


def open_as_ort_computes(model: Any, level: str = "extended", threads: int = 0, *,
                         expose: tuple[str, ...] = ()) -> GraphSession:
    """Deprecated: ``session_from_onnx(model, "onnxruntime", level=...)``."""
    return session_from_onnx(model, "onnxruntime", level=level, threads=threads, expose=expose)  # type: ignore[arg-type]


def open_for_target(model: Any, flavour: str, level: str = "extended", threads: int = 0) -> GraphSession:
    """Deprecated: ``session_from_onnx(model, flavour_for(flavour).evaluator, level=...)``."""
    from deploykit.quant.flavours import flavour_for

    evaluator = flavour_for(flavour).evaluator
    return session_from_onnx(model, evaluator, level=level, threads=threads)  # type: ignore[arg-type]
