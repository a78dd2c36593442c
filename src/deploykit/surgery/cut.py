"""cut: make named tensors the graph's outputs and drop what only served the old outputs.

The usual use is cutting off post-processing (NMS, top-k, decoding) that TensorRT cannot run or
that the application does better: ``cut: {outputs: [boxes_raw, scores_raw]}``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import onnx

from deploykit.graph.proto import copy_model, remove_unused
from deploykit.surgery.base import Pass, PassConfigError, PassError, PassResult


@dataclass(frozen=True)
class CutParams:
    outputs: tuple[str, ...] = ()  # tensors that become the outputs, in this order
    keep_outputs: bool = False  # keep the old outputs too (add, don't replace)
    remove_unused_inputs: bool = False  # drop graph inputs nothing reads any more (changes the interface)


class Cut(Pass):
    name = "cut"
    description = "new outputs at named tensors; drop the nodes that only fed the old outputs"
    Params = CutParams
    shorthand = "outputs"

    def requires(self, model: onnx.ModelProto) -> None:
        if not self.params.outputs:
            raise PassConfigError("cut: no outputs given", hint="e.g. cut: {outputs: [boxes_raw, scores_raw]}")
        check_tensors(self.name, model, self.params.outputs)

    def run(self, model: onnx.ModelProto) -> PassResult:
        old = [o.name for o in model.graph.output]
        names = list(dict.fromkeys([*(old if self.params.keep_outputs else []), *self.params.outputs]))
        if names == old:
            return PassResult(model, False, "these tensors already are the outputs")
        out = copy_model(model)
        infos = typed_value_infos(model, names)
        del out.graph.output[:]
        out.graph.output.extend(infos[n] for n in names)
        dropped = remove_unused(out.graph)
        removed_inputs = _drop_unused_inputs(out.graph) if self.params.remove_unused_inputs else []
        return PassResult(
            out, True, details={"outputs": names, "nodes_dropped": dropped, "inputs_removed": removed_inputs}
        )


def check_tensors(pass_name: str, model: onnx.ModelProto, names: tuple[str, ...]) -> None:
    """Every name is a tensor of the main graph; else a config error listing close matches."""
    g = model.graph
    known = {i.name for i in g.input} | {o for n in g.node for o in n.output if o} | {t.name for t in g.initializer}
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            also = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise PassConfigError(
                f"{pass_name}: the graph has no tensor {name!r}{also}",
                hint="`deploykit inspect MODEL --json` lists the tensors; names are case-sensitive",
            )


def typed_value_infos(model: onnx.ModelProto, names: list[str]) -> dict[str, onnx.ValueInfoProto]:
    """ValueInfos (type and shape) for tensors, from the graph's declarations or shape inference."""
    from onnx import helper

    g = model.graph
    infos = {vi.name: vi for vi in [*g.input, *g.output, *g.value_info]}
    if any(n not in infos for n in names):
        try:
            inferred = onnx.shape_inference.infer_shapes(model).graph
            infos = {vi.name: vi for vi in [*inferred.value_info, *inferred.input, *inferred.output]} | infos
        except Exception:  # fall through: tensors inference cannot type are reported below
            pass
    for t in g.initializer:
        infos.setdefault(t.name, helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    out = {}
    for n in names:
        vi = onnx.ValueInfoProto()
        vi.name = n
        if n in infos:
            vi.CopyFrom(infos[n])
        out[n] = vi
    unknown = [n for n, vi in out.items() if not vi.type.tensor_type.HasField("shape")]
    if unknown:
        _ranks_by_running(model, {n: out[n] for n in unknown})
    return out


def _ranks_by_running(model: onnx.ModelProto, infos: dict[str, onnx.ValueInfoProto]) -> None:
    """Type tensors inference could not (a graph input or output needs at least a rank) by running the graph.

    A Reshape to a computed shape hides the rank from ONNX's inference until ``sanitize`` folds it;
    one ONNX Runtime run on random inputs tells. Dims stay unknown: only the rank is learnt.
    """
    import numpy as np
    from onnx import helper

    from deploykit.graph.proto import real_inputs
    from deploykit.surgery import ortcheck

    rng = np.random.default_rng(0)
    feeds = {vi.name: ortcheck.random_value(vi, rng) for vi in real_inputs(model.graph)}
    try:
        values = ortcheck.run(model, feeds, list(infos))
    except Exception as e:
        raise PassError(
            f"cannot tell the type of {', '.join(map(repr, infos))}: shape inference does not know it "
            f"and ONNX Runtime cannot run the graph ({type(e).__name__})",
            hint="run sanitize first, or add value_info for the tensor",
        ) from e
    for name, vi in infos.items():
        value = np.asarray(values[name])
        vi.type.CopyFrom(
            helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(value.dtype), [None] * value.ndim)
        )


def _drop_unused_inputs(graph: onnx.GraphProto) -> list[str]:
    from deploykit.graph.proto import node_reads

    read = {name for n in graph.node for name in node_reads(n)} | {o.name for o in graph.output}
    gone = [vi for vi in graph.input if vi.name not in read]
    for vi in gone:
        graph.input.remove(vi)
    return [vi.name for vi in gone]
