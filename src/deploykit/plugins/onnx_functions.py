"""ONNX function bodies that let ONNX Runtime run the plugin nodes natively, on the CPU.

A plugin node keeps its op_type, ``plugin_version`` and ``plugin_namespace``, so TensorRT's parser
maps it to the registered plugin (a registered plugin wins over a model-local function when the
node has ``plugin_namespace``); ONNX Runtime, which has no such plugin, inlines the model-local
function of the same (domain, name) and runs standard kernels. One file serves both backends.
A Python custom op would also work but costs ~600x a native kernel (docs/architecture.md, pitfalls).

The bodies read the op attribute through an attribute reference, so one function per op serves
every node of the model whatever its ``bev_shape``/``grid``. They compute in float32 and cast the
result back to the input type, as the CUDA kernels accumulate in float32; this also keeps a float16
graph runnable, as ONNX Runtime's CPU provider has no float16 ScatterND with ``reduction='add'``.

Out-of-range indices: an index outside its tensor makes the Gather/ScatterND that uses it fail,
naming the node (``check_ranks_depth`` ...) and the bad value; negative indices, which ONNX would
wrap around, are first moved out of range so they fail too. Unlike the C++ reference, only the
points some interval covers (and the live pillars) are checked, and negative interval lengths and
``num_pillars`` outside [0, P] are clamped as on CUDA.

Two ways in: :func:`attach_bodies` (the export hook; checks every node first) and
:func:`body_builder`, registered by :func:`register_bodies` with the ``lower_plugins`` surgery pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from deploykit.errors import ModelError
from deploykit.plugins.descriptions import ONNX_DOMAIN, OpDescription, check_attributes, descriptions

if TYPE_CHECKING:
    import onnx

DEFAULT_OPSET = 18  # ScatterND's reduction needs 16; the bodies use nothing newer than 18
_PLUGIN_ATTRIBUTES = ("plugin_version", "plugin_namespace")


class _Body:
    """Collects the nodes of one function body; each call adds a node and returns its output name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []

    def __call__(self, op_type: str, *inputs: str, name: str = "", **attrs: object) -> str:
        from onnx import helper

        out = f"{name or op_type.lower()}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name or out, **attrs))
        return out

    def ints(self, *values: int, scalar: bool = False) -> str:
        """An int64 constant: a scalar or a 1-D tensor."""
        from onnx import TensorProto, helper

        tensor = helper.make_tensor("v", TensorProto.INT64, [] if scalar else [len(values)], list(values))
        return self("Constant", value=tensor)

    def attribute(self, attribute: str) -> str:
        """A 1-D int64 tensor holding the calling node's INTS attribute (an attribute reference)."""
        from onnx import AttributeProto, helper

        out = f"{attribute}_{len(self.nodes)}"
        node = helper.make_node("Constant", [], [out], name=out)
        node.attribute.add(name="value_ints", ref_attr_name=attribute, type=AttributeProto.INTS)
        self.nodes.append(node)
        return out

    def checked(self, index: str, limit: str, tensor: str) -> str:
        """``index`` with negatives moved below -limit, so the Gather/ScatterND using it fails instead of wrapping."""
        zero = self.ints(0, scalar=True)
        return self("Where", self("Less", index, zero), self("Sub", index, limit), index, name=f"check_{tensor}")


def _function(op: OpDescription, body: _Body, outputs: list[str], opset: int) -> onnx.FunctionProto:
    from onnx import helper

    return helper.make_function(
        ONNX_DOMAIN,
        op.name,
        [t.name for t in op.inputs],
        outputs,
        body.nodes,
        opset_imports=[helper.make_opsetid("", opset)],
        attributes=[a.name for a in op.attributes] + list(_PLUGIN_ATTRIBUTES),
        doc_string=f"ONNX Runtime body of plugin {op.plugin_name} v{op.plugin_version} ({op.summary})",
    )


