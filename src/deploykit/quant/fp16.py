"""FP16 for the non-quantized rest of a graph, without silent overflow.

ModelOpt's default FP16 high precision turned a BatchNorm running variance of ~1e8 into inf and
the model into an all-zero map, with nothing but a numpy warning. Before converting, every weight
and every calibrated activation is checked against ``fp16_limit``; the nodes that read or write an
out-of-range tensor stay in FP32 (or the stage refuses, naming them). The conversion itself is
ModelOpt's AutoCast (``convert_to_mixed_precision``) with those nodes excluded by exact name.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from deploykit.errors import ModelError, first_line
from deploykit.quant.ranges import TensorRange
from deploykit.quant.reasons import Kept, Reason

if TYPE_CHECKING:
    import onnx


def overflow_nodes(model: onnx.ModelProto, ranges: dict[str, TensorRange], limit: float) -> dict[str, Reason]:
    """Node name -> why it must stay FP32: it reads a weight, or reads/writes an activation, beyond ``limit``."""
    from onnx import numpy_helper

    from deploykit.graph.proto import consumers, producers

    out: dict[str, Reason] = {}
    readers = consumers(model)
    for init in model.graph.initializer:
        if init.data_type != 1:  # FLOAT only; integer/shape tensors are not converted
            continue
        peak = float(np.max(np.abs(numpy_helper.to_array(init)))) if np.prod(init.dims) else 0.0
        if peak > limit:
            for node in readers.get(init.name, []):
                out.setdefault(node.name, Kept.FP16_WEIGHT_OVERFLOW(tensor=init.name, peak=peak, limit=limit))
    made_by = producers(model)
    for tensor, r in ranges.items():
        if r.absmax <= limit:
            continue
        why = Kept.FP16_ACTIVATION_OVERFLOW(tensor=tensor, peak=r.absmax, limit=limit)
        if tensor in made_by:
            out.setdefault(made_by[tensor].name, why)
        for node in readers.get(tensor, []):
            out.setdefault(node.name, why)
    return out


def refuse(nodes: dict[str, Reason]) -> None:
    """The ``fp16_overflow: refuse`` policy: an error that names every offending node."""
    listed = "; ".join(f"{n}: {why}" for n, why in sorted(nodes.items())[:8])
    more = f" (and {len(nodes) - 8} more)" if len(nodes) > 8 else ""
    raise ModelError(
        f"FP16 would overflow in {len(nodes)} node(s): {listed}{more}",
        hint="set quantize.fp16_overflow: keep_fp32, or quantize.high_precision: fp32",
    )


def to_fp16(model: onnx.ModelProto, keep_fp32: list[str], opset: int | None = None) -> onnx.ModelProto:
    """Convert float tensors to FP16 except in ``keep_fp32`` nodes; graph inputs/outputs keep their type."""
    import onnx
    from modelopt.onnx.autocast.convert import convert_to_mixed_precision

    from deploykit.quant.modelopt_guard import ort_patch_guard, quiet

    with tempfile.TemporaryDirectory(prefix="deploykit-fp16-") as tmp, ort_patch_guard(), quiet():
        path = Path(tmp) / "model.onnx"
        onnx.save_model(model, str(path))
        try:
            converted = convert_to_mixed_precision(
                str(path),
                low_precision_type="fp16",
                nodes_to_exclude=[f"^{re.escape(n)}$" for n in keep_fp32],
                data_max=np.inf,
                init_max=np.inf,
                keep_io_types=True,
                opset=opset,
            )
        except Exception as e:  # AutoCast raises bare Exceptions
            first = first_line(e)
            raise ModelError(
                f"FP16 conversion failed: {first}",
                hint="set quantize.high_precision: fp32, or keep the node it names in FP32",
            ) from e
    forget_invented_dims(converted, model)
    return converted


def forget_invented_dims(converted: onnx.ModelProto, source: onnx.ModelProto) -> int:
    """Turn every dim name in ``converted``'s declarations that ``source`` never used into an unknown
    dim (in place); returns how many.

    AutoCast re-derives types by first writing the placeholder ``unk`` over every concrete dim of the
    intermediate and output declarations, and leaves it wherever inference cannot re-derive the dim.
    ONNX Runtime reads one dim name as one size: its memory planner then lets tensors of different
    sizes share a buffer. A DETR-style detector exported by dynamo (which declares every intermediate)
    kept 239 such dims and failed at ORT level extended with ``Shape mismatch attempting to re-use
    buffer {1,1,8} != {1,8,8}`` in a Mul node; the TorchScript graph declares few intermediates and
    passed. An unknown dim is what inference had anyway."""
    from deploykit.graph.proto import subgraphs

    def names(graph: onnx.GraphProto) -> set[str]:
        found = {
            d.dim_param
            for v in (*graph.input, *graph.value_info, *graph.output)
            for d in v.type.tensor_type.shape.dim
            if d.dim_param
        }
        for node in graph.node:
            for sub in subgraphs(node):
                found |= names(sub)
        return found

    known, cleared = names(source.graph), 0

    def clear(graph: onnx.GraphProto, top: bool) -> None:
        nonlocal cleared
        for v in (*(() if top else graph.input), *graph.value_info, *graph.output):
            for d in v.type.tensor_type.shape.dim:
                if d.dim_param and d.dim_param not in known:
                    d.Clear()
                    cleared += 1
        for node in graph.node:
            for sub in subgraphs(node):
                clear(sub, False)

    clear(converted.graph, True)
    return cleared
