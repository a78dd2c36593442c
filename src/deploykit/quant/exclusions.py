"""Which nodes stay out of quantization, and why (each why a :class:`~deploykit.quant.reasons.Kept` reason).

The quantize stage collects them in one ``dict`` (node name -> reason), the first reason given for
a node kept: the configuration's (:func:`configured`), then after calibration the rules that read
the calibrated ranges and the flavour's own (:func:`after_calibration`), then the nodes the
runtime's integer kernels compute wrong on this CPU (:mod:`deploykit.quant.kernel_check`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from deploykit.errors import ModelError
from deploykit.graph import proto
from deploykit.quant import prepare as g
from deploykit.quant.reasons import Kept, Reason

if TYPE_CHECKING:
    import onnx

    from deploykit.config import QuantizeConfig
    from deploykit.quant.flavours import QuantFlavour
    from deploykit.quant.ranges import Calibration, TensorRange

COMPUTE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
MIXED_RANGE_RATIO = 32.0  # a Concat's inputs this far apart in range: the narrower gets < 8 of 255 levels


def keep_first(into: dict[str, Reason], found: Mapping[str, Reason]) -> dict[str, Reason]:
    """Add ``found`` to ``into`` where a node has no reason yet (the first reason given stands)."""
    into.update({k: v for k, v in found.items() if k not in into})
    return into


def configured(model: onnx.ModelProto, cfg: QuantizeConfig, where: str, notes: list[str]) -> dict[str, Reason]:
    """The configuration's exclusions (names, op types, patterns, ``high_precision_ops``); a pattern
    that matches no node is noted."""
    excluded = resolve(model, cfg.exclude_nodes, cfg.exclude_op_types, cfg.exclude_patterns, where)
    keep_first(
        excluded,
        {n.name: Kept.HIGH_PRECISION_OP(op=n.op_type) for n in model.graph.node if n.op_type in cfg.high_precision_ops},
    )
    notes += [f"exclude_patterns {p!r} matches no node" for p in unmatched_patterns(model, cfg.exclude_patterns)]
    return excluded


def resolve(
    model: onnx.ModelProto,
    names: tuple[str, ...],
    op_types: tuple[str, ...],
    patterns: tuple[str, ...],
    where: str,
) -> dict[str, Reason]:
    """Node name -> why it is excluded; a name the graph lacks is an error that lists close matches."""
    nodes = {n.name: n for n in model.graph.node}
    out: dict[str, Reason] = {}
    for name in names:
        if name not in nodes:
            close = difflib.get_close_matches(name, list(nodes), n=3)
            raise ModelError(
                f"{where}: quantize.exclude_nodes names {name!r}, which the model does not have"
                + (f" (close: {', '.join(close)})" if close else ""),
                hint="`deploykit inspect` lists node names; exclude_patterns takes regular expressions",
            )
        out[name] = Kept.BY_NAME()
    for node in model.graph.node:
        if node.op_type in op_types:
            out.setdefault(node.name, Kept.BY_OP_TYPE(op=node.op_type))
        hit = next((p for p in patterns if re.search(p, node.name)), None)
        if hit is not None:
            out.setdefault(node.name, Kept.BY_PATTERN(pattern=hit))
    return out


def unmatched_patterns(model: onnx.ModelProto, patterns: tuple[str, ...]) -> list[str]:
    return [p for p in patterns if not any(re.search(p, n.name) for n in model.graph.node)]


def still_present(model: onnx.ModelProto, excluded: dict[str, Reason], notes: list[str]) -> dict[str, Reason]:
    """The exclusions whose nodes the flavour's pre-processing left in the graph (the rest are noted)."""
    names = {n.name for n in model.graph.node}
    gone = sorted(set(excluded) - names)
    if gone:
        notes.append(f"excluded node(s) {', '.join(gone)} fused away by ONNX Runtime's pre-processing")
    return {k: v for k, v in excluded.items() if k in names}


def after_calibration(
    model: onnx.ModelProto, calibration: Calibration, cfg: QuantizeConfig, flavour: QuantFlavour
) -> dict[str, Reason]:
    """The rules that read what calibration saw, then the flavour's, then ``quantize.bounded: exclude``."""
    out = masking_nodes(model, calibration.infinite)
    keep_first(out, mixed_range_joins(model, calibration.sets["max"]))  # min/max: the same in every set
    keep_first(out, flavour.exclusions(model, cfg.precision))
    if cfg.bounded == "exclude":
        keep_first(out, bounded_readers(model))
    return out


def bounded_readers(model: onnx.ModelProto) -> dict[str, Reason]:
    readers = proto.consumers(model)
    return {n.name: Kept.BOUNDED_READER(tensor=t) for t in sorted(g.bounded_tensors(model)) for n in readers.get(t, [])}


def masking_nodes(model: onnx.ModelProto, infinite: frozenset[str]) -> dict[str, Reason]:
    """Nodes that write or read a tensor holding ±inf on the calibration data: an attention mask
    (``masked_fill(-inf)`` before a Softmax). They stay unquantized: a quantized -inf is a finite
    number, and the masked token would get weight."""
    made_by, readers = proto.producers(model), proto.consumers(model)
    out: dict[str, Reason] = {}
    for tensor in sorted(infinite):
        for node in [made_by.get(tensor), *readers.get(tensor, [])]:
            if node is not None and node.name not in out:
                out[node.name] = Kept.MASKING(tensor=tensor)
    return out


def mixed_range_joins(model: onnx.ModelProto, ranges: dict[str, TensorRange]) -> dict[str, Reason]:
    """Concat nodes joining tensors whose observed ranges differ more than :data:`MIXED_RANGE_RATIO`
    times: one 8-bit scale for the joined tensor leaves the narrower input a few levels. The packed
    output of a YOLO-style detector (box coordinates in pixels beside class scores in [0, 1]) is the
    common case: quantized there, every score rounds to 0 (confident-box recall 0.0 measured on a
    real YOLOv8n, with ONNX Runtime's quantize_static too). Each input keeps its own scale."""
    out: dict[str, Reason] = {}
    for node in model.graph.node:
        spans = {t: ranges[t].max - ranges[t].min for t in node.input if node.op_type == "Concat" and t in ranges}
        spans = {t: v for t, v in spans.items() if v > 0}
        if len(spans) < 2:
            continue
        wide, narrow = max(spans, key=spans.__getitem__), min(spans, key=spans.__getitem__)
        ratio = spans[wide] / spans[narrow]
        if ratio > MIXED_RANGE_RATIO:
            out[node.name] = Kept.MIXED_RANGES(
                narrow=narrow, narrow_span=spans[narrow], wide=wide, wide_span=spans[wide], ratio=ratio
            )
    return out


def output_tail(model: onnx.ModelProto) -> dict[str, Reason]:
    """Nodes after the last compute op: every consumer of what they write is another such node or a
    graph output. Q/DQ there buys no speed (nothing after them runs in INT8) and rounds the outputs
    themselves: a detector's score Sigmoid and box decoding (a real YOLOv8n's confident-box recall
    0.79 with its tail quantized, 0.93 with it in float), a probability map's Sigmoid."""
    outputs = {o.name for o in model.graph.output}
    readers = proto.consumers(model)
    tail: dict[str, Reason] = {}
    for node in reversed(model.graph.node):  # topological order: a node's readers are decided first
        if node.op_type in COMPUTE_OPS or not node.output:
            continue
        if all(t in outputs or (readers.get(t) and all(r.name in tail for r in readers[t])) for t in node.output if t):
            tail[node.name] = Kept.OUTPUT_TAIL()
    return tail