def bev_pool_v2_body(op: OpDescription, opset: int = DEFAULT_OPSET) -> onnx.FunctionProto:
    """BEVPoolV2 as Gather/Mul/ScatterND(add).

    The points of every non-empty interval are enumerated without a loop: a 1 at each interval's
    offset, cumulated, gives each enumerated point its interval (its "owner").
    """
    from onnx import TensorProto, helper

    f = _Body()
    float32 = TensorProto.FLOAT
    zero, one = f.ints(0, scalar=True), f.ints(1, scalar=True)
    depth_flat = f("Reshape", f("Cast", "depth", to=float32), f.ints(-1))
    channels = f("Shape", "feat", start=4)
    feat_rows = f("Reshape", f("Cast", "feat", to=float32), f("Concat", f.ints(-1), channels, axis=0))
    batch = f("Shape", "depth", end=1)
    bev_shape = f.attribute("bev_shape")
    cells = f("Mul", batch, f("ReduceProd", bev_shape, keepdims=1))
    points = f("Shape", "ranks_depth")
    # Enumerate the points of the non-empty intervals.
    lengths_all = f("Cast", "interval_lengths", to=TensorProto.INT64)
    nonempty = f("Greater", lengths_all, zero)
    starts = f("Compress", f("Cast", "interval_starts", to=TensorProto.INT64), nonempty, axis=0)
    lengths = f("Compress", lengths_all, nonempty, axis=0)
    offsets = f("Sub", f("CumSum", lengths, zero), lengths)
    total = f("ReduceSum", lengths, keepdims=1)
    no_marks = f("ConstantOfShape", total, value=helper.make_tensor("v", TensorProto.INT64, [1], [0]))
    marks = f("ScatterND", no_marks, f("Unsqueeze", offsets, f.ints(-1)), f("Expand", one, f("Shape", offsets)))
    owner = f("Sub", f("CumSum", marks, zero), one)
    owner_start = f("Gather", starts, owner)
    step = f("Sub", f("Range", zero, f("Squeeze", total), one), f("Gather", offsets, owner))
    point = f.checked(f("Add", owner_start, step), points, "interval")
    # Gather the weights and rows, scatter-add the products into the cells.
    ranks_depth = f("Cast", f("Gather", "ranks_depth", point), to=TensorProto.INT64)
    ranks_feat = f("Cast", f("Gather", "ranks_feat", point), to=TensorProto.INT64)
    ranks_bev = f(
        "Cast", f("Gather", "ranks_bev", f.checked(owner_start, points, "interval_start")), to=TensorProto.INT64
    )
    weight = f(
        "Gather", depth_flat, f.checked(ranks_depth, f("Shape", depth_flat), "ranks_depth"), name="gather_ranks_depth"
    )
    rows = f(
        "Gather",
        feat_rows,
        f.checked(ranks_feat, f("Shape", feat_rows, end=1), "ranks_feat"),
        axis=0,
        name="gather_ranks_feat",
    )
    products = f("Mul", rows, f("Unsqueeze", weight, f.ints(-1)))
    canvas = f("ConstantOfShape", f("Concat", cells, channels, axis=0))
    summed = f(
        "ScatterND",
        canvas,
        f("Unsqueeze", f.checked(ranks_bev, cells, "ranks_bev"), f.ints(-1)),
        products,
        reduction="add",
        name="scatter_ranks_bev",
    )
    pooled = f("Reshape", summed, f("Concat", batch, bev_shape, channels, axis=0))
    out = f("CastLike", pooled, "depth")
    return _function(op, f, [out], opset)


def pillar_scatter_body(op: OpDescription, opset: int = DEFAULT_OPSET) -> onnx.FunctionProto:
    """PillarScatter as Compress/ScatterND(add) onto a (B*ny*nx, C) canvas, then a transpose to (B, C, ny, nx)."""
    from onnx import TensorProto

    f = _Body()
    zero, one = f.ints(0, scalar=True), f.ints(1, scalar=True)
    batch = f("Shape", "features", end=1)
    pillars = f("Shape", "features", start=1, end=2)
    channels = f("Shape", "features", start=2)
    grid = f.attribute("grid")
    ny, nx = f("Gather", grid, zero), f("Gather", grid, one)
    cells = f("Mul", batch, f("ReduceProd", grid, keepdims=1))
    rows = f("Unsqueeze", f("Range", zero, f("Squeeze", batch), one), f.ints(1))  # (B, 1)
    cols = f("Unsqueeze", f("Range", zero, f("Squeeze", pillars), one), f.ints(0))  # (1, P)
    live = f("Less", cols, f("Unsqueeze", f("Cast", "num_pillars", to=TensorProto.INT64), f.ints(1)))
    coords = f("Cast", "coords", to=TensorProto.INT64)
    y = f("Gather", coords, f.ints(2, scalar=True), axis=2)
    x = f("Gather", coords, f.ints(3, scalar=True), axis=2)
    inside = f(
        "And",
        f("And", f("GreaterOrEqual", y, zero), f("Less", y, ny)),
        f("And", f("GreaterOrEqual", x, zero), f("Less", x, nx)),
    )
    flat = f("Add", f("Mul", f("Add", f("Mul", rows, ny), y), nx), x)
    # A live pillar off the grid gets the index one past the canvas: the ScatterND below then fails.
    flat = f("Where", inside, flat, cells, name="check_coords")
    mask = f("Reshape", live, f.ints(-1))
    index = f("Compress", f("Reshape", flat, f.ints(-1)), mask, axis=0)
    features = f("Reshape", f("Cast", "features", to=TensorProto.FLOAT), f("Concat", f.ints(-1), channels, axis=0))
    features = f("Compress", features, mask, axis=0)
    canvas = f("ConstantOfShape", f("Concat", cells, channels, axis=0))
    summed = f("ScatterND", canvas, f("Unsqueeze", index, f.ints(-1)), features, reduction="add", name="scatter_coords")
    out = f("Transpose", f("Reshape", summed, f("Concat", batch, grid, channels, axis=0)), perm=[0, 3, 1, 2])
    return _function(op, f, [f("CastLike", out, "features")], opset)


