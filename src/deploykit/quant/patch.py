"""A precision patch: which layer groups of a quantized graph run in which precision, applied as edits.

The quantizer writes one *base* graph (every group at the stage's precision, the calibrated ranges in
its scales). A patch maps group names (:mod:`deploykit.quant.groups`) to a higher precision, and
:func:`apply_patch` rewrites only those groups, reusing the base graph's ranges:

* ``fp16`` / ``fp32`` (where the base runs its float rest in that precision): the group reads float
  tensors past its Q/DQ pairs, and its weights come back from the FP32 graph the base was quantized
  from (ONNX Runtime's quantizer stores weights as integers, so the float values are not in the base);
* ``fp32`` in a graph whose float rest is FP16: as above, then the group computes in FP32 between
  Casts (FP16 in, FP16 out), its constants widened;
* ``fp8`` (tensorrt flavour, INT8 base): the group's Q/DQ pairs become FLOAT8E4M3FN with the same
  range (scale x 127/448), as ModelOpt's FP8 mode converts them.

Q/DQ pairs nothing reads any more are removed. The edits are deterministic (names derive from the
edited nodes, order follows the graph), so applying the same patch to the same base gives the same
bytes: the patch in ``precision.json`` is reviewable, and ``quantize.layer_precisions`` replays it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from deploykit.errors import ConfigError
from deploykit.graph.proto import copy_model
from deploykit.quant.groups import Group

if TYPE_CHECKING:
    import onnx

    from deploykit.graph.files import Held

ORDER = ("int4", "int8", "fp8", "fp16", "fp32")  # cheapest first
_FLOAT, _FLOAT16, _FLOAT8 = 1, 10, 17
_INT8_QMAX, _FP8_QMAX = 127.0, 448.0
# A Q/DQ pair and the precision Casts around it: what a switch's false side computes, what _drop_unread removes
_PAIR_OPS = ("Cast", "DequantizeLinear", "QuantizeLinear")


def check_patch(patch: Mapping[str, str], groups: Mapping[str, Group], steps: tuple[str, ...], where: str) -> None:
    """A configured patch must name groups the graph has, at precisions its flavour offers."""
    import difflib

    for name, precision in sorted(patch.items()):
        if name not in groups:
            close = difflib.get_close_matches(name, list(groups), n=3)
            raise ConfigError(
                f"{where}: quantize.layer_precisions names {name!r}, which is not a layer group of the "
                "quantized graph" + (f" (close: {', '.join(close)})" if close else ""),
                hint="groups are named after their first node; precision.json lists them",
            )
        if precision not in steps:
            raise ConfigError(
                f"{where}: quantize.layer_precisions.{name} is {precision!r}; this flavour offers {', '.join(steps)}",
                hint="pick one of those",
            )


def apply_patch(
    base: onnx.ModelProto,
    reference: onnx.ModelProto,
    groups: Mapping[str, Group],
    patch: Mapping[str, str],
    base_precision: str,
    high_precision: str,
    held: Held | None = None,
) -> onnx.ModelProto:
    """A copy of ``base`` with each patched group in its precision; see the module docstring.

    Args:
        base: the quantized graph, every group at ``base_precision``.
        reference: the FP32 graph ``base`` was quantized from (same node names).
        groups: the base graph's groups by name.
        patch: group name -> precision (``ORDER``); groups left out keep the base precision.
        base_precision: the stage's precision (int8, fp8, int4).
        high_precision: what the base's float rest runs in (fp16 or fp32).
        held: ``reference``'s weights as a :class:`~deploykit.graph.files.Held` set: restored FP32
            weights are references to it (for sessions only; ``fill_held`` gives the same bytes as none).
    """
    model = copy_model(base)
    order = {name: i for i, name in enumerate(groups)}
    edits = [(groups[name], p) for name, p in sorted(patch.items(), key=lambda kv: order[kv[0]]) if p != base_precision]
    if not edits:
        return model
    wide = [g for g, p in edits if p == "fp32" and high_precision == "fp16"]
    types = _types(model) if wide else {}
    fp8 = {n for g, p in edits if p == "fp8" for n in g.nodes}
    if fp8:
        _to_fp8(model, fp8)
    floats = {n for g, p in edits if p != "fp8" for n in g.nodes}
    if floats:
        _to_float(model, reference, floats, held=held)
    for group in wide:
        _to_fp32(model, group, types)
    _drop_unread(model)
    return model


def switchable(
    base: onnx.ModelProto, reference: onnx.ModelProto, groups: Mapping[str, Group]
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """One graph for every FP32 patch of ``base`` (whose float rest is FP32), and group -> the name
    of its switch: a boolean scalar input; where it is true the group computes as :func:`apply_patch`
    raises it to FP32, where false as in the base. Each of the group's nodes reads its inputs
    through an If on the switch (:func:`_branches`: the Q/DQ pair runs on the false side only), so
    ONNX Runtime cannot fuse them into integer kernels: the graph computes the base as
    fake-quantized FP32, close to but not the deployed kernels. Screening ranks groups in one
    session this way, where building and opening one graph per patch cost 5x its inference on a
    549-group transformer."""
    from onnx import TensorProto, helper

    model = copy_model(base)
    taken = {t for n in model.graph.node for t in (*n.input, *n.output)} | {i.name for i in model.graph.input}
    prefix = "deploykit_switch_"
    while any(t.startswith(prefix) for t in taken):  # never a name the model already uses
        prefix = f"_{prefix}"
    names = {name: f"{prefix}{k}" for k, name in enumerate(groups)}
    switch = {node: names[name] for name, group in groups.items() for node in group.nodes}
    _to_float(model, reference, set(switch), switch)
    _branches(model, set(names.values()))
    _drop_unread(model)  # the weights' DequantizeLinear nodes (their values are constants now), the moved pairs
    model.graph.input.extend(helper.make_tensor_value_info(s, TensorProto.BOOL, []) for s in names.values())
    return model, names


def _branches(model: onnx.ModelProto, switches: set[str]) -> None:
    """Each Where on a switch becomes an If whose false branch computes the quantized side itself (a
    copy of the Q/DQ pair and Casts that wrote it; :func:`_drop_unread` then removes the originals
    nothing else reads): a Where computes both sides, and on ViT-S the Q/DQ pairs of groups switched
    to FP32, the Wheres' copies with them, made a screening run 2.5x the FP32 model's time, where
    the If branches make it 1.6x, with the same outputs bit for bit."""
    from onnx import helper

    made_by = {o: n for n in model.graph.node for o in n.output}
    inits = {t.name: t for t in model.graph.initializer}
    nodes = []
    for node in model.graph.node:
        if node.op_type != "Where" or node.input[0] not in switches:
            nodes.append(node)
            continue
        switch, on, off = node.input
        out = node.output[0]
        chain, tensor = [], off  # the false side's writers, last first: Casts, a DQ, the Q before it
        while (writer := made_by.get(tensor)) is not None and writer.op_type in _PAIR_OPS:
            chain.append(writer)
            tensor = "" if writer.op_type == "QuantizeLinear" else writer.input[0]
        elem = _elem_type(off, made_by, inits)
        names = {n.output[0]: f"{out}__off{k}" for k, n in enumerate(chain)}
        copies = []
        for n in reversed(chain):
            name = names[n.output[0]]
            copy = helper.make_node(n.op_type, [names.get(i, i) for i in n.input], [name], name=name)
            copy.attribute.extend(n.attribute)
            copies.append(copy)
        if not copies:  # a constant (a weight dequantized once) or a tensor no pair wrote
            copies = [helper.make_node("Identity", [off], [f"{out}__off"], name=f"{out}__off")]
        branch_out = copies[-1].output[0]
        on_graph = helper.make_graph(
            [helper.make_node("Identity", [on], [f"{out}__on"], name=f"{out}__on")],
            f"{out}__on",
            [],
            [_declared(f"{out}__on", elem)],
        )
        off_graph = helper.make_graph(copies, f"{out}__off", [], [_declared(branch_out, elem)])
        nodes.append(
            helper.make_node("If", [switch], [out], name=f"{out}__if", then_branch=on_graph, else_branch=off_graph)
        )
    del model.graph.node[:]
    model.graph.node.extend(nodes)


def _elem_type(tensor: str, made_by: dict[str, onnx.NodeProto], inits: dict[str, onnx.TensorProto]) -> int | None:
    """The element type of a Where's quantized side: a constant's, a Cast's target, a DQ's scale's."""
    if tensor in inits:
        return inits[tensor].data_type
    writer = made_by.get(tensor)
    if writer is not None and writer.op_type == "Cast":
        return next(a.i for a in writer.attribute if a.name == "to")
    if writer is not None and writer.op_type == "DequantizeLinear" and writer.input[1] in inits:
        return inits[writer.input[1]].data_type
    return None


