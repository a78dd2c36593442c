"""Calling ModelOpt without its side effects: :func:`ort_patch_guard` undoes its patches of
``onnxruntime.quantization``, :func:`quiet` keeps its (and onnx-graphsurgeon's) logging down.

ModelOpt patches ONNX Runtime's quantization modules process-wide (it deletes Relu, Sigmoid and
others from ORT's QDQ registry and replaces calibrator methods); every ModelOpt call deploykit makes
(the tensorrt flavour's quantizer, :mod:`deploykit.quant.fp16`'s conversion) runs inside both, so the
``onnxruntime`` flavour gives the same result whether ModelOpt ran before it or not.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """ModelOpt logs an ERROR for the missing GPU on every call, onnx-graphsurgeon warns about
    colours and FP8 numpy types; deploykit reports what matters itself."""
    from onnx_graphsurgeon.logger import G_LOGGER

    loggers = [logging.getLogger(n) for n in ("modelopt", "modelopt.onnx", "modelopt.onnx.autocast")]
    levels, severity = [lg.level for lg in loggers], G_LOGGER.severity
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    G_LOGGER.severity = G_LOGGER.ERROR
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        G_LOGGER.severity = severity


@contextlib.contextmanager
def ort_patch_guard() -> Iterator[None]:
    """Restore ``onnxruntime.quantization`` (module attributes, class attributes, registries) on exit."""
    import onnxruntime.quantization  # noqa: F401  (load the modules whose state is saved)

    saved = [
        _snapshot(m)
        for name, m in list(sys.modules.items())
        if name.startswith("onnxruntime.quantization") and m is not None
    ]
    try:
        yield
    finally:
        for restore in saved:
            restore()


def _snapshot(module: Any) -> Any:
    attrs = dict(vars(module))
    dicts = {k: dict(v) for k, v in attrs.items() if type(v) is dict}
    classes = {k: dict(vars(v)) for k, v in attrs.items() if isinstance(v, type) and v.__module__ == module.__name__}

    def restore() -> None:
        for key in [k for k, v in vars(module).items() if k not in attrs and not isinstance(v, type(sys))]:
            delattr(module, key)  # submodules imported meanwhile stay reachable
        for key, value in attrs.items():
            if vars(module).get(key) is not value:
                setattr(module, key, value)
        for key, content in dicts.items():  # registries are mutated in place
            attrs[key].clear()
            attrs[key].update(content)
        for key, members in classes.items():
            cls = attrs[key]
            for name in [n for n in vars(cls) if n not in members]:
                delattr(cls, name)
            for name, value in members.items():
                if name not in ("__dict__", "__weakref__") and vars(cls).get(name) is not value:
                    setattr(cls, name, value)

    return restore


__all__ = ["ort_patch_guard", "quiet"]
