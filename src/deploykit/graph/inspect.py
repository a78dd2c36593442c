"""What an ONNX model holds and whether ONNX Runtime can run it (``deploykit inspect`` renders it).

Inputs and outputs with shapes, op histogram, opsets, parameter count and size, custom-domain nodes,
model-local functions, structural problems (dangling inputs, cycles), output declarations that shape
inference contradicts (:mod:`deploykit.graph.declared`), the ONNX checker's verdict,
and the nodes ONNX Runtime cannot run: when a session for the whole model fails, each distinct
(op, input types) is tried alone so that every unsupported node is named, not just the first.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.errors import first_line

if TYPE_CHECKING:
    import onnx


def inspect_model(path: Path, *, check_runtime: bool = True) -> dict[str, Any]:
    """Describe the ONNX file at ``path`` as a JSON-ready dict (see the module docstring)."""
    from deploykit.graph import declared
    from deploykit.graph.files import external_data_files, load_model
    from deploykit.graph.proto import STANDARD_DOMAINS, graph_problems, op_histogram

    model = load_model(path, load_external=False)
    g = model.graph
    weights = {t.name for t in g.initializer}
    params, nbytes = _parameters(model)
    local = {(f.domain, f.name) for f in model.functions}
    custom = [
        {"name": n.name, "op": n.op_type, "domain": n.domain, "has_body": (n.domain, n.op_type) in local}
        for n in g.node
        if n.domain not in STANDARD_DOMAINS
    ]
    info: dict[str, Any] = {
        "path": str(path),
        "file_bytes": path.stat().st_size + sum(f.stat().st_size for f in external_data_files(model, path)),
        "ir_version": model.ir_version,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "inputs": [_value(vi) for vi in g.input if vi.name not in weights],
        "outputs": [_value(vi) for vi in g.output],
        "nodes": len(g.node),
        "ops": op_histogram(g),
        "parameters": params,
        "parameter_bytes": nbytes,
        "custom_nodes": custom,
        "functions": [f"{f.domain}::{f.name}" for f in model.functions],
        "problems": graph_problems(g),
        "checker": _checker(model, path),
        "declarations": [d.sentence() for d in declared.disagreements(model)],
        "tensors": [o for n in g.node for o in n.output if o],
    }
    if check_runtime:
        info["onnxruntime"] = runtime_support(model, path)
    return info


def _value(vi: onnx.ValueInfoProto) -> dict[str, Any]:
    from onnx import helper

    t = vi.type
    if not t.HasField("tensor_type"):
        return {"name": vi.name, "type": t.WhichOneof("value") or "unknown", "shape": None}
    tt = t.tensor_type
    dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else "unknown"
    shape = (
        [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
        if tt.HasField("shape")
        else None
    )
    return {"name": vi.name, "type": dtype, "shape": shape}


def _parameters(model: onnx.ModelProto) -> tuple[int, int]:
    """Elements and bytes of initializers and Constant-node tensors (without loading external data)."""
    import numpy as np
    from onnx import helper

    tensors = list(model.graph.initializer)
    tensors += [a.t for n in model.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    count = size = 0
    for t in tensors:
        n = int(np.prod(t.dims)) if t.dims else 1
        count += n
        try:
            size += n * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        except (KeyError, ValueError, TypeError):  # strings, 4-bit types: count the stored bytes
            size += len(t.raw_data)
    return count, size


def _checker(model: onnx.ModelProto, path: Path) -> str:
    import onnx

    from deploykit.safety.nativeprobe import probe

    probe(model, path)  # ModelError if onnx's C++ crashes on it: ONNX Runtime would too
    try:
        onnx.checker.check_model(str(path))
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        return first_line(e)
    return "ok"


def runtime_support(model: onnx.ModelProto, path: Path) -> dict[str, Any]:
    """Whether an ONNX Runtime CPU session loads the model; if not, the nodes it cannot run."""
    from deploykit.graph.run import SessionError, session_from_onnx

    try:
        session_from_onnx(path, "onnxruntime", level="disabled", quiet=True)
    except SessionError as e:
        return {"loads": False, "error": e.detail, "unsupported": _probe_nodes(model)}
    return {"loads": True, "error": "", "unsupported": []}


def _probe_nodes(model: onnx.ModelProto) -> list[dict[str, Any]]:
    """Try each distinct (domain, op, input types, attributes) alone; return the nodes that fail."""
    import onnx

    from deploykit.graph.proto import STANDARD_DOMAINS, subgraphs
    from deploykit.graph.run import SessionError, session_from_onnx

    try:
        types = {vi.name: vi.type for vi in onnx.shape_inference.infer_shapes(model).graph.value_info}
    except Exception:  # without inferred types the probe still runs, with untyped inner tensors
        types = {}
    types |= {vi.name: vi.type for vi in [*model.graph.input, *model.graph.output]}
    types |= {t.name: onnx.helper.make_tensor_type_proto(t.data_type, list(t.dims)) for t in model.graph.initializer}
    verdicts: dict[bytes, str] = {}
    failing = []
    local = {(f.domain, f.name) for f in model.functions}
    for index, node in enumerate(model.graph.node):
        if node.domain not in STANDARD_DOMAINS and (node.domain, node.op_type) not in local:
            failing.append(
                {
                    "node": node.name or f"#{index}",
                    "op": node.op_type,
                    "domain": node.domain,
                    "error": "custom op with no ONNX body: needs its custom-op library (or lower_plugins)",
                }
            )
            continue
        if any(True for _ in subgraphs(node)):
            continue  # a body reads outer tensors: it cannot be tried alone
        probe = _single_node_model(model, node, types)
        if probe is None:
            continue
        key = probe.SerializeToString(deterministic=True)
        if key not in verdicts:
            try:  # quiet: probing node by node, failures are expected and reported by us
                session_from_onnx(probe, "onnxruntime", level="disabled", quiet=True)
                verdicts[key] = ""
            except SessionError as e:
                verdicts[key] = e.detail
        if verdicts[key]:
            failing.append(
                {"node": node.name or f"#{index}", "op": node.op_type, "domain": node.domain, "error": verdicts[key]}
            )
    return failing


def _single_node_model(model: onnx.ModelProto, node: onnx.NodeProto, types: dict[str, Any]) -> onnx.ModelProto | None:
    from onnx import helper

    inputs = []
    for k, name in enumerate(node.input):
        if not name:
            continue
        if name not in types or not types[name].HasField("tensor_type"):
            return None  # an input we cannot type (a sequence, an unknown tensor): not probed
        tt = types[name].tensor_type
        inputs.append(helper.make_tensor_value_info(f"in{k}", tt.elem_type, None))
    renamed = helper.make_node(
        node.op_type,
        [f"in{k}" if n else "" for k, n in enumerate(node.input)],
        [f"out{k}" if n else "" for k, n in enumerate(node.output)],
        domain=node.domain,
    )
    renamed.attribute.extend(node.attribute)
    outputs = [_untyped(f"out{k}") for k, n in enumerate(node.output) if n]
    graph = helper.make_graph([renamed], "probe", inputs, outputs)
    probe = helper.make_model(graph, opset_imports=list(model.opset_import), functions=list(model.functions))
    probe.ir_version = model.ir_version
    return probe


def _untyped(name: str) -> onnx.ValueInfoProto:
    import onnx

    vi = onnx.ValueInfoProto()
    vi.name = name  # untyped: ONNX Runtime infers it
    return vi
