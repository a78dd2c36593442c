"""The float tensor behind a QuantizeLinear: what a node raised out of a quantized region reads instead.

Both flavours' rewiring uses it (:func:`deploykit.quant.ort_flavour.read_float_inputs` for the nodes
ORT was told to exclude, :mod:`deploykit.quant.patch` for the groups a precision patch raises to a
float precision). ORT drops a Relu/Clip in front of a uint8 QuantizeLinear (the zero point clamps)
and hands its output name to the producer, so the float tensor may hold pre-activation values; the
activation is then copied back from the FP32 reference graph, with the constants it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx


def float_source(
    tensor: str, original: str, made_by: dict[str, onnx.NodeProto], made_in_reference: dict[str, onnx.NodeProto]
) -> tuple[str, onnx.NodeProto | None] | None:
    """What gives the FP32 value of ``original`` from the float ``tensor`` a QuantizeLinear reads:
    the tensor itself, or the tensor through a copy of an activation ORT fused into the quantizer."""
    import onnx

    got, want = made_by.get(tensor), made_in_reference.get(original)
    if got is None or want is None:
        return (tensor, None) if got is None and want is None and tensor == original else None  # graph inputs
    if got.op_type == want.op_type:
        return tensor, None
    before = made_in_reference.get(want.input[0]) if want.input else None
    if want.op_type in ("Relu", "Clip") and before is not None and before.op_type == got.op_type:
        copy = onnx.NodeProto()
        copy.CopyFrom(want)  # Relu/Clip of the pre-activation values restores them; Clip keeps its bounds
        copy.input[0], copy.output[0], copy.name = tensor, f"{original}__float", f"{want.name}__float"
        return copy.output[0], copy
    return None


def bring_initializers(node: onnx.NodeProto, model: onnx.ModelProto, reference: onnx.ModelProto) -> bool:
    """Copy the restored node's constant inputs (Clip bounds) that ORT dropped with it; False if one
    is neither in ``model`` nor an initializer of ``reference``."""
    if not any(node.input[1:]):  # a Relu: nothing to bring (and no pass over the graph: patches restore many)
        return True
    have = {t.name for t in model.graph.initializer} | {i.name for i in model.graph.input}
    have |= {o for n in model.graph.node for o in n.output}
    spare = {t.name: t for t in reference.graph.initializer}
    missing = [name for name in node.input[1:] if name and name not in have]
    if any(name not in spare for name in missing):
        return False
    model.graph.initializer.extend(spare[name] for name in missing)
    return True


__all__ = ["bring_initializers", "float_source"]
