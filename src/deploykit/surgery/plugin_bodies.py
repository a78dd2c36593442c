"""ONNX bodies for plugin ops, so ONNX Runtime can run a graph with plugin nodes without a custom-op
library (``lower_plugins`` attaches them as model-local functions; they run at native speed).

Code registers, per plugin op type, a builder that returns an ``onnx.FunctionProto`` for one node::

    def toy_body(node: onnx.NodeProto, opset: int) -> onnx.FunctionProto:
        alpha = next(a.f for a in node.attribute if a.name == "alpha")
        return helper.make_function("trt.plugins", "Toy", ["x"], ["y"],
                                    [helper.make_node("Constant", [], ["a"], value_float=alpha),
                                     helper.make_node("Mul", ["x", "a"], ["y"])],
                                    [helper.make_opsetid("", opset)])

    register_body("Toy", toy_body)

The builder sees the node (its attributes, how many inputs and outputs it has) and the model's
``ai.onnx`` opset, which the body must use (the checker rejects a function importing another
version). The function's name and domain are set by ``lower_plugins``. Builders are found through
:func:`register_body` and the ``deploykit.plugin_bodies`` entry-point group. deploykit's own plugin
ops register theirs (:func:`deploykit.plugins.onnx_functions.register_bodies`) when their torch ops
load and before the surgery stage runs: surgery knows nothing of the packages above it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

import onnx

BodyBuilder = Callable[[onnx.NodeProto, int], onnx.FunctionProto]


@dataclass(frozen=True)
class BodyEntry:
    op_type: str
    builder: BodyBuilder
    domain: str | None = None  # only nodes of this domain; None = any non-ONNX domain


_REGISTERED: dict[str, BodyEntry] = {}


def register_body(op_type: str, builder: BodyBuilder, *, domain: str | None = None, replace: bool = False) -> None:
    """Register the body builder of plugin op ``op_type`` (optionally only in ``domain``)."""
    if op_type in _REGISTERED and not replace and _REGISTERED[op_type].builder is not builder:
        raise ValueError(f"a body for {op_type!r} is registered already (pass replace=True to override)")
    _REGISTERED[op_type] = BodyEntry(op_type, builder, domain)


def unregister_body(op_type: str) -> None:
    _REGISTERED.pop(op_type, None)


def registered_ops() -> list[str]:
    names = set(_REGISTERED)
    names |= {ep.name for ep in metadata.entry_points(group="deploykit.plugin_bodies")}
    return sorted(names)


def body_builder(node: onnx.NodeProto) -> BodyBuilder | None:
    """The builder for a node's op type (and domain), loading an entry point on first use."""
    entry = _REGISTERED.get(node.op_type)
    if entry is None:
        target = next(
            (ep.value for ep in metadata.entry_points(group="deploykit.plugin_bodies") if ep.name == node.op_type), None
        )
        if target is None:
            return None
        module, attr = target.split(":", 1)
        register_body(node.op_type, getattr(importlib.import_module(module), attr))
        entry = _REGISTERED[node.op_type]
    if entry.domain is not None and entry.domain != node.domain:
        return None
    return entry.builder