BODY_BUILDERS: dict[str, Callable[[OpDescription, int], onnx.FunctionProto]] = {
    "BEVPoolV2": bev_pool_v2_body,
    "PillarScatter": pillar_scatter_body,
}


MIN_OPSET = 16  # ScatterND's reduction attribute


def function_body(op_type: str, opset: int = DEFAULT_OPSET) -> onnx.FunctionProto:
    """The model-local function for plugin ``op_type`` (domain ``deploykit``) at ``ai.onnx`` ``opset``."""
    if opset < MIN_OPSET:
        raise ModelError(
            f"the ONNX Runtime body of {op_type} needs opset >= {MIN_OPSET} (ScatterND with "
            f"reduction), the model has opset {opset}",
            hint=f"export with export.opset >= {MIN_OPSET}, or add the convert_opset surgery pass",
        )
    return BODY_BUILDERS[op_type](descriptions()[op_type], opset)


def body_builder(node: onnx.NodeProto, opset: int) -> onnx.FunctionProto:
    """The :mod:`deploykit.surgery.plugin_bodies` builder of both ops: checks the node, returns the body.

    ``lower_plugins`` sets the function's name and domain to the node's.
    """
    op = is_plugin_node(node) or descriptions().get(node.op_type)
    if op is None:
        raise ModelError(f"{node.op_type!r} is not a deploykit plugin op", hint="see `deploykit plugins list`")
    validate_node(node, op, repr(node.name) if node.name else f"-> {node.output[0]!r}")
    return function_body(op.name, opset)


def register_bodies() -> list[str]:
    """Register :func:`body_builder` for every described op with the surgery pass ``lower_plugins``."""
    from deploykit.surgery.plugin_bodies import register_body

    ops = sorted(BODY_BUILDERS)
    for op_type in ops:
        register_body(op_type, body_builder)
    return ops


# ---------------------------------------------------------------------------------------------
# Plugin nodes in a model


@dataclass(frozen=True)
class PluginNode:
    index: int
    name: str  # the node's name, or ``#index`` when it has none
    op: OpDescription


def is_plugin_node(node: onnx.NodeProto) -> OpDescription | None:
    """The description of the deploykit plugin ``node`` is, or None.

    A node is ours when its op_type names a described op and it sits in our domain or carries our
    ``plugin_namespace`` (TensorRT ignores the domain, so a hand-made node may use another one).
    """
    namespace = next((a.s.decode() for a in node.attribute if a.name == "plugin_namespace"), None)
    if node.domain != ONNX_DOMAIN and namespace is None:
        return None  # not ours: a model without plugin nodes never needs the op descriptions
    op = descriptions().get(node.op_type)
    if op is None:
        return None
    return op if node.domain == ONNX_DOMAIN or namespace == op.plugin_namespace else None


def plugin_nodes(graph: onnx.GraphProto) -> list[PluginNode]:
    """The deploykit plugin nodes of the main graph, in order."""
    out = []
    for index, node in enumerate(graph.node):
        op = is_plugin_node(node)
        if op is not None:
            out.append(PluginNode(index, node.name or f"#{index}", op))
    return out


