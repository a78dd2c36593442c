"""Build frozen dataclasses from plain YAML/JSON values, failing with the path of the bad field.

Only the shapes deploykit's config uses are supported: scalars, ``Literal``, optional values,
``tuple[X, ...]``, ``dict[str, X]`` and nested dataclasses.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import types
import typing
from typing import Any, Literal, TypeVar, Union

from deploykit.errors import ConfigError

T = TypeVar("T")


def from_value(cls: type[T], value: Any, path: str = "") -> T:
    """Convert ``value`` to the dataclass ``cls``; raise ConfigError naming ``path`` on any mismatch."""
    return _convert(cls, value, path or cls.__name__)


def _number_as_text(value: Any, args: tuple[Any, ...]) -> bool:
    """Whether ``value`` is a number whose text is one of the string choices ``args``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and str(value) in args


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, value, path)
    if origin is Literal:
        if _number_as_text(value, args):  # YAML reads `tensorrt: 11` as a number: the text is meant
            return str(value)
        if value not in args:
            close = difflib.get_close_matches(str(value).lower(), [str(a).lower() for a in args], n=1)
            guess = f" (did you mean {next(a for a in args if str(a).lower() == close[0])!r}?)" if close else ""
            raise ConfigError(f"{path}: {value!r} is not one of {', '.join(map(repr, args))}{guess}")
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _convert(arg, value, path)
            except ConfigError as e:
                errors.append(e.message)
        if len(errors) == 1:
            raise ConfigError(errors[0])
        names = " or ".join(_describe(a) for a in args if a is not type(None))
        raise ConfigError(f"{path}: expected {names}, got {value!r}")
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {type(value).__name__} {value!r}")
        item = args[0]
        return tuple(_convert(item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__} {value!r}")
        return {str(k): _convert(args[1], v, f"{path}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    return _scalar(tp, value, path)


def _describe(tp: Any) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    if tp in names:
        return names[tp]
    return "a mapping" if dataclasses.is_dataclass(tp) or typing.get_origin(tp) is dict else "a list"


def _scalar(tp: Any, value: Any, path: str) -> Any:
    if tp is float:
        if isinstance(value, str):
            # PyYAML reads 1e-3 (no dot) as a string: accept what float() accepts.
            try:
                return float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        return value
    raise TypeError(f"typed.from_value does not support {tp!r} at {path}")


def _dataclass(cls: Any, value: Any, path: str) -> Any:
    if dataclasses.is_dataclass(value):
        return value
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__} {value!r}")
    hints, fields = _layout(cls)
    unknown = [k for k in value if k not in fields]
    if unknown:
        raise ConfigError(unknown_key_message(path, str(unknown[0]), fields))
    kwargs = {}
    for name, field in fields.items():
        if name in value:
            kwargs[name] = _convert(hints[name], value[name], f"{path}.{name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"{path}: missing required key {name!r}")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError, ArithmeticError) as e:  # __post_init__ checks
        raise ConfigError(_post_init_message(path, cls, str(e))) from e


@functools.cache
def _layout(cls: Any) -> tuple[dict[str, Any], dict[str, dataclasses.Field]]:
    """A dataclass's resolved type hints and settable fields (resolving hints costs a compile per field:
    a matrix builds thousands of configs)."""
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and not f.metadata.get("internal")}
    return typing.get_type_hints(cls), fields


def _post_init_message(path: str, cls: type, message: str) -> str:
    """``config.parity.default.max_abs must be ...`` when a check's message starts with a field's
    name (so the user sees the whole key), else ``path: message``."""
    first, _, rest = message.partition(" ")
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return f"{path}.{first} {rest}" if first in names and rest else f"{path}: {message}"


def unknown_key_message(path: str, key: str, valid: typing.Iterable[str]) -> str:
    valid = sorted(valid)
    close = difflib.get_close_matches(key, valid, n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{path}: unknown key {key!r}{guess}; valid keys: {', '.join(valid)}"
