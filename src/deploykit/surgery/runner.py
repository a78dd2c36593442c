"""Run a list of passes, checking the graph after each one and reporting what changed."""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from deploykit.errors import ModelError, UsageError
from deploykit.surgery.base import Pass, PassError


def op_histogram(model: onnx.ModelProto) -> dict[str, int]:
    return dict(sorted(collections.Counter(n.op_type for n in model.graph.node).items()))


def run_passes(model: onnx.ModelProto, passes: list[Pass], feeds: dict[str, np.ndarray],
               *, atol: float, rtol: float, where: Path) -> tuple[onnx.ModelProto, list[dict[str, Any]]]:
    """Apply ``passes`` in order; return the model and one report per pass.

    After every pass: ONNX checker, shape inference, and (unless the pass declares it changes
    numerics) ONNX Runtime outputs on ``feeds`` equal to those before it, within atol/rtol.
    """
    reports = []
    expected = _outputs(model, feeds, where, "the input model")
    for p in passes:
        start, before = time.perf_counter(), op_histogram(model)
        try:
            p.requires(model)
            result = p.run(model)
            p.ensures(result.model)
        except PassError as e:
            raise ModelError(f"{where}: pass {p.name!r}: {e}") from e
        except (UsageError, ModelError):
            raise
        except Exception as e:
            raise ModelError(f"{where}: pass {p.name!r} raised {type(e).__name__}: {e}",
                             hint="a bug in the pass or a graph it does not support") from e
        _check_graph(result.model, p.name, where)
        if result.modified:
            got = _outputs(result.model, feeds, where, f"pass {p.name!r}'s output")
            if not p.changes_numerics:
                _compare(expected, got, p.name, atol, rtol, where)
            expected = got
        model = result.model
        after = op_histogram(model)
        reports.append({"pass": p.name, "modified": result.modified, "reason": result.reason,
                        "seconds": round(time.perf_counter() - start, 4),
                        "nodes_before": sum(before.values()), "nodes_after": sum(after.values()),
                        "ops_before": before, "ops_after": after, "details": result.details or {}})
    return model, reports


def _check_graph(model: onnx.ModelProto, name: str, where: Path) -> None:
    try:
        onnx.checker.check_model(model)
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ModelError(f"{where}: pass {name!r} produced an invalid graph: {str(e).strip().splitlines()[0]}",
                         hint="the pass is wrong for this graph; remove it or report the bug") from e


def _outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray], where: Path, what: str) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    try:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        opts.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        return dict(zip(names, sess.run(names, feeds), strict=True))
    except Exception as e:
        raise ModelError(f"{where}: ONNX Runtime cannot run {what}: {str(e).strip().splitlines()[0]}") from e


def _compare(expected: dict[str, np.ndarray], got: dict[str, np.ndarray], name: str, atol: float, rtol: float,
             where: Path) -> None:
    for out, ref in expected.items():
        if out not in got:
            raise ModelError(f"{where}: pass {name!r} removed output {out!r}", hint="passes that keep numerics must keep outputs")
        if got[out].shape != ref.shape or not np.allclose(got[out], ref, atol=atol, rtol=rtol, equal_nan=True):
            err = float(np.max(np.abs(got[out].astype(np.float64) - ref))) if got[out].shape == ref.shape else float("inf")
            raise ModelError(f"{where}: pass {name!r} changed output {out!r} (max abs diff {err:.3g}, "
                             f"tolerance atol={atol}, rtol={rtol})", hint="the pass is wrong for this graph; remove it")
