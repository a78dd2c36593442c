"""Declared output shapes and types that disagree with what shape inference derives.

Exporters often write a graph output's declaration by hand or from stale metadata: a public
PP-OCRv5-style recognizer declares its Softmax output as ``[]`` (a scalar) where inference derives a
rank-3 tensor. Strict shape inference then refuses the whole model, though every runtime computes
it. :func:`disagreements` names each such declaration; :func:`repair` replaces it with the inferred
one (an output) or drops it (a ``value_info`` entry, which is only a cache of inference). A
declaration inference cannot improve on (it infers nothing) is left alone, and declared dim names
are kept where inference only has a number or another name.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx


@dataclass(frozen=True)
class Disagreement:
    """One declaration that inference contradicts."""

    tensor: str
    where: str  # "output" | "value_info"
    declared: str  # e.g. "float32[]"
    inferred: str  # e.g. "float32[1,4,6]"

    def sentence(self) -> str:
        return f"{self.where} {self.tensor!r} is declared {self.declared}, inference derives {self.inferred}"


def disagreements(model: onnx.ModelProto) -> list[Disagreement]:
    """Every graph output and ``value_info`` declaration of the main graph that inference contradicts."""
    inferred = _inferred(model)
    out = []
    for where, infos in (("output", model.graph.output), ("value_info", model.graph.value_info)):
        for vi in infos:
            got = inferred.get(vi.name)
            if got is not None and _contradicts(vi.type, got):
                out.append(Disagreement(vi.name, where, _text(vi.type), _text(got)))
    return out


def repair(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[Disagreement]]:
    """A copy of ``model`` whose contradicted declarations follow inference, and what was changed
    (``model`` itself when nothing was)."""
    found = disagreements(model)
    if not found:
        return model, []
    inferred = _inferred(model)
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    outputs = {d.tensor for d in found if d.where == "output"}
    for vi in fixed.graph.output:
        if vi.name in outputs:
            vi.type.CopyFrom(_merged(vi.type, inferred[vi.name]))
    stale = {d.tensor for d in found if d.where == "value_info"}
    kept = [vi for vi in fixed.graph.value_info if vi.name not in stale]
    del fixed.graph.value_info[:]
    fixed.graph.value_info.extend(kept)
    return fixed, found


def _merged(declared: onnx.TypeProto, inferred: onnx.TypeProto) -> onnx.TypeProto:
    """The inferred type, keeping a declared dim name where inference has no number for that dim."""
    out = onnx.TypeProto()
    out.CopyFrom(inferred)
    d, o = declared.tensor_type, out.tensor_type
    if d.HasField("shape") and len(d.shape.dim) == len(o.shape.dim):
        for a, b in zip(d.shape.dim, o.shape.dim, strict=True):
            if a.dim_param and not b.HasField("dim_value"):
                b.dim_param = a.dim_param
    return out


def _inferred(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """Tensor name -> the type inference derives with no output or value_info declaration to lean on."""
    from deploykit.graph.files import PROTO_LIMIT

    if model.ByteSize() >= PROTO_LIMIT:
        return {}  # inference runs on a file then; a declaration is left as it is
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    del bare.graph.value_info[:]
    for vi in bare.graph.output:
        vi.ClearField("type")  # inference fills what the declaration would otherwise override
    try:
        done = onnx.shape_inference.infer_shapes(bare, strict_mode=False)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, ValueError):
        return {}  # the checker that runs next says what is wrong with the graph itself
    return {
        vi.name: vi.type
        for vi in [*done.graph.value_info, *done.graph.output]
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
    }


def _contradicts(declared: onnx.TypeProto, inferred: onnx.TypeProto) -> bool:
    if not declared.HasField("tensor_type"):
        return False
    d, i = declared.tensor_type, inferred.tensor_type
    if d.elem_type and i.elem_type and d.elem_type != i.elem_type:
        return True
    if not d.HasField("shape") or not i.HasField("shape"):
        return False
    if len(d.shape.dim) != len(i.shape.dim):
        return True
    return any(
        a.HasField("dim_value") and b.HasField("dim_value") and a.dim_value != b.dim_value
        for a, b in zip(d.shape.dim, i.shape.dim, strict=True)
    )


def _text(tp: onnx.TypeProto) -> str:
    t = tp.tensor_type
    try:
        dtype = onnx.TensorProto.DataType.Name(t.elem_type).lower() if t.elem_type else "?"
    except ValueError:
        dtype = str(t.elem_type)
    if not t.HasField("shape"):
        return f"{dtype} (no shape)"
    dims = [str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim]
    return f"{dtype}[{','.join(dims)}]"


__all__ = ["Disagreement", "disagreements", "repair"]