def _declared(name: str, elem: int | None) -> onnx.ValueInfoProto:
    from onnx import helper

    return (
        helper.make_empty_tensor_value_info(name) if elem is None else helper.make_tensor_value_info(name, elem, None)
    )


# -- float: read past the Q/DQ pairs ------------------------------------------------------------------


def _chain(made_by: dict[str, onnx.NodeProto], tensor: str) -> tuple[list[onnx.NodeProto], onnx.NodeProto | None]:
    """The Casts between ``tensor`` and the DequantizeLinear that produces it, and that DQ (or None)."""
    casts, node = [], made_by.get(tensor)
    while node is not None and node.op_type == "Cast":
        casts.append(node)
        node = made_by.get(node.input[0])
    return casts, node if node is not None and node.op_type == "DequantizeLinear" else None


def _to_float(
    model: onnx.ModelProto,
    reference: onnx.ModelProto,
    members: set[str],
    switch: Mapping[str, str] | None = None,
    held: Held | None = None,
) -> None:
    """Rewire ``members`` (the nodes of the groups raised to a float precision) to read float values
    where they read dequantized ones; one pass over the graph. With ``switch`` (node -> a boolean
    graph input), a node reads the float value where its switch is true, the dequantized one where
    false (:func:`switchable`)."""
    from deploykit.graph.proto import producers
    from deploykit.quant.float_source import bring_initializers, float_source

    made_by, made_in_reference = producers(model), producers(reference)
    inits = {t.name: t for t in model.graph.initializer}
    ref_nodes = {n.name: n for n in reference.graph.node}
    ref_inits = {t.name: t for t in reference.graph.initializer}
    added: list[onnx.NodeProto] = []
    for node in (n for n in model.graph.node if n.name in members):
        original = ref_nodes.get(node.name)
        for i, tensor in enumerate(node.input):
            casts, dq = _chain(made_by, tensor)
            if dq is None or original is None or i >= len(original.input):
                continue
            if dq.input[0] in inits:  # integer weights (ONNX Runtime, INT4): the FP32 graph holds the floats
                value = ref_inits.get(original.input[i])
                if value is not None:
                    chosen = _float_initializer(model, inits, value, _type_after(dq, casts, inits), held)
                    quantized = (_dequantized(model, inits, dq) if switch is not None and not casts else None) or tensor
                    node.input[i] = _choose(node, quantized, chosen, switch, made_by, added)
                continue
            q = made_by.get(dq.input[0])
            if q is None or q.op_type != "QuantizeLinear":
                continue
            if q.input[0] in inits or made_by.get(q.input[0]) is None or made_by[q.input[0]].op_type == "Cast":
                source, activation = q.input[0], None  # a weight, a graph input, or a precision Cast's output
            else:
                found = float_source(q.input[0], original.input[i], made_by, made_in_reference)
                if found is None:
                    continue  # cannot tell which float tensor it read: it stays quantized
                source, activation = found
                if activation is not None and not bring_initializers(activation, model, reference):
                    continue
            if activation is not None and activation.output[0] not in made_by:
                added.append(activation)
                made_by[activation.output[0]] = activation
            chosen = _recast(source if activation is None else activation.output[0], casts, made_by, added)
            node.input[i] = _choose(node, tensor, chosen, switch, made_by, added)
    _insert(model, added)
    _unquantize_outputs(model, members, switch)


