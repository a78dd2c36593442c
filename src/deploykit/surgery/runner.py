"""Run a list of passes, checking the graph after each one and reporting what changed.

After every pass: no dangling input or cycle, the ONNX checker, strict shape inference, and
(unless the pass declares it changes numerics) ONNX Runtime outputs equal to the last graph it
could run, within atol/rtol (see :mod:`deploykit.surgery.ortcheck` for how inputs and outputs are
matched across passes that change them). A failure names the pass, and the node or output.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from deploykit.errors import ConfigError, DeployKitError, InternalError, ModelError, first_line
from deploykit.graph.files import as_file, uses_file
from deploykit.graph.proto import graph_problems, op_histogram, real_inputs
from deploykit.surgery import ortcheck
from deploykit.surgery.base import Pass, PassConfigError, PassError, PassResult
from deploykit.surgery.graph import diff_nodes


class SurgeryWarning(UserWarning):
    """A pass did not apply where the user may have expected it to (e.g. a pattern matched nothing)."""


def run_passes(
    model: onnx.ModelProto,
    passes: list[Pass],
    feeds: dict[str, np.ndarray],
    *,
    atol: float,
    rtol: float,
    where: Path | str,
    check_numerics: bool = True,
) -> tuple[onnx.ModelProto, list[dict[str, Any]]]:
    """Apply ``passes`` in order; return the model and one report per pass.

    Args:
        model: the input graph (not modified).
        passes: instantiated passes (see :func:`deploykit.surgery.registry.instantiate`).
        feeds: inputs for the numeric check; missing inputs get random values of the declared shape.
        atol: absolute tolerance of the numeric check.
        rtol: relative tolerance of the numeric check.
        where: the model's path, for messages.
        check_numerics: run the ONNX Runtime check after each pass that changed the graph.

    Raises:
        ConfigError: a pass's parameters do not fit the model, or a user pass misbehaved (exit 2).
        ModelError: the model is unsound, or a pass broke it or its outputs (exit 4).
    """
    problems = graph_problems(model.graph)
    if problems:
        raise ModelError(
            f"{where}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""),
            hint="the exporter wrote a broken graph; re-export it or fix it before surgery",
        )
    valid = _graph_error(model) is None
    numerics = _Numerics(model, feeds, atol, rtol, where) if check_numerics else None
    reports = []
    for p in passes:
        start = time.perf_counter()
        result = _apply(p, model, where)
        for message in result.warnings:
            warnings.warn(f"surgery: pass {p.name!r}: {message}", SurgeryWarning, stacklevel=2)
        valid = _check_graph(result.model, p.name, where, valid)
        note = "unchanged" if not result.modified else numerics.after(p, result.model) if numerics else "not checked"
        reports.append(_report(p, model, result, time.perf_counter() - start, note))
        model = result.model
    return model, reports


def _apply(p: Pass, model: onnx.ModelProto, where: Path | str) -> PassResult:
    user = not type(p).__module__.startswith("deploykit.surgery.") or getattr(p, "user_function", False)
    try:
        p.requires(model)
        result = p.run(model)
        if not isinstance(result, PassResult) or not isinstance(result.model, onnx.ModelProto):
            got = type(result.model if isinstance(result, PassResult) else result).__name__
            raise ConfigError(
                f"{where}: pass {p.name!r} returned {got}, not a PassResult holding an onnx.ModelProto",
                hint="a pass returns PassResult(model, modified); a user function returns the model",
            )
        p.ensures(result.model)
        _check_declared_change(p, model, result, where, user)
    except PassConfigError as e:
        raise ConfigError(f"{where}: pass {p.name!r}: {_own(e, p)}", hint=e.hint or "fix the pass's parameters") from e
    except PassError as e:
        raise ModelError(f"{where}: pass {p.name!r}: {_own(e, p)}", hint=e.hint) from e
    except DeployKitError:
        raise
    except Exception as e:
        if user:
            raise ConfigError(
                f"{where}: user pass {p.name!r} raised {type(e).__name__}: {e}",
                hint="fix the pass; the Python API shows the traceback (the error is chained)",
            ) from e
        raise ModelError(
            f"{where}: pass {p.name!r} raised {type(e).__name__}: {e}",
            hint="a bug in the pass or a graph it does not support; remove the pass or report it",
        ) from e
    return result


def _check_declared_change(p: Pass, model: onnx.ModelProto, result: PassResult, where: Path | str, user: bool) -> None:
    """A pass that says it changed nothing must hand back the graph it got (its nodes, at least)."""
    if result.modified or result.model is model:
        return
    changes = diff_nodes(model.graph, result.model.graph)
    if any(changes.values()):
        error = ConfigError if user else InternalError
        raise error(
            f"{where}: pass {p.name!r} reported no change but changed nodes ({changes})",
            hint="a pass returns PassResult(model, modified=True) when it changes the graph",
        )


def _report(p: Pass, before: onnx.ModelProto, result: PassResult, seconds: float, numerics: str) -> dict[str, Any]:
    from deploykit.store.hashing import canonical

    ops_before, ops_after = op_histogram(before.graph), op_histogram(result.model.graph)
    changes = (
        diff_nodes(before.graph, result.model.graph)
        if result.modified
        else dict.fromkeys(("added", "removed", "modified"), 0)
    )
    return {
        "pass": p.name,
        "params": canonical(p.params),
        "modified": result.modified,
        "reason": result.reason,
        "seconds": round(seconds, 4),
        "nodes_before": sum(ops_before.values()),
        "nodes_after": sum(ops_after.values()),
        "nodes_added": changes["added"],
        "nodes_removed": changes["removed"],
        "nodes_modified": changes["modified"],
        "ops_before": ops_before,
        "ops_after": ops_after,
        "numerics": numerics,
        "warnings": list(result.warnings),
        "details": result.details or {},
    }


def _graph_error(model: onnx.ModelProto) -> str | None:
    """The first line of what the checker or strict shape inference says, or None when both pass."""
    problems = graph_problems(model.graph)
    if problems:
        return problems[0]
    try:
        if uses_file(model):
            with as_file(model) as path:
                onnx.checker.check_model(str(path))
                onnx.shape_inference.infer_shapes_path(
                    str(path), str(path.with_suffix(".inferred.onnx")), strict_mode=True
                )
        else:
            onnx.checker.check_model(model)
            onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        return first_line(e)
    return None


def _check_graph(model: onnx.ModelProto, name: str, where: Path | str, was_valid: bool) -> bool:
    """Raise when the pass broke a graph that was valid; return whether the result is valid.

    A graph that failed the checks before the pass (some ONNX node tests do) cannot blame the pass.
    """
    error = _graph_error(model)
    if error and was_valid:
        raise ModelError(
            f"{where}: pass {name!r} produced an invalid graph: {error}",
            hint="the pass is wrong for this graph; remove it or report the bug",
        )
    return error is None


class _Numerics:
    """The last graph ONNX Runtime could run, its feeds, and the comparison of each pass against it."""

    def __init__(
        self, model: onnx.ModelProto, feeds: dict[str, Any], atol: float, rtol: float, where: Path | str
    ) -> None:
        self.atol, self.rtol, self.where = atol, rtol, where
        self.rng = np.random.default_rng(0)
        self.feeds = self._complete(model, feeds)
        self.reference: onnx.ModelProto | None = model
        self.since = ""  # the pass after which the graph stopped being runnable
        try:
            ortcheck.session(model)
        except ortcheck.Unrunnable as e:
            self.reference, self.why = None, f"{e} in the input model"
        except Exception as e:
            raise ModelError(
                f"{where}: ONNX Runtime cannot run the input model: {_why(e)}",
                hint="check the model with `deploykit inspect`",
            ) from e

    def _complete(self, model: onnx.ModelProto, feeds: dict[str, Any]) -> dict[str, Any]:
        out = dict(feeds)
        for vi in real_inputs(model.graph):
            if vi.name not in out or not ortcheck.fits(out[vi.name], vi):
                out[vi.name] = ortcheck.random_value(vi, self.rng, out.get(vi.name))
        return out

    def after(self, p: Pass, model: onnx.ModelProto) -> str:
        """Check ``model`` (the output of ``p``); return a note for the report or raise ModelError."""
        if self.reference is None:
            return self._restart(p, model)
        try:
            cmp = ortcheck.compare_run(self.reference, self.feeds, model, self.rng)
        except ortcheck.Unrunnable as e:
            self.since = self.since or p.name
            return f"deferred: {e}; compared once a later pass makes the graph runnable"
        except Exception as e:
            raise ModelError(
                f"{self.where}: ONNX Runtime cannot run pass {p.name!r}'s output: {_why(e)}",
                hint="the pass is wrong for this graph; remove it or report the bug",
            ) from e
        if cmp is None:
            return self._restart(p, model, "its inputs are not tensors of the previous graph")
        span = f"passes {self.since!r}..{p.name!r}" if self.since else f"pass {p.name!r}"
        self.reference, self.feeds, self.since = model, cmp.feeds, ""
        if p.changes_numerics:
            return "not compared: the pass declares it changes numerics"
        diff = ortcheck.first_difference(cmp.expected, cmp.got, self.atol, self.rtol)
        if diff:
            raise ModelError(
                f"{self.where}: {span} changed numerics: {diff}",
                hint="the pass is wrong for this graph; remove it (or report the bug)",
            )
        new = f"; new outputs not compared: {', '.join(cmp.unmatched)}" if cmp.unmatched else ""
        return f"outputs match ({len(cmp.expected)} compared){new}"

    def _restart(self, p: Pass, model: onnx.ModelProto, why: str = "") -> str:
        """Take ``model`` as the new reference when nothing before it can be compared."""
        try:
            ortcheck.session(model)
        except ortcheck.Unrunnable as e:
            return f"not checked: {e}"
        except Exception as e:
            raise ModelError(
                f"{self.where}: ONNX Runtime cannot run pass {p.name!r}'s output: {_why(e)}",
                hint="the pass is wrong for this graph; remove it or report the bug",
            ) from e
        why = why or getattr(self, "why", "no earlier graph ONNX Runtime could run")
        self.reference, self.feeds = model, self._complete(model, self.feeds)
        return f"not compared: {why}; later passes are compared with this graph"


def _own(e: PassError, p: Pass) -> str:
    """The pass's message without its own name in front (the runner names the pass already)."""
    text = str(e)
    return text[len(p.name) + 2 :] if text.startswith(f"{p.name}: ") else text


def _why(e: BaseException) -> str:
    """What ONNX Runtime said (a refused session's own words), else the error's first line."""
    return getattr(e, "detail", "") or first_line(e)
