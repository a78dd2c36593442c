"""Passes by name: built-ins, user passes named as ``module:Class`` or ``module:function``,
and passes installed under the ``deploykit.passes`` entry-point group. Nothing is discovered by
scanning folders: code runs only when the user names it."""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import typing
from importlib import metadata
from typing import Any

from deploykit.config.typed import from_value
from deploykit.errors import ConfigError
from deploykit.surgery.base import Pass

# name -> "module:Class", imported lazily (one pass per module).
BUILTIN = {
    "sanitize": "deploykit.surgery.sanitize:Sanitize",
    "set_dims": "deploykit.surgery.set_dims:SetDims",
    "free_dims": "deploykit.surgery.free_dims:FreeDims",
    "remove_noops": "deploykit.surgery.remove_noops:RemoveNoops",
    "cut": "deploykit.surgery.cut:Cut",
    "extract": "deploykit.surgery.extract:Extract",
    "convert_opset": "deploykit.surgery.convert_opset:ConvertOpset",
    "fold_batchnorm": "deploykit.surgery.fold_batchnorm:FoldBatchNorm",
    "replace_with_plugin": "deploykit.surgery.replace_with_plugin:ReplaceWithPlugin",
    "lower_plugins": "deploykit.surgery.lower_plugins:LowerPlugins",
    "split_large_weights": "deploykit.surgery.split_large_weights:SplitLargeWeights",
}


def available() -> dict[str, str]:
    """Every pass name known without running user code: built-ins and entry points."""
    out = dict(BUILTIN)
    for ep in metadata.entry_points(group="deploykit.passes"):
        out.setdefault(ep.name, ep.value)
    return out


def pass_class(name: str) -> type[Pass]:
    """The pass class for a name: a built-in, an entry point, or ``module:Class`` / ``module:function``."""
    # a built-in never waits for the entry-point scan (tens of ms; a matrix plans thousands of cells)
    known = BUILTIN if name in BUILTIN else available()
    target = known.get(name, name if ":" in name else None)
    if target is None:
        close = difflib.get_close_matches(name, list(known), n=3)
        also = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(
            f"surgery: unknown pass {name!r}{also}",
            hint=f"known passes: {', '.join(sorted(known))}; user passes are 'module:Class'",
        )
    module_name, attr = target.split(":", 1)
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(
            f"surgery: cannot load pass {name!r} from {target!r}: {e}",
            hint="a user pass is 'module:Class' or 'module:function' importable from the config's folder",
        ) from e
    if isinstance(obj, type) and issubclass(obj, Pass):
        return obj
    if callable(obj) and not isinstance(obj, type):
        return _function_pass(name, obj)
    raise ConfigError(f"surgery: {target!r} is neither a Pass subclass nor a function")


def instantiate(spec: str | dict[str, Any]) -> Pass:
    """A pass from its config form: ``"name"`` or ``{"name": {param: value}}`` (or the shorthand value)."""
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, dict) and len(spec) == 1:
        name, params = next(iter(spec.items()))
        params = {} if params is None else params
    else:
        raise ConfigError(f"surgery.passes: {spec!r} must be a pass name or {{name: {{params}}}}")
    if not isinstance(name, str):
        raise ConfigError(f"surgery.passes: pass name {name!r} must be a string")
    cls = pass_class(name)
    fields = {f.name for f in dataclasses.fields(cls.Params)}
    if cls.shorthand and not (isinstance(params, dict) and (not params or set(params) & fields)):
        # set_dims: {images: [...]} means set_dims: {shapes: {images: [...]}}. A mapping naming any
        # parameter is the full form, so a misspelt parameter next to it is an unknown key.
        params = {cls.shorthand: params}
    return cls(from_value(cls.Params, params, f"surgery.{name}"))


def _function_pass(name: str, fn: Any) -> type[Pass]:
    """Wrap ``fn(model) -> model`` as a pass; the runner checks it like any other."""
    from deploykit.surgery.base import PassResult

    class FunctionPass(Pass):
        description = fn.__doc__.strip().splitlines()[0] if fn.__doc__ else f"user function {name}"
        changes_numerics = False  # user functions are checked like any other pass
        user_function = True

        def run(self, model: Any) -> PassResult:
            import onnx

            from deploykit.graph.proto import copy_model

            out = fn(copy_model(model))
            if not isinstance(out, onnx.ModelProto):
                raise TypeError(f"user pass {name!r} returned {type(out).__name__}, not an onnx.ModelProto")
            changed = out.SerializeToString(deterministic=True) != model.SerializeToString(deterministic=True)
            return PassResult(out, changed, "" if changed else "the function returned the model unchanged")

    FunctionPass.name = name
    return FunctionPass


def describe(name: str) -> dict[str, Any]:
    """A pass's one-line description and its parameters (name, type, default) for ``--list``."""
    cls = pass_class(name)
    hints = typing.get_type_hints(cls.Params)
    params = []
    for f in dataclasses.fields(cls.Params):
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        params.append(
            {
                "name": f.name,
                "type": _type_name(hints[f.name]),
                "default": default,
                "shorthand": f.name == cls.shorthand,
            }
        )
    return {"name": name, "description": cls.description, "changes_numerics": cls.changes_numerics, "params": params}


def list_passes() -> list[dict[str, Any]]:
    """Every known pass, described; a pass that fails to load is listed with the reason."""
    out = []
    for name in sorted(available()):
        try:
            out.append(describe(name))
        except ConfigError as e:
            out.append(
                {"name": name, "description": f"(cannot load: {e.message})", "changes_numerics": False, "params": []}
            )
    return out


def _type_name(tp: Any) -> str:
    text = str(tp) if not isinstance(tp, type) else tp.__name__
    for noise in ("typing.", "<class '", "'>"):
        text = text.replace(noise, "")
    return text


def format_passes(passes: list[dict[str, Any]] | None = None) -> str:
    """``deploykit surgery --list``: each pass, its one-line description, its parameters with defaults."""
    import json

    lines = []
    for p in passes if passes is not None else list_passes():
        numerics = "  [changes numerics]" if p["changes_numerics"] else ""
        lines.append(f"{p['name']}: {p['description']}{numerics}")
        for q in p["params"]:
            default = q["default"] if q["default"] == "(required)" else json.dumps(_plain(q["default"]))
            short = "  (the bare value fills this)" if q["shorthand"] else ""
            lines.append(f"    {q['name']}: {q['type']} = {default}{short}")
    return "\n".join(lines)


def _plain(value: Any) -> Any:
    from deploykit.store.hashing import canonical

    return canonical(value)