def static_types(graph: onnx.GraphProto) -> dict[str, tuple[str, tuple[int | None, ...] | None]]:
    """Tensor name -> (numpy dtype name, dims with None where unknown) for what the graph declares."""
    from onnx import helper

    out: dict[str, tuple[str, tuple[int | None, ...] | None]] = {}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.elem_type:
            dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
            out[vi.name] = (helper.tensor_dtype_to_np_dtype(tt.elem_type).name, dims if tt.HasField("shape") else None)
    for t in graph.initializer:
        out[t.name] = (helper.tensor_dtype_to_np_dtype(t.data_type).name, tuple(t.dims))
    return out


def _check_static_inputs(
    node: onnx.NodeProto, op: OpDescription, where: str, known: dict[str, tuple[str, tuple[int | None, ...] | None]]
) -> None:
    """Dtypes and shared dims of the inputs whose type the graph declares (ranks are usually initializers)."""
    seen: dict[str, tuple[int, str]] = {}
    for name, tensor in zip(node.input, op.inputs, strict=False):
        dtype, dims = known.get(name, ("", None))
        allowed = op.dtypes(tensor.dtype)
        if dtype and dtype not in allowed:
            raise ModelError(
                f"{op.name} {where}: input {tensor.name} ({name!r}) is {dtype}, must be {' or '.join(allowed)}",
                hint=f"see plugins/{op.folder}/README.md; cast it before the node",
            )
        for symbol, dim in zip(tensor.shape, dims or (), strict=False):
            if isinstance(symbol, int) or dim is None:
                continue
            first = seen.setdefault(symbol, (dim, tensor.name))
            if first[0] != dim:
                raise ModelError(
                    f"{op.name} {where}: {tensor.name} has {symbol} = {dim} but {first[1]} has {symbol} = {first[0]}",
                    hint=f"see the shape table in plugins/{op.folder}/README.md",
                )


def validate_node(
    node: onnx.NodeProto,
    op: OpDescription,
    label: str,
    known: dict[str, tuple[str, tuple[int | None, ...] | None]] | None = None,
) -> None:
    """Raise ModelError (naming the node and the attribute or input) if ``node`` does not fit ``op``.

    ``known`` (from :func:`static_types`) adds checks of the inputs whose dtype or dims the graph declares.
    """
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    where = f"node {label}"
    check_attributes(op, attrs, where)
    version = attrs.get("plugin_version", b"1")
    version = version.decode() if isinstance(version, bytes) else str(version)
    if version != op.plugin_version:
        raise ModelError(
            f"{op.name} {where}: plugin_version {version!r} is not implemented "
            f"(deploykit has version {op.plugin_version!r})",
            hint="re-export with this deploykit",
        )
    if len(node.input) != len(op.inputs) or len(node.output) != len(op.outputs):
        raise ModelError(
            f"{op.name} {where}: has {len(node.input)} inputs and {len(node.output)} outputs, "
            f"the op takes {len(op.inputs)} ({', '.join(t.name for t in op.inputs)}) "
            f"and gives {len(op.outputs)}"
        )
    _check_static_inputs(node, op, where, known or {})


def attach_bodies(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``model`` whose plugin nodes all have a model-local function body.

    Checks every plugin node first (a missing required attribute is named), moves nodes with no
    domain into ``deploykit`` (ONNX Runtime looks local functions up by domain; TensorRT ignores
    it), and adds the bodies that are missing. Returns the model and the op types given a body.
    """
    import onnx
    from onnx import helper

    nodes = plugin_nodes(model.graph)
    if not nodes:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    known = static_types(out.graph)
    for found in nodes:
        node = out.graph.node[found.index]
        validate_node(node, found.op, repr(found.name), known)
        node.domain = node.domain or ONNX_DOMAIN
    opset = next((o.version for o in out.opset_import if o.domain in ("", "ai.onnx")), DEFAULT_OPSET)
    present = {(f.domain, f.name) for f in out.functions}
    added = []
    for domain, op_type in sorted({(out.graph.node[n.index].domain, n.op.name) for n in nodes}):
        if (domain, op_type) in present:
            continue
        body = function_body(op_type, opset)
        body.domain = domain
        out.functions.append(body)
        added.append(op_type)
    for domain in {out.graph.node[n.index].domain for n in nodes}:
        if not any(o.domain == domain for o in out.opset_import):
            out.opset_import.append(helper.make_opsetid(domain, 1))
    if out.ir_version < 8:
        out.ir_version = 8  # model-local functions need IR 8
    return out, added
