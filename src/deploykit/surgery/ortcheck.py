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

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from deploykit.graph.proto import custom_ops, expose_tensors, real_inputs
from deploykit.graph.run import OrtSession, SessionError, session_from_onnx


class Unrunnable(Exception):
    """ONNX Runtime cannot run the graph because it holds ops no runtime here implements."""


def session(model: onnx.ModelProto) -> OrtSession:
    """A CPU session with graph optimizations off: we check the graph as written, not ORT's rewrite.

    Raises Unrunnable when the graph holds custom ops without a body, SessionError otherwise.
    """
    try:
        return session_from_onnx(model, "onnxruntime", level="disabled")
    except SessionError as e:
        ops = custom_ops(model)
        if ops:
            raise Unrunnable(f"ONNX Runtime cannot run custom op(s) {', '.join(ops)}") from e
        raise


def run(model: onnx.ModelProto, feeds: dict[str, Any], extra_outputs: list[str] = ()) -> dict[str, Any]:
    """Run ``model``; also return the inner tensors named in ``extra_outputs`` (main graph only)."""
    if extra_outputs:
        model = expose_tensors(model, extra_outputs)
    return session(model).run_all(feeds)


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
    return all(
        not (d.HasField("dim_value") and d.dim_value > 0) or d.dim_value == s
        for d, s in zip(dims, value.shape, strict=True)
    )


@dataclass
class Comparison:
    """Outputs of the candidate and the reference on the same feeds."""

    feeds: dict[str, Any]
    got: dict[str, Any]
    expected: dict[str, Any]
    unmatched: list[str] = field(default_factory=list)  # candidate outputs the reference lacks


def compare_run(
    reference: onnx.ModelProto, ref_feeds: dict[str, Any], candidate: onnx.ModelProto, rng: np.random.Generator
) -> Comparison | None:
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
    got = candidate_session.run_all(feeds)
    return Comparison(
        feeds, got, {n: expected[n] for n in outs if n in expected}, [n for n in outs if n not in expected]
    )


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
        return next(
            (f"[{i}] {w}" for i, (r, g) in enumerate(zip(ref, got, strict=True)) if (w := _differs(r, g, atol, rtol))),
            None,
        )
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
