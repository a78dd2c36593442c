"""ONNX export of the plugin torch ops: one node per op, for both torch exporters.

The node has op_type = plugin name, domain ``deploykit``, the op's attributes (INTS) and the string
attributes ``plugin_version`` / ``plugin_namespace`` that TensorRT's parser maps to the plugin.

- TorchScript exporter: a symbolic function per op (``torch.onnx.register_custom_op_symbolic``),
  which also sets the output type and the static dims it knows.
- Dynamo exporter: a translation function per op for ``custom_translation_table``. It emits the
  node through an onnxscript ``Op`` built on an ``OpSchema`` made from the op description, which is
  never registered with ONNX: a global schema would make the checker and shape inference use it
  instead of the model-local function body.

:func:`register_exporters` (run when :mod:`deploykit.plugins.torch_ops` is imported) registers the
TorchScript symbolics and, through the export extension point (:mod:`deploykit.source.export_hooks`), the
dynamo translations and a hook that gives every exported plugin node its ONNX Runtime body
(:func:`deploykit.plugins.onnx_functions.attach_bodies`); and the same bodies with the
``lower_plugins`` surgery pass.
Outside deploykit, pass ``translation_table()`` to ``torch.onnx.export(..., dynamo=True)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from deploykit.plugins.descriptions import ONNX_DOMAIN, OpDescription, description

_TORCHSCRIPT_OPSET = 9  # the lowest opset the symbolics apply to: they emit no standard op
_ONNX_TYPES = {
    "float32": "tensor(float)",
    "float16": "tensor(float16)",
    "int32": "tensor(int32)",
    "int64": "tensor(int64)",
}


def _plugin_attributes(op: OpDescription) -> dict[str, str]:
    return {"plugin_version": op.plugin_version, "plugin_namespace": op.plugin_namespace}


# ---------------------------------------------------------------------------------------------
# TorchScript


def _torchscript_symbolic(op: OpDescription) -> Callable[..., Any]:
    from torch.onnx import symbolic_helper

    def symbolic(g: Any, *args: Any) -> Any:
        tensors, values = args[: len(op.inputs)], args[len(op.inputs) :]
        attrs = {
            a.name: [int(v) for v in symbolic_helper._maybe_get_const(value, "is")]
            for a, value in zip(op.attributes, values, strict=True)
        }
        out = g.op(
            f"{ONNX_DOMAIN}::{op.name}",
            *tensors,
            **{f"{k}_i": v for k, v in attrs.items()},
            **{f"{k}_s": v for k, v in _plugin_attributes(op).items()},
        )
        like = next(t for t, desc in zip(tensors, op.inputs, strict=True) if desc.dtype == op.outputs[0].dtype)
        out.setType(like.type().with_sizes(_known_output_dims(op, tensors, attrs)))
        return out

    return symbolic


def _known_output_dims(op: OpDescription, tensors: Sequence[Any], attrs: dict[str, list[int]]) -> list[int | None]:
    """The output dims the TorchScript graph knows statically (None for dynamic ones)."""
    from torch.onnx import symbolic_helper

    known: dict[str, int] = {}
    for attr in op.attributes:
        known.update(zip(attr.binds, attrs[attr.name], strict=True))
    for tensor, desc in zip(tensors, op.inputs, strict=True):
        sizes = symbolic_helper._get_tensor_sizes(tensor) or []
        for symbol, size in zip(desc.shape, sizes, strict=False):
            if isinstance(symbol, str) and isinstance(size, int):
                known.setdefault(symbol, size)
    return [d if isinstance(d, int) else known.get(d) for d in op.outputs[0].shape]


def register_torchscript() -> None:
    """Register the symbolic of every op with the TorchScript exporter (a process-wide registry)."""
    import torch

    for name in ("BEVPoolV2", "PillarScatter"):
        op = description(name)
        torch.onnx.register_custom_op_symbolic(op.torch_name, _torchscript_symbolic(op), _TORCHSCRIPT_OPSET)


# ---------------------------------------------------------------------------------------------
# Dynamo


def op_schema(op: OpDescription) -> Any:
    """An ``onnx.defs.OpSchema`` for the op, built from its description (not registered anywhere)."""
    from onnx import defs

    def parameter(tensor: Any) -> Any:
        type_str = tensor.dtype if tensor.dtype in op.types else _ONNX_TYPES[tensor.dtype]
        return defs.OpSchema.FormalParameter(tensor.name, type_str, tensor.doc)

    constraints = [(var, [_ONNX_TYPES[d] for d in op.dtypes(var)], f"{var} of {op.name}") for var in op.types]
    attributes = [
        defs.OpSchema.Attribute(a.name, defs.OpSchema.AttrType.INTS, a.doc, required=a.required) for a in op.attributes
    ]
    attributes += [
        defs.OpSchema.Attribute(name, defs.OpSchema.AttrType.STRING, f"TensorRT {name}", required=False)
        for name in _plugin_attributes(op)
    ]
    return defs.OpSchema(
        op.name,
        ONNX_DOMAIN,
        1,
        op.summary,
        inputs=[parameter(t) for t in op.inputs],
        outputs=[parameter(t) for t in op.outputs],
        type_constraints=constraints,
        attributes=attributes,
    )


@functools.cache
def _onnxscript_op(name: str) -> Any:
    import onnxscript

    op = description(name)
    return onnxscript.values.Op(onnxscript.values.Opset(ONNX_DOMAIN, 1), op.name, op_schema(op))


def _emit(name: str, tensors: Sequence[Any], attrs: dict[str, Sequence[int]]) -> Any:
    op = description(name)
    return _onnxscript_op(name)(
        *tensors, **{k: [int(v) for v in vs] for k, vs in attrs.items()}, **_plugin_attributes(op)
    )


# The exporter matches the torch op's arguments to these parameters by position and name.
def bev_pool_v2_onnx(
    depth: Any,
    feat: Any,
    ranks_depth: Any,
    ranks_feat: Any,
    ranks_bev: Any,
    interval_starts: Any,
    interval_lengths: Any,
    bev_shape: Sequence[int],
) -> Any:
    """Dynamo translation of ``deploykit::bev_pool_v2``: one ``deploykit::BEVPoolV2`` node."""
    return _emit(
        "BEVPoolV2",
        (depth, feat, ranks_depth, ranks_feat, ranks_bev, interval_starts, interval_lengths),
        {"bev_shape": bev_shape},
    )


def pillar_scatter_onnx(features: Any, coords: Any, num_pillars: Any, grid: Sequence[int]) -> Any:
    """Dynamo translation of ``deploykit::pillar_scatter``: one ``deploykit::PillarScatter`` node."""
    return _emit("PillarScatter", (features, coords, num_pillars), {"grid": grid})


def translation_table() -> dict[Any, Callable[..., Any]]:
    """``custom_translation_table`` entries for ``torch.onnx.export(..., dynamo=True)``."""
    import torch

    import deploykit.plugins.torch_ops  # noqa: F401  (defines torch.ops.deploykit.*)

    return {
        torch.ops.deploykit.bev_pool_v2.default: bev_pool_v2_onnx,
        torch.ops.deploykit.pillar_scatter.default: pillar_scatter_onnx,
    }


def _attach_bodies_hook(model: Any) -> Any:
    from deploykit.plugins.onnx_functions import attach_bodies

    return attach_bodies(model)[0]


def register_exporters() -> None:
    """Make both exporters emit the plugin nodes, and exported models carry their ONNX Runtime bodies
    (through the export extension point, :mod:`deploykit.source.export_hooks`)."""
    from deploykit.plugins.onnx_functions import register_bodies
    from deploykit.source.export_hooks import register_export_hooks

    register_bodies()  # for the lower_plugins surgery pass
    register_torchscript()
    register_export_hooks("deploykit.plugins", translations=translation_table(), model_hook=_attach_bodies_hook)
