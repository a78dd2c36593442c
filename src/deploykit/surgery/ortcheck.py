"""Running a graph under ONNX Runtime for the runner's numeric check.

The check compares each pass's output with the last graph ONNX Runtime could run, on the same
points: a pass that renames inputs (``extract``) is fed the reference's intermediate tensors, a
pass that pins a dim (``set_dims``) gets inputs of the pinned shape (the reference, still dynamic,
accepts them), and a pass that adds outputs at inner tensors (``cut``) is compared against those
tensors of the reference. A graph ONNX Runtime cannot run because it holds plugin nodes without a
body defers the check to the next graph it can run, which is then compared with the last one before
the plugins appeared: ``replace_with_plugin`` followed by ``lower_plugins`` is checked end to end.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from deploykit.surgery.graph import STANDARD_DOMAINS, real_inputs

PROTO_LIMIT = 2**31 - 1  # protobuf cannot serialize a message this large; larger models go through a file


class Unrunnable(Exception):
    """ONNX Runtime cannot run the graph because it holds ops no runtime here implements."""


def custom_ops(model: onnx.ModelProto) -> list[str]:
    """``domain::Op`` of nodes in non-standard domains that no model-local function defines."""
    local = {(f.domain, f.name) for f in model.functions}
    ops = {f"{n.domain}::{n.op_type}" for n in model.graph.node
           if n.domain not in STANDARD_DOMAINS and (n.domain, n.op_type) not in local}
    return sorted(ops)


def uses_file(model: onnx.ModelProto) -> bool:
    """Whether the model must go through a file: too large for protobuf, or marked for external data."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    return model.ByteSize() >= PROTO_LIMIT or any(uses_external_data(t) for t in _get_all_tensors(model))


@contextlib.contextmanager
def as_file(model: onnx.ModelProto) -> Iterator[Path]:
    """The model written to a temporary folder (weights over 1 KiB beside it when it must)."""
    with tempfile.TemporaryDirectory(prefix="deploykit-surgery-") as tmp:
        path = Path(tmp) / "model.onnx"
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        external = model.ByteSize() >= PROTO_LIMIT
        onnx.save_model(copy, str(path), save_as_external_data=external, all_tensors_to_one_file=True,
                        location="model.onnx.data", size_threshold=1024)
        yield path


def session(model: onnx.ModelProto) -> Any:
    """A CPU session with graph optimizations off: we check the graph as written, not ORT's rewrite."""
    import onnxruntime as ort

    from deploykit.backends.onnxruntime import session_options

    opts = session_options("disabled")
    try:
        if uses_file(model):
            with as_file(model) as path:
                return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as e:
        ops = custom_ops(model)
        if ops:
            raise Unrunnable(f"ONNX Runtime cannot run custom op(s) {', '.join(ops)}") from e
        raise


def run(model: onnx.ModelProto, feeds: dict[str, Any], extra_outputs: list[str] = ()) -> dict[str, Any]:
    """Run ``model``; also return the inner tensors named in ``extra_outputs`` (main graph only)."""
    if extra_outputs:
        model = _with_outputs(model, extra_outputs)
    return run_session(session(model), feeds)


def run_session(sess: Any, feeds: dict[str, Any]) -> dict[str, Any]:
    names = [o.name for o in sess.get_outputs()]
    wanted = {i.name for i in sess.get_inputs()}
    return dict(zip(names, sess.run(names, {k: v for k, v in feeds.items() if k in wanted}), strict=True))


def _with_outputs(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    present = {o.name for o in out.graph.output}
    for name in names:
        if name not in present:
            out.graph.output.add().name = name  # ORT types an untyped output itself
    return out


def random_value(vi: onnx.ValueInfoProto, rng: np.random.Generator, like: Any = None) -> Any:
    """A random input for ``vi``: fixed dims as declared, symbolic ones taken from ``like`` (else 1)."""
    from onnx import helper

    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or tt.elem_type in (0, onnx.TensorProto.STRING):
        return None
    dims = []
    for axis, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(d.dim_value)
        else:
            ok = like is not None and getattr(like, "ndim", -1) == len(tt.shape.dim)
            dims.append(like.shape[axis] if ok else 1)
    dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(dims).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, dims).astype(np.bool_)
    return rng.integers(0, 16, dims).astype(dtype)


