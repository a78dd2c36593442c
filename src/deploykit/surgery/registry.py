"""Passes by name: built-ins, user passes named as ``module:Class`` or ``module:function``,
and passes installed under the ``deploykit.passes`` entry-point group. Nothing is discovered by
scanning folders: code runs only when the user names it."""

from __future__ import annotations

import difflib
import importlib
from importlib import metadata
from typing import Any

from deploykit.errors import ConfigError
from deploykit.surgery.base import Pass
from deploykit.typed import from_value

# name -> "module:Class", imported lazily.
BUILTIN = {
    "sanitize": "deploykit.surgery.sanitize:Sanitize",
}


def available() -> dict[str, str]:
    """Every pass name known without running user code: built-ins and entry points."""
    out = dict(BUILTIN)
    for ep in metadata.entry_points(group="deploykit.passes"):
        out.setdefault(ep.name, ep.value)
    return out


def pass_class(name: str) -> type[Pass]:
    known = available()
    target = known.get(name, name if ":" in name else None)
    if target is None:
        close = difflib.get_close_matches(name, list(known), n=3)
        also = f"; did you mean {', '.join(close)}?" if close else ""
        raise ConfigError(f"surgery: unknown pass {name!r}{also}",
                          hint=f"known passes: {', '.join(sorted(known))}; user passes are 'module:Class'")
    module_name, attr = target.split(":", 1)
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"surgery: cannot load pass {name!r} from {target!r}: {e}") from e
    if isinstance(obj, type) and issubclass(obj, Pass):
        return obj
    if callable(obj):
        return _function_pass(name, obj)
    raise ConfigError(f"surgery: {target!r} is neither a Pass subclass nor a function")


def instantiate(spec: str | dict[str, Any]) -> Pass:
    """A pass from its config form: ``"name"`` or ``{"name": {param: value}}``."""
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, dict) and len(spec) == 1:
        name, params = next(iter(spec.items()))
        params = params or {}
    else:
        raise ConfigError(f"surgery.passes: {spec!r} must be a pass name or {{name: {{params}}}}")
    cls = pass_class(name)
    return cls(from_value(cls.Params, params, f"surgery.{name}"))


def _function_pass(name: str, fn: Any) -> type[Pass]:
    """Wrap ``fn(model) -> model`` as a pass that may change numerics (we cannot know)."""
    from deploykit.surgery.base import PassResult

    class FunctionPass(Pass):
        description = fn.__doc__.strip().splitlines()[0] if fn.__doc__ else f"user function {name}"
        changes_numerics = False  # user functions are checked like any other pass

        def run(self, model: Any) -> PassResult:
            import onnx

            out = fn(model)
            if not isinstance(out, onnx.ModelProto):
                raise TypeError(f"user pass {name!r} returned {type(out).__name__}, not an onnx.ModelProto")
            return PassResult(out, out.SerializeToString() != model.SerializeToString())

    FunctionPass.name = name
    return FunctionPass
