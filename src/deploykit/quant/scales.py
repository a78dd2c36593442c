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


def without_activation_scales(model: onnx.ModelProto) -> str:
    """A digest of ``model`` with every activation scale's value left out: two graphs with the same
    digest differ at most in those scales."""
    from deploykit.graph.proto import copy_model, digest_model

    blank = copy_model(model)
    inits = {i.name: i for i in blank.graph.initializer}
    for name in {n for names in _scales_by_tensor(blank).values() for n in names}:
        inits[name].ClearField("raw_data")
        inits[name].ClearField("float_data")
        inits[name].ClearField("int32_data")
    return digest_model(blank)


def copy_activation_scales(source: onnx.ModelProto, target: onnx.ModelProto) -> bool:
    """Write ``source``'s activation scales into ``target`` (the same quantizers, e.g. after FP16
    conversion) in place, each in ``target``'s element type as a conversion of ``source`` would
    write it (FP32 first, then the target's type); False, with ``target`` unchanged, where a quantized
    tensor of one has no quantizer in the other or one target scale would take two values."""
    from onnx import numpy_helper

    mine, theirs = _scales_by_tensor(source), _scales_by_tensor(target)
    if set(mine) != set(theirs):
        return False
    values = {i.name: i for i in source.graph.initializer}
    inits = {i.name: i for i in target.graph.initializer}
    wanted: dict[str, np.ndarray] = {}
    for tensor, names in theirs.items():
        found = [numpy_helper.to_array(values[n]).astype(np.float32) for n in mine[tensor]]
        if any(f.tobytes() != found[0].tobytes() for f in found):
            return False
        for name in names:
            converted = found[0].astype(numpy_helper.to_array(inits[name]).dtype)
            if name in wanted and wanted[name].tobytes() != converted.tobytes():
                return False
            wanted[name] = converted
    for name, value in wanted.items():
        inits[name].CopyFrom(numpy_helper.from_array(value.reshape(tuple(inits[name].dims)), name))
    return True


def _scales_by_tensor(model: onnx.ModelProto) -> dict[str, list[str]]:
    """Quantized FP32 tensor -> the scale initializers of its QuantizeLinear and the DQs after it."""
    dqs: dict[str, list[str]] = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear":
            dqs.setdefault(node.input[0], []).append(node.input[1])
    out: dict[str, list[str]] = {}
    for q, tensor in activation_quantizers(model):
        out.setdefault(tensor, []).extend([q.input[1], *dqs.get(q.output[0], [])])
    return out
