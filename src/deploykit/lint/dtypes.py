"""Element types TensorRT treats differently from ONNX.

deploykit builds strongly typed networks on every version (TensorRT 11 builds nothing else), so a
tensor's type is what the graph says: no builder flag lowers FP32 to FP16, no implicit INT8, and
these rules read the types as written:

* DOUBLE has no TensorRT type: the parser casts it down to FLOAT (clamping to +-FLT_MAX);
* UINT8 exists only as a network input or output (and inside Q/DQ, which :mod:`.qdq` judges);
* INT8, FP8, INT4 and FP4 are quantized types: TensorRT has them only through Q/DQ;
* INT64 constants beyond the INT32 range, read by an operator the table lists without INT64, are narrowed;
* a strongly typed network converts no type implicitly: ONNX's type constraints already make the inputs
  of nearly every operator agree, but ``Pow`` types its exponent apart from its base (an FP16 model
  exported by PyTorch often raises to an FP32 exponent), and the parser hands both to one elementwise
  layer, which a weakly typed build reconciles with a warning and a strongly typed one refuses.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from deploykit.lint.findings import Issue
from deploykit.lint.tables import TYPE_NAMES, SupportTable
from deploykit.lint.view import GraphView

T = onnx.TensorProto
QUANTIZED = {T.INT8, T.FLOAT8E4M3FN, T.INT4, T.FLOAT4E2M1}
QDQ = ("QuantizeLinear", "DequantizeLinear")
INT32_MAX = 2**31 - 1


def check(view: GraphView, table: SupportTable) -> Iterator[Issue]:
    yield from _double(view)
    yield from _uint8(view, table)
    yield from _quantized(view, table)
    yield from _int64(view, table)
    yield from _strong_pow(view)
    note = _fp32_note(view, table)
    if note:
        view.notes.append(note)


def _unsupported_neighbour(view: GraphView, table: SupportTable, tensor: str) -> bool:
    """Whether an operator the table refuses writes or reads the tensor: that finding covers this one."""

    def refused(op: str) -> bool:
        support = table.ops.get(op)
        return support is not None and not support.supported

    node = view.producer.get(tensor)
    return (node is not None and refused(node.op_type)) or any(refused(r.op_type) for r in view.readers(tensor))


def _producer_label(view: GraphView, name: str) -> tuple[str, str]:
    node = view.producer.get(name)
    if node is None:
        return name, ""
    return view.name_of(node), node.op_type


def _double(view: GraphView) -> Iterator[Issue]:
    weights = [t.name for t in view.graph.initializer if t.data_type == T.DOUBLE]
    if weights:
        yield Issue(
            "type.double",
            "warning",
            weights[0],
            "",
            f"{len(weights)} DOUBLE initializer(s) "
            f"({', '.join(weights[:3])}{', ...' if len(weights) > 3 else ''}): TensorRT casts them to "
            "FLOAT, clamping to +-FLT_MAX",
            "store them as FLOAT (surgery, or re-export in float32)",
        )
    for name in [*view.inputs, *view.outputs]:
        if view.dtype(name) == T.DOUBLE:
            yield Issue(
                "type.double",
                "warning",
                name,
                "",
                "a DOUBLE network input/output: TensorRT makes it FLOAT, "
                "so the engine's I/O type differs from the ONNX",
                "export it as float32",
            )
    for i, node in enumerate(view.graph.node):
        if (
            node.op_type != "Constant"
            and any(view.dtype(o) == T.DOUBLE for o in node.output if o)
            and not set(node.output) & set(view.outputs)
        ):
            yield Issue(
                "type.double",
                "warning",
                view.label(node, i),
                node.op_type,
                "computes in DOUBLE: TensorRT computes it in FLOAT",
                "cast to float32 instead of float64",
            )


def _qdq_tensor(view: GraphView, name: str) -> bool:
    """A tensor that a Q writes, or that only Q/DQ read (data, scale or zero point): :mod:`.qdq` judges it."""
    node = view.producer.get(name)
    readers = view.readers(name)
    return (node is not None and node.op_type == "QuantizeLinear") or (
        bool(readers) and all(r.op_type in QDQ for r in readers)
    )


def _uint8(view: GraphView, table: SupportTable) -> Iterator[Issue]:
    io = set(view.inputs) | set(view.outputs)
    for name, dtype in view.types.items():
        if dtype != T.UINT8 or name in io or _qdq_tensor(view, name) or _unsupported_neighbour(view, table, name):
            continue
        readers = view.readers(name)
        if readers and all(r.op_type == "Cast" for r in readers) and name in view.initializers:
            continue  # a UINT8 constant cast at once: the parser imports it
        label, op = _producer_label(view, name)
        yield Issue(
            "type.uint8",
            "error",
            label,
            op,
            f"tensor {name!r} is UINT8 inside the network: TensorRT has UINT8 only as a network input or output",
            "compute it in INT32 or a float type (cast it)",
        )


def _quantized(view: GraphView, table: SupportTable) -> Iterator[Issue]:
    for name, dtype in view.types.items():
        if dtype not in QUANTIZED or _qdq_tensor(view, name) or _unsupported_neighbour(view, table, name):
            continue
        readers = [r.op_type for r in view.readers(name)]
        label, op = _producer_label(view, name)
        what = (
            "an input"
            if name in view.inputs
            else "an output"
            if name in view.outputs
            else f"read by {', '.join(sorted(set(readers)))}"
            if readers
            else "unused"
        )
        yield Issue(
            "type.quantized",
            "error",
            label,
            op,
            f"tensor {name!r} is {TYPE_NAMES[dtype]} ({what}): TensorRT has {TYPE_NAMES[dtype]} only through "
            "quantization (a DequantizeLinear reading it, or a QuantizeLinear writing it)",
            "dequantize it with DequantizeLinear (scale, zero point 0) instead of Cast, or keep it float",
        )


def _int64(view: GraphView, table: SupportTable) -> Iterator[Issue]:
    for t in view.graph.initializer:
        if t.data_type != T.INT64:
            continue
        value = view.value(t.name)
        if value is None or not value.size or not (abs(value.astype("float64")).max() > INT32_MAX):
            continue
        for reader in view.readers(t.name):
            support = table.ops.get(reader.op_type)
            if support is not None and support.types and "INT64" not in support.types:
                yield Issue(
                    "type.int64",
                    "warning",
                    t.name,
                    reader.op_type,
                    f"INT64 constant {t.name!r} holds values beyond INT32 and {reader.op_type} is listed "
                    "without INT64: TensorRT narrows it to INT32",
                    "keep the values within INT32",
                )


def _strong_pow(view: GraphView) -> Iterator[Issue]:
    """A ``Pow`` whose exponent's type differs from its base's (every version: deploykit builds strongly
    typed networks on 10.x too, see :func:`deploykit.backends.trt_compat.network_creation_flags`)."""
    for scoped in view.main_nodes():
        node = scoped.node
        if node.op_type != "Pow" or len(node.input) < 2:
            continue
        base, exponent = view.dtype(node.input[0]), view.dtype(node.input[1])
        if base is None or exponent is None or base == exponent:
            continue
        names = [TYPE_NAMES.get(t, str(t)) for t in (base, exponent)]
        yield Issue(
            "type.strong",
            "error",
            scoped.label,
            node.op_type,
            f"base {node.input[0]!r} is {names[0]} and exponent {node.input[1]!r} is {names[1]}: the parser "
            "makes one elementwise layer of both, and a strongly typed network converts neither",
            f"give the exponent the base's type ({names[0]}): a Cast before the Pow, or store the constant "
            "exponent in that type",
        )


def _fp32_note(view: GraphView, table: SupportTable) -> str:
    # A note, not a rule: nothing here is refused. An FP32-only graph builds on every version; what
    # changes in 11 is that no builder flag (FP16/INT8, removed there) can lower its precision, so a
    # user expecting `trtexec --fp16`-style speed-ups learns here that the precision must be in the
    # graph. On 10.13 those flags still exist for builds outside deploykit, so the note is for 11 only.
    # Type mixes a strongly typed network does refuse are rules (``type.strong``), on every version.
    low = {T.FLOAT16, T.BFLOAT16} | QUANTIZED
    if table.major < 11 or any(t in low for t in view.types.values()):
        return ""
    return (
        f"TensorRT {table.version} builds strongly typed networks only: this graph has no FP16, BF16 or "
        "quantized "
        "tensor, so it runs in FP32 (no builder flag lowers it); quantize.precision fp16/int8/fp8 writes the "
        "precision into the graph"
    )