def _choose(
    node: onnx.NodeProto,
    quantized: str,
    chosen: str,
    switch: Mapping[str, str] | None,
    made_by: dict[str, onnx.NodeProto],
    added: list[onnx.NodeProto],
) -> str:
    """``chosen`` (the float value), or with a switch the Where that picks it or ``quantized``."""
    from onnx import helper

    if switch is None:
        return chosen
    name = f"{quantized}__if_{switch[node.name]}"
    if name not in made_by:
        where = helper.make_node("Where", [switch[node.name], chosen, quantized], [name], name=f"{name}__where")
        added.append(where)
        made_by[name] = where
    return name


def _unquantize_outputs(model: onnx.ModelProto, members: set[str], switch: Mapping[str, str] | None = None) -> None:
    """A model output the group computes through a Q/DQ pair (ONNX Runtime quantizes outputs) is
    written by the group itself: nothing downstream reads that pair but the user. With ``switch``,
    a Where after the pair picks the group's own value where the node's switch is true."""
    from onnx import helper

    outputs = {o.name for o in model.graph.output}
    nodes = list(model.graph.node)
    if not any(n.op_type == "DequantizeLinear" and n.output[0] in outputs for n in nodes):
        return  # no output is written through a Q/DQ pair (and mapping every reader cost a ViT-S patch 8 ms)
    readers: dict[str, list[int]] = {}
    for k, node in enumerate(nodes):
        for name in node.input:
            readers.setdefault(name, []).append(k)
    drop: set[int] = set()
    for node in nodes:
        if node.name not in members:
            continue
        for j, name in enumerate(node.output):
            q = next((k for k in readers.get(name, ()) if nodes[k].op_type == "QuantizeLinear"), None)
            after = readers.get(nodes[q].output[0], []) if q is not None else []
            if (
                len(after) != 1
                or nodes[after[0]].op_type != "DequantizeLinear"
                or nodes[after[0]].output[0] not in outputs
            ):
                continue
            final = nodes[after[0]].output[0]
            if switch is not None:
                nodes[after[0]].output[0] = f"{final}__quantized"
                nodes.append(
                    helper.make_node(
                        "Where", [switch[node.name], name, f"{final}__quantized"], [final], name=f"{final}__where"
                    )
                )
                continue
            node.output[j] = final
            for k in readers.get(name, ()):
                if k != q:
                    nodes[k].input[:] = [final if i == name else i for i in nodes[k].input]
            drop |= {q, after[0]}
    if drop or len(nodes) > len(model.graph.node):
        del model.graph.node[:]
        model.graph.node.extend(n for k, n in enumerate(nodes) if k not in drop)


