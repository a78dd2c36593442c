"""The export extension point: what code outside the export stage adds to every torch -> ONNX export.

A package that defines custom torch ops registers, under its own name, the dynamo translations of
those ops (passed to ``torch.onnx.export(..., dynamo=True, custom_translation_table=...)``; the
TorchScript exporter has its own global registry) and a hook applied to every exported model
before it is saved and checked (``deploykit.plugins`` gives its plugin nodes an ONNX Runtime body)::

    register_export_hooks("deploykit.plugins", translations=translation_table(), model_hook=attach)

Registering again under the same name replaces the entry, so importing a module twice is harmless.
The export stage reads the registry; nothing else may change it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

ModelHook = Callable[[Any], Any]  # onnx.ModelProto -> onnx.ModelProto


@dataclass(frozen=True)
class ExportHooks:
    """One extension's contribution to every export."""

    translations: Mapping[Any, Callable[..., Any]] = field(default_factory=dict)  # op overload -> translation
    model_hook: ModelHook | None = None


_REGISTERED: dict[str, ExportHooks] = {}


def register_export_hooks(
    name: str, *, translations: Mapping[Any, Callable[..., Any]] | None = None, model_hook: ModelHook | None = None
) -> None:
    """Register (or replace) the export hooks of the extension ``name`` (see the module docstring)."""
    _REGISTERED[name] = ExportHooks(dict(translations or {}), model_hook)


def unregister_export_hooks(name: str) -> None:
    _REGISTERED.pop(name, None)


def dynamo_translations() -> dict[Any, Callable[..., Any]]:
    """Every registered dynamo translation (the ``custom_translation_table`` of an export)."""
    out: dict[Any, Callable[..., Any]] = {}
    for hooks in _REGISTERED.values():
        out.update(hooks.translations)
    return out


def model_hooks() -> list[ModelHook]:
    """Every registered exported-model hook, in registration order."""
    return [h.model_hook for h in _REGISTERED.values() if h.model_hook is not None]
