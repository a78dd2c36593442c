"""Checks on an untrusted ONNX file made in Python, before any native code sees it.

onnx's checker and shape inference and ONNX Runtime are C++: some malformed models crash them (a
model-local function that calls itself overflows the stack in shape inference: a segfault, not an
exception) or make them allocate without bound (functions that call each other twice per level
inline to 2^depth nodes). So the protobuf is walked here first, iteratively: function calls must
form no cycle, nest at most ``MAX_FUNCTION_DEPTH`` deep and inline to at most ``MAX_INLINED_NODES``;
subgraphs nest at most ``MAX_GRAPH_DEPTH``; external data must lie inside the model's folder, in a
regular file that is not hard-linked elsewhere, within the file's size. Each refusal is a
ModelError naming the file and the function, node or tensor.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.errors import ModelError

if TYPE_CHECKING:
    import onnx

MAX_FUNCTION_DEPTH = 32
MAX_GRAPH_DEPTH = 16
MAX_INLINED_NODES = 5_000_000
_HINT = "the file is malformed or hostile; re-export the model"


def check_structure(model: onnx.ModelProto, path: Path) -> None:
    """Refuse what would crash or exhaust native code (see the module docstring)."""
    depth = _graph_depth(model.graph)
    if depth > MAX_GRAPH_DEPTH:
        raise ModelError(f"{path}: subgraphs nest {depth} deep (at most {MAX_GRAPH_DEPTH})", hint=_HINT)
    _check_text(model, path)
    _check_functions(model, path)


def _check_text(model: onnx.ModelProto, path: Path) -> None:
    """Every name is text: protobuf hands a proto2 string field that is not UTF-8 back as bytes,
    which every consumer (sorting, formatting, ONNX Runtime) then trips over."""
    header = (
        model.producer_name,
        model.producer_version,
        model.domain,
        *(o.domain for o in model.opset_import),
        *(p.key for p in model.metadata_props),
        *(p.value for p in model.metadata_props),
    )
    if not all(isinstance(x, str) for x in header):
        raise ModelError(f"{path}: the model's producer, opset domains or metadata are not UTF-8 text", hint=_HINT)
    graphs, nodes = [model.graph], list(model.graph.node)
    for f in model.functions:
        nodes += list(f.node)
        if not all(isinstance(x, str) for x in (f.name, f.domain, *f.input, *f.output)):
            raise ModelError(f"{path}: a model-local function has a name that is not UTF-8 text", hint=_HINT)
    for n in _all_nodes(nodes):
        graphs += _subgraphs(n)
        texts = (n.name, n.op_type, n.domain, *n.input, *n.output, *(a.name for a in n.attribute))
        if not all(isinstance(x, str) for x in texts):
            raise ModelError(
                f"{path}: node {_printable(n.name)} ({_printable(n.op_type)}) has a name, input, "
                "output or attribute that is not UTF-8 text",
                hint=_HINT,
            )
    for g in graphs:
        values = [*g.input, *g.output, *g.value_info, *g.initializer]
        dims = [
            d.dim_param
            for v in (*g.input, *g.output, *g.value_info)
            if v.type.HasField("tensor_type")
            for d in v.type.tensor_type.shape.dim
        ]
        if not all(isinstance(x, str) for x in (g.name, *(v.name for v in values), *dims)):
            raise ModelError(
                f"{path}: graph {_printable(g.name)} has a tensor or dim name that is not UTF-8 text", hint=_HINT
            )


def _printable(text: object) -> str:
    return repr(text.decode("utf-8", "replace") if isinstance(text, bytes) else text)


def _subgraphs(node: Any) -> list[Any]:
    out = []
    for a in node.attribute:
        if a.HasField("g"):
            out.append(a.g)
        out.extend(a.graphs)
    return out


def _graph_depth(graph: Any) -> int:
    deepest, todo = 0, [(graph, 1)]
    while todo:
        g, d = todo.pop()
        deepest = max(deepest, d)
        if d <= MAX_GRAPH_DEPTH:
            todo += [(sub, d + 1) for n in g.node for sub in _subgraphs(n)]
    return deepest


def _all_nodes(nodes: Any) -> list[Any]:
    """Nodes of a graph or function body, with those of their subgraphs (depth already bounded)."""
    out, todo = [], list(nodes)
    while todo:
        n = todo.pop()
        out.append(n)
        for g in _subgraphs(n):
            todo.extend(g.node)
    return out


def _key(item: Any) -> tuple[str, str, str]:
    """(domain, name, overload) of a function, or of the function a node would call."""
    import onnx

    name = item.name if isinstance(item, onnx.FunctionProto) else item.op_type
    return item.domain, name, item.overload


def _check_functions(model: onnx.ModelProto, path: Path) -> None:
    functions: dict[tuple[str, str, str], Any] = {}
    for f in model.functions:
        key = _key(f)
        if key in functions:
            raise ModelError(f"{path}: model-local function {key[0]}::{key[1]} is defined twice", hint=_HINT)
        functions[key] = f
    for f in functions.values():
        if _graph_depth_of_nodes(f.node) > MAX_GRAPH_DEPTH:
            raise ModelError(f"{path}: function {f.domain}::{f.name}: subgraphs nest too deep", hint=_HINT)
    calls = {k: [_key(n) for n in _all_nodes(f.node) if _key(n) in functions] for k, f in functions.items()}
    _check_call_graph(calls, path)
    sizes = _inlined_sizes(functions, calls)
    main = sum(sizes.get(_key(n), 1) for n in _all_nodes(model.graph.node))
    if main > MAX_INLINED_NODES:
        raise ModelError(
            f"{path}: the graph's model-local functions inline to {main:,} nodes (at most {MAX_INLINED_NODES:,})",
            hint=_HINT,
        )


def _graph_depth_of_nodes(nodes: Any) -> int:
    deepest, todo = 1, [(n, 1) for n in nodes]
    while todo:
        n, d = todo.pop()
        deepest = max(deepest, d)
        if d <= MAX_GRAPH_DEPTH:
            todo += [(m, d + 1) for g in _subgraphs(n) for m in g.node]
    return deepest


def _check_call_graph(calls: dict[tuple[str, str, str], list[tuple[str, str, str]]], path: Path) -> None:
    """No cycle (a function reaching itself) and no call chain deeper than MAX_FUNCTION_DEPTH."""
    depth: dict[tuple[str, str, str], int] = {}
    for root in calls:
        stack, on_path = [(root, iter(calls[root]))], {root}
        while stack:
            key, it = stack[-1]
            callee = next(it, None)
            if callee is None:
                stack.pop()
                on_path.discard(key)
                depth[key] = 1 + max((depth[c] for c in calls[key]), default=0)
                continue
            if callee in on_path:
                chain = " -> ".join(f"{k[0]}::{k[1]}" for k, _ in stack) + f" -> {callee[0]}::{callee[1]}"
                raise ModelError(f"{path}: model-local functions call themselves ({chain})", hint=_HINT)
            if callee not in depth:
                if len(stack) >= MAX_FUNCTION_DEPTH:
                    raise ModelError(
                        f"{path}: model-local function calls nest deeper than {MAX_FUNCTION_DEPTH} "
                        f"(at {callee[0]}::{callee[1]})",
                        hint=_HINT,
                    )
                stack.append((callee, iter(calls[callee])))
                on_path.add(callee)
    worst = max(depth.items(), key=lambda kv: kv[1], default=None)
    if worst and worst[1] > MAX_FUNCTION_DEPTH:
        raise ModelError(
            f"{path}: model-local function calls nest {worst[1]} deep (at {worst[0][0]}::{worst[0][1]}; "
            f"at most {MAX_FUNCTION_DEPTH})",
            hint=_HINT,
        )


def _inlined_sizes(functions: dict[Any, Any], calls: dict[Any, list[Any]]) -> dict[Any, int]:
    """Nodes each function becomes once every call is inlined (acyclic: checked before)."""
    sizes: dict[Any, int] = {}
    pending = list(functions)
    while pending:
        key = pending[-1]
        missing = [c for c in calls[key] if c not in sizes]
        if missing:
            pending += missing
            continue
        pending.pop()
        if key not in sizes:
            nodes = _all_nodes(functions[key].node)
            sizes[key] = min(sum(sizes.get(_key(n), 1) for n in nodes), MAX_INLINED_NODES + 1)
    return sizes


def check_external_data(path: Path, tensor: Any, folder: Path) -> Path:
    """The external-data file one tensor names, checked; ModelError naming the tensor otherwise."""
    entries = {e.key: e.value for e in tensor.external_data}
    location = entries.get("location", "")
    where = f"{path}: tensor {tensor.name!r}"
    if not isinstance(location, str) or "\0" in location:
        raise ModelError(f"{where}: external data location is not a file name", hint=_HINT)
    target = (folder / location).resolve()
    if not location or Path(location).is_absolute() or not target.is_relative_to(folder):
        raise ModelError(
            f"{where} points to external data outside the model's folder ({location!r})",
            hint="untrusted paths are refused; move the data beside the model",
        )
    try:
        offset, length = int(entries.get("offset") or 0), int(entries.get("length") or -1)
    except ValueError:
        raise ModelError(f"{where}: external data offset/length are not integers", hint=_HINT) from None
    try:
        st = os.lstat(folder / location)
    except FileNotFoundError:
        raise ModelError(
            f"{path}: external data file {location!r} is missing", hint="copy the model together with its .data file"
        ) from None
    except OSError as e:
        raise ModelError(f"{where}: cannot read external data {location!r} ({e.strerror})") from e
    import stat

    if not stat.S_ISREG(st.st_mode):
        raise ModelError(f"{where}: external data {location!r} is not a regular file (links are refused)", hint=_HINT)
    if st.st_nlink > 1:
        raise ModelError(
            f"{where}: external data {location!r} is hard-linked ({st.st_nlink} names); a hard link "
            "can reach a file outside the folder, so it is refused",
            hint="copy the data file instead",
        )
    if offset < 0 or (length != -1 and length < 0) or offset + max(length, 0) > st.st_size:
        raise ModelError(
            f"{where}: external data offset {offset} + length {length} lies beyond the end of "
            f"{location!r} ({st.st_size} bytes)",
            hint="the data file is truncated or not this model's",
        )
    return target


def check_io(model: onnx.ModelProto, path: Path) -> None:
    """Graph inputs and outputs deploykit must feed and compare: tensors of a known element type."""
    import onnx

    initializers = {i.name for i in model.graph.initializer}
    for kind, values in (
        ("input", [v for v in model.graph.input if v.name not in initializers]),
        ("output", list(model.graph.output)),
    ):
        for vi in values:
            what = vi.type.WhichOneof("value")
            if what != "tensor_type":
                raise ModelError(
                    f"{path}: {kind} {vi.name!r} is a {what or 'untyped'} value; deploykit feeds and "
                    "compares tensors only",
                    hint="export the model with tensor inputs and outputs",
                )
            elem = vi.type.tensor_type.elem_type
            if elem not in onnx.TensorProto.DataType.values() or elem in (onnx.TensorProto.UNDEFINED,):
                raise ModelError(f"{path}: {kind} {vi.name!r} has no valid element type ({elem})", hint=_HINT)
            if kind == "input" and elem == onnx.TensorProto.STRING:
                raise ModelError(
                    f"{path}: input {vi.name!r} is a string tensor; deploykit feeds numeric tensors",
                    hint="move tokenization out of the graph",
                )


__all__ = ["check_external_data", "check_io", "check_structure"]