def _type_after(dq: onnx.NodeProto, casts: list[onnx.NodeProto], inits: dict[str, onnx.TensorProto]) -> int:
    if casts:
        return next(a.i for a in casts[0].attribute if a.name == "to")
    scale = inits.get(dq.input[1])
    return scale.data_type if scale is not None else _FLOAT


def _float_initializer(
    model: onnx.ModelProto,
    inits: dict[str, onnx.TensorProto],
    value: onnx.TensorProto,
    dtype: int,
    held: Held | None = None,
) -> str:
    from onnx import numpy_helper

    name = f"{value.name}__float"
    if name in inits:
        return name
    inits[name] = model.graph.initializer.add()
    if value.data_type == dtype and value.HasField("raw_data"):  # one copy of the bytes, not four
        if held is None or not held.refer(inits[name], name, value.name):
            inits[name].CopyFrom(value)
            inits[name].name = name
    else:
        array = numpy_helper.to_array(value).astype(np.float16 if dtype == _FLOAT16 else np.float32)
        inits[name].CopyFrom(numpy_helper.from_array(array, name))
    return name


def _dequantized(model: onnx.ModelProto, inits: dict[str, onnx.TensorProto], dq: onnx.NodeProto) -> str | None:
    """An FP32 initializer holding what ``dq`` computes from its integer weight (a switch picks it
    without dequantizing the weight on every run; a third of a transformer's screening time), or
    None where the layout is not plain INT8/UINT8 with FP32 scales, per tensor or per axis."""
    from onnx import numpy_helper

    name = f"{dq.output[0]}__value"
    if name in inits:
        return name
    data, scale = inits[dq.input[0]], inits.get(dq.input[1])
    zero = inits.get(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
    attrs = {a.name: a.i for a in dq.attribute}
    if data.data_type not in (2, 3) or scale is None or scale.data_type != _FLOAT or "block_size" in attrs:
        return None
    values = numpy_helper.to_array(data).astype(np.int32)
    scales = numpy_helper.to_array(scale)
    zeros = numpy_helper.to_array(zero).astype(np.int32) if zero is not None else np.zeros_like(scales, np.int32)
    if scales.ndim == 1 and values.ndim > 0:  # per axis: along the DQ's axis
        shape = [1] * values.ndim
        shape[attrs.get("axis", 1) % values.ndim] = -1
        scales, zeros = scales.reshape(shape), zeros.reshape(shape)
    inits[name] = numpy_helper.from_array((values - zeros).astype(np.float32) * scales, name)
    model.graph.initializer.append(inits[name])
    return name


def _recast(
    tensor: str, casts: list[onnx.NodeProto], made_by: dict[str, onnx.NodeProto], added: list[onnx.NodeProto]
) -> str:
    """``tensor`` converted as the Casts after the replaced DQ converted (an FP32-kept node's input)."""
    from onnx import helper

    if not casts:
        return tensor
    to = next(a.i for a in casts[0].attribute if a.name == "to")
    name = f"{tensor}__to{to}"
    if name not in made_by:
        cast = helper.make_node("Cast", [tensor], [name], name=f"{name}__cast", to=to)
        added.append(cast)
        made_by[name] = cast
    return name


def _insert(model: onnx.ModelProto, added: list[onnx.NodeProto]) -> None:
    """Put each new node right before its first reader (its input exists earlier: the graph stays sorted)."""
    if not added:
        return
    pending = {n.output[0]: n for n in added}
    out: list[onnx.NodeProto] = []

    def place(name: str) -> None:
        node = pending.pop(name, None)
        if node is not None:
            for i in node.input:
                place(i)
            out.append(node)

    for node in list(model.graph.node):
        for i in node.input:
            place(i)
        out.append(node)
    del model.graph.node[:]
    model.graph.node.extend(out)


# -- fp8: the same ranges, FLOAT8E4M3FN ----------------------------------------------------------------


def _to_fp8(model: onnx.ModelProto, members: set[str]) -> None:
    """Give ``members`` (the nodes of the FP8 groups) FP8 Q/DQ pairs in place of the INT8 ones they read."""
    from deploykit.graph.proto import producers

    made_by = producers(model)
    inits = {t.name: t for t in model.graph.initializer}
    added: list[onnx.NodeProto] = []
    for node in (n for n in model.graph.node if n.name in members):
        for i, tensor in enumerate(node.input):
            casts, dq = _chain(made_by, tensor)
            q = made_by.get(dq.input[0]) if dq is not None else None
            if q is None or q.op_type != "QuantizeLinear" or len(q.input) < 3 or inits[q.input[2]].data_type != 3:
                continue
            name = f"{dq.output[0]}__fp8"
            if name not in made_by:
                q8, dq8 = _fp8_pair(model, inits, q, dq)
                added += [q8, dq8]
                made_by[q8.output[0]], made_by[name] = q8, dq8
            node.input[i] = _recast(name, casts, made_by, added)
    _insert(model, added)


def _fp8_pair(
    model: onnx.ModelProto, inits: dict[str, onnx.TensorProto], q: onnx.NodeProto, dq: onnx.NodeProto
) -> tuple[onnx.NodeProto, onnx.NodeProto]:
    import onnx

    pair = []
    for node, data in ((q, q.input[0]), (dq, f"{q.output[0]}__fp8")):
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name, copy.output[0] = f"{node.name}__fp8", f"{node.output[0]}__fp8"
        copy.input[0], copy.input[1], copy.input[2] = (
            data,
            _fp8_scale(model, inits, node.input[1]),
            _fp8_zero(model, inits, node.input[2]),
        )
        pair.append(copy)
    return pair[0], pair[1]


def _fp8_scale(model: onnx.ModelProto, inits: dict[str, onnx.TensorProto], name: str) -> str:
    from onnx import numpy_helper

    from deploykit.quant.scales import FP16_MIN_NORMAL

    new = f"{name}__fp8"
    if new not in inits:
        scale = numpy_helper.to_array(inits[name])
        low = FP16_MIN_NORMAL if scale.dtype == np.float16 else 1e-30
        converted = np.maximum(scale.astype(np.float64) * _INT8_QMAX / _FP8_QMAX, low).astype(scale.dtype)
        inits[new] = numpy_helper.from_array(converted, new)
        model.graph.initializer.append(inits[new])
    return new


def _fp8_zero(model: onnx.ModelProto, inits: dict[str, onnx.TensorProto], name: str) -> str:
    from onnx import helper

    new = f"{name}__fp8"
    if new not in inits:
        dims = list(inits[name].dims)
        inits[new] = helper.make_tensor(new, _FLOAT8, dims, [0.0] * int(np.prod(dims, dtype=np.int64)))
        model.graph.initializer.append(inits[new])
    return new


# -- fp32 inside an FP16 graph -------------------------------------------------------------------------


def _types(model: onnx.ModelProto) -> dict[str, int]:
    from deploykit.graph.proto import infer_shapes, tensor_types

    return tensor_types(infer_shapes(model))


def _to_fp32(model: onnx.ModelProto, group: Group, types: dict[str, int]) -> None:
    """Compute the (already float) group in FP32: FP16 inputs cast up, FP16 constants widened, outputs
    read outside the group cast back to FP16 under their own names."""
    from onnx import helper, numpy_helper

    members = set(group.nodes)
    inits = {t.name: t for t in model.graph.initializer}
    produced = {o for n in model.graph.node if n.name in members for o in n.output}
    read_outside = {i for n in model.graph.node if n.name not in members for i in n.input}
    read_outside |= {o.name for o in model.graph.output}
    out: list[onnx.NodeProto] = []
    made = set(inits) | {o for n in model.graph.node for o in n.output}  # casts earlier groups added
    for node in model.graph.node:
        if node.name not in members:
            out.append(node)
            continue
        for i, name in enumerate(node.input):
            if not name or name in produced or types.get(name) != _FLOAT16:
                continue
            wide = f"{name}__in32"
            if wide not in made:
                if name in inits:
                    array = numpy_helper.to_array(inits[name]).astype(np.float32)
                    model.graph.initializer.append(numpy_helper.from_array(array, wide))
                else:
                    out.append(helper.make_node("Cast", [name], [wide], name=f"{wide}__cast", to=_FLOAT))
                made.add(wide)
            node.input[i] = wide
        out.append(node)
        for j, name in enumerate(node.output):
            if name in read_outside and types.get(name) == _FLOAT16:
                node.output[j] = f"{name}__out32"
                out.append(helper.make_node("Cast", [node.output[j]], [name], name=f"{name}__to_fp16", to=_FLOAT16))
    renamed = {
        n[: -len("__out32")]
        for n in (o for node in out if node.name in members for o in node.output)
        if n.endswith("__out32")
    }
    for node in out:
        if node.name in members:
            for i, name in enumerate(node.input):
                if name in renamed:
                    node.input[i] = f"{name}__out32"
    del model.graph.node[:]
    model.graph.node.extend(out)
    stale = produced | {f"{n}__out32" for n in renamed}
    keep = [v for v in model.graph.value_info if v.name not in stale]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)


