"""One candidate graph of a quantize job: Q/DQ placed by the job's flavour, its float rest finished.

The quantizer (ModelOpt or ORT's) runs once per exclusion set; later range sets rewrite the scales
of that graph (:meth:`deploykit.quant.flavours.QuantFlavour.place`), so choosing among range sets and
searching layer precisions cost one quantizer run each, not one per candidate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

    from deploykit.quant.quantize import Job
    from deploykit.quant.ranges import TensorRange
    from deploykit.quant.reasons import Reason


def build(
    job: Job,
    model: onnx.ModelProto,
    ranges: dict[str, TensorRange],
    excluded: dict[str, Reason],
    *,
    fp32: dict[str, Reason],
    sample: dict[str, Any],
) -> onnx.ModelProto:
    """One candidate: Q/DQ (or FP16) with ``excluded`` nodes left out of quantization."""
    cfg = job.cfg
    if cfg.precision == "fp16":
        from deploykit.quant.fp16 import to_fp16

        return to_fp16(model, sorted(fp32))
    out = qdq(job, model, ranges, sorted(excluded), sample)
    if job.correction_samples and cfg.precision != "int4":  # INT4 quantizes weights only: no bias to correct
        from deploykit.quant.bias import correct_biases

        out, job.corrected = correct_biases(out, model, job.correction_samples)
    return finished(job, out, fp32)


def finished(job: Job, graph: onnx.ModelProto, fp32: dict[str, Reason]) -> onnx.ModelProto:
    """The Q/DQ graph with its unquantized nodes in the flavour's high precision (tensorrt: FP16).

    The conversion does not depend on the activation scales (AutoCast runs with no value limits), and
    the range sets method ``auto`` races differ only there: a graph converted once serves every set,
    its scales rewritten (a conversion cost ViT-S about 12 s a set)."""
    from deploykit.graph.proto import copy_model
    from deploykit.quant.scales import copy_activation_scales, without_activation_scales

    keep = sorted(fp32)
    if not job.target.fp16_rest(job.cfg) or job.cfg.precision not in ("int8", "fp8"):
        return job.target.finish(graph, keep, job.cfg)
    key = (without_activation_scales(graph), tuple(keep))
    converted = job.finishes.get(key)
    if converted is not None:
        out = copy_model(converted)
        if copy_activation_scales(graph, out):
            return out
    out = job.target.finish(graph, keep, job.cfg)
    job.finishes[key] = copy_model(out)  # the caller may edit what it gets
    return out


def qdq(
    job: Job, model: onnx.ModelProto, ranges: dict[str, TensorRange], names: list[str], sample: dict[str, Any]
) -> onnx.ModelProto:
    """The Q/DQ graph (FP32 high precision) with ``ranges`` in its activation scales, ``names`` excluded."""
    key = (id(model), tuple(names))
    out, placed = job.target.place(model, ranges, names, sample, job.cfg, job.reduce_range, job.placements.get(key))
    if placed is not None:
        job.placements.setdefault(key, placed)
    return out
