"""Write deploykit's calibrated ranges into the activation scales of a symmetric Q/DQ graph.

ModelOpt places the Q/DQ nodes (what TensorRT fuses) after calibrating on a single replayed
sample; this sets every activation QuantizeLinear (and the DequantizeLinear nodes it feeds) to
``amax / qmax`` from the streamed ranges: 127 for INT8, 448 for FP8 E4M3. Weight quantizers are
left alone (their scales come from the weights). Scales shared by several quantizers (ModelOpt's
concat elimination) get the largest amax of the group, so no input saturates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from deploykit.errors import InternalError
from deploykit.quant.ranges import TensorRange

if TYPE_CHECKING:
    import onnx

QMAX = {3: 127.0, 17: 448.0, 22: 7.0}  # INT8, FLOAT8E4M3FN, INT4 (by zero-point element type)
FP16_MIN_NORMAL = 2.0**-14
RENAMED = "_QuantizeLinear_Input"


def activation_quantizers(model: onnx.ModelProto) -> list[tuple[onnx.NodeProto, str]]:
    """(QuantizeLinear node, the FP32 tensor it quantizes) for every activation quantizer.

    The quantized tensor is traced back through Cast nodes, which FP16 conversion inserts.
    """
    inits = {i.name for i in model.graph.initializer}
    produced = {o: n for n in model.graph.node for o in n.output}
    out = []
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in inits:
            continue
        source = node.input[0]
        while source in produced and produced[source].op_type == "Cast":
            source = produced[source].input[0]
        out.append((node, source))
    return out


def set_activation_scales(
    model: onnx.ModelProto, ranges: dict[str, TensorRange], min_scale: float = 1e-30
) -> dict[str, float]:
    """Set activation scales in place from ``ranges``; return scale name -> scale written.

    Args:
        model: a Q/DQ graph with symmetric (zero point 0) INT8 or FP8 activation quantizers.
        ranges: calibrated ranges by FP32 tensor name.
        min_scale: the smallest scale written (FP16 scales must stay above FP16's normal range).
    """
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    dq_by_input: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear":
            dq_by_input.setdefault(node.input[0], []).append(node)
    wanted: dict[str, float] = {}
    for q, source in activation_quantizers(model):
        if source not in ranges and source.endswith(RENAMED):
            source = source[: -len(RENAMED)]  # ORT keeps a graph output's name for the DQ after it
        if source not in ranges:
            raise InternalError(
                f"quantizer {q.name!r} quantizes {source!r}, which calibration did not see",
                hint="report this model: the quantizer renamed a tensor",
            )
        qmax = _qmax(q, inits)
        scale = max(ranges[source].amax / qmax, min_scale)
        for name in [q.input[1], *(d.input[1] for d in dq_by_input.get(q.output[0], []))]:
            wanted[name] = max(wanted.get(name, 0.0), scale)
    for name, scale in wanted.items():
        old = inits[name]
        dtype = numpy_helper.to_array(old).dtype
        old.CopyFrom(numpy_helper.from_array(np.full(tuple(old.dims), scale, dtype=dtype), name))
    return wanted


def _qmax(q: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> float:
    zp = inits.get(q.input[2]) if len(q.input) > 2 else None
    dtype = zp.data_type if zp is not None else 3
    if dtype not in QMAX:
        raise InternalError(f"quantizer {q.name!r} has zero-point type {dtype}; expected INT8, FP8 or INT4")
    return QMAX[dtype]