# -- clean up --------------------------------------------------------------------------------------------


def _drop_unread(model: onnx.ModelProto) -> None:
    """Remove Q/DQ and Cast nodes nothing reads, repeatedly, the constants only they used, and every
    declaration of a tensor no node now writes or reads (a removed pair's INT8 declaration left
    behind reads as an INT8 tensor outside Q/DQ to TensorRT's lint). One pass with read counts: a
    removed node's inputs lose a reader, and their writer is looked at again (a pass over the graph
    per layer of removals cost 44 ms a patch on a 549-group transformer)."""
    outputs = {o.name for o in model.graph.output}
    nodes = list(model.graph.node)
    reads = [_reads(n) for n in nodes]  # read once: each field access builds Python strings anew
    writes = [list(n.output) for n in nodes]
    readers: dict[str, int] = {}
    writer: dict[str, int] = {}
    for k in range(len(nodes)):
        for i in reads[k]:
            readers[i] = readers.get(i, 0) + 1
        for o in writes[k]:
            writer[o] = k

    def unread(k: int) -> bool:
        return nodes[k].op_type in _PAIR_OPS and not any(readers.get(o, 0) or o in outputs for o in writes[k])

    removed: set[int] = set()
    todo = [k for k in range(len(nodes)) if unread(k)]
    dropped: set[str] = set()
    while todo:
        k = todo.pop()
        if k in removed:
            continue
        removed.add(k)
        for i in reads[k]:
            dropped.add(i)
            readers[i] -= 1
            if readers[i] == 0 and i in writer and writer[i] not in removed and unread(writer[i]):
                todo.append(writer[i])
    kept = [k for k in range(len(nodes)) if k not in removed]
    if removed:
        del model.graph.node[:]
        model.graph.node.extend(nodes[k] for k in kept)
    read_now = {i for k in kept for i in reads[k]}
    used = read_now | outputs
    unused = [k for k, t in enumerate(model.graph.initializer) if t.name not in used and t.name in dropped]
    for k in reversed(unused):  # in place: rebuilding the list would copy every weight (28 ms on ViT-S)
        del model.graph.initializer[k]
    present = read_now | {o for k in kept for o in writes[k]}
    declared = [v for v in model.graph.value_info if v.name in present]
    if len(declared) != len(model.graph.value_info):
        del model.graph.value_info[:]
        model.graph.value_info.extend(declared)


def _reads(node: onnx.NodeProto) -> list[str]:
    """The tensors ``node`` reads, those its branches (an If's, :func:`_branches`) read from outside included."""
    reads = list(node.input)
    if node.op_type not in ("If", "Loop", "Scan"):  # the ops with graphs: looking costs a pass over attributes
        return reads
    for graph in (a.g for a in node.attribute if a.HasField("g")):
        for inner in graph.node:
            reads += _reads(inner)
    return reads