def fits(value: Any, vi: onnx.ValueInfoProto) -> bool:
    """Whether an array's shape agrees with the fixed dims ``vi`` declares."""
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return True
    dims = vi.type.tensor_type.shape.dim
    if not hasattr(value, "shape") or len(value.shape) != len(dims):
        return not hasattr(value, "shape")
    return all(not (d.HasField("dim_value") and d.dim_value > 0) or d.dim_value == s
               for d, s in zip(dims, value.shape, strict=True))


@dataclass
class Comparison:
    """Outputs of the candidate and the reference on the same feeds."""

    feeds: dict[str, Any]
    got: dict[str, Any]
    expected: dict[str, Any]
    unmatched: list[str] = field(default_factory=list)  # candidate outputs the reference lacks


def compare_run(reference: onnx.ModelProto, ref_feeds: dict[str, Any], candidate: onnx.ModelProto,
                rng: np.random.Generator) -> Comparison | None:
    """Run both graphs on the same points; None when the candidate's inputs are unknown to the reference.

    Raises Unrunnable when the candidate cannot run here.
    """
    ref_tensors = _tensor_names(reference)
    feeds, from_ref = {}, []
    for vi in real_inputs(candidate.graph):
        if vi.name in ref_feeds:
            value = ref_feeds[vi.name]
            feeds[vi.name] = value if fits(value, vi) else random_value(vi, rng, value)
        elif vi.name in ref_tensors:
            from_ref.append(vi.name)
        else:
            return None
    candidate_session = session(candidate)  # fail early (Unrunnable) before spending a reference run
    ref_in = {**ref_feeds, **{k: v for k, v in feeds.items() if k in ref_feeds}}
    outs = [o.name for o in candidate.graph.output]
    wanted = [n for n in dict.fromkeys(outs + from_ref) if n in ref_tensors]
    expected = run(reference, ref_in, [n for n in wanted if n not in {o.name for o in reference.graph.output}])
    feeds.update({n: expected[n] for n in from_ref})
    got = run_session(candidate_session, feeds)
    return Comparison(feeds, got, {n: expected[n] for n in outs if n in expected},
                      [n for n in outs if n not in expected])


def _tensor_names(model: onnx.ModelProto) -> set[str]:
    g = model.graph
    return {i.name for i in g.input} | {o for n in g.node for o in n.output if o} | {t.name for t in g.initializer}


def first_difference(expected: dict[str, Any], got: dict[str, Any], atol: float, rtol: float) -> str | None:
    """A sentence naming the first output that differs beyond tolerance, or None."""
    for name, ref in expected.items():
        if name not in got:
            return f"output {name!r} is gone"
        why = _differs(ref, got[name], atol, rtol)
        if why:
            return f"output {name!r} {why}"
    return None


def _differs(ref: Any, got: Any, atol: float, rtol: float) -> str | None:
    if isinstance(ref, (list, tuple)) or isinstance(got, (list, tuple)):
        if not isinstance(got, (list, tuple)) or not isinstance(ref, (list, tuple)) or len(ref) != len(got):
            return "changed its sequence length"
        return next((f"[{i}] {w}" for i, (r, g) in enumerate(zip(ref, got, strict=True))
                     if (w := _differs(r, g, atol, rtol))), None)
    if ref is None or got is None:
        return None if ref is got else "changed presence (optional value)"
    ref, got = np.asarray(ref), np.asarray(got)
    if ref.shape != got.shape:
        return f"changed shape {list(ref.shape)} -> {list(got.shape)}"
    if ref.dtype != got.dtype:
        return f"changed dtype {ref.dtype} -> {got.dtype}"
    if ref.dtype == object or ref.dtype == np.bool_ or np.issubdtype(ref.dtype, np.integer):
        return None if np.array_equal(ref, got) else "changed values (exact type)"
    if np.allclose(got, ref, atol=atol, rtol=rtol, equal_nan=True):
        return None
    diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    return f"differs: max abs diff {float(np.nanmax(diff)):.3g} (atol={atol}, rtol={rtol})"
