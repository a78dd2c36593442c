"""When a stage after export fails on one exporter's graph, try the other exporter's graph.

``exporter: auto`` picks dynamo and falls back to TorchScript only when dynamo raises; a graph that
exports fine can still break a later stage (a DETR-style dynamo graph broke INT8 on a ``Range``
node, and FP16 on dim names that ONNX Runtime's buffer reuse rejected, where the TorchScript graph
passed both). So when a stage cannot process the graph (a ModelError or DataError: exit 4; never an
artifact that does not verify), the pipeline runs once more, up to that stage, with the other
exporter: when that passes, the error says so and names the one switch to retry with. A missed
tolerance or FPS target does not trigger it.
The trial run's artifacts stay in the store, so the retry reuses them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from deploykit.config import Config
from deploykit.config.surface import spelled
from deploykit.errors import ArtifactCorrupt, DataError, DeployKitError, ModelError

OTHER = {"dynamo": "torchscript", "torchscript": "dynamo"}


def explain_with_other_exporter(error: DeployKitError, config: Config, store: Any, stages: list[Any]) -> None:
    """Add to ``error`` (raised by a run of ``config``) whether the other exporter's graph passes the
    failed stage; leave it untouched when that does not apply (not auto, failed at export, not a
    stage that could not process the graph)."""
    from deploykit.pipeline.runner import run_pipeline

    failed, used = _failure(error, config)
    if failed is None or used not in OTHER:
        return
    other = OTHER[used]
    suffix = f"-{other}"  # a run name of its own (an identifier: it names the run's files)
    trial = dataclasses.replace(
        config,
        name=config.name[: 128 - len(suffix)] + suffix,
        export=dataclasses.replace(config.export, exporter=other),
    )
    try:
        run_pipeline(trial, store, stages, until=failed)
    except DeployKitError as e:
        if _failed_stage(getattr(e, "result", None)) == "export":
            return  # the other exporter cannot export this model: auto's choice was the only one
        error.hint = _join(
            error.hint,
            f"the {other} exporter's graph fails at {_failed_stage(getattr(e, 'result', None)) or failed} "
            f"too (run {trial.name!r})",
        )
        return
    error.message = (
        f"{error.message} [the {failed} stage fails on the {used} exporter's graph; the {other} "
        f"exporter's graph passes it]"
    )
    switch = spelled(f"export__exporter={other!r}", f"--set export.exporter={other}")
    error.hint = _join(
        f"rerun with {switch} (export.exporter: {other} in the config; its artifacts are in the store already)",
        error.hint,
    )


def _failure(error: DeployKitError, config: Config) -> tuple[str | None, str]:
    """(the stage that failed, the exporter the failed run used), or (None, '') when not applicable."""
    result = getattr(error, "result", None)
    if not config.source.is_torch or config.export.exporter != "auto" or result is None:
        return None, ""
    if not isinstance(error, (ModelError, DataError)) or _from_the_store(error):
        # a stage that could not process the graph (exit 4); a missed tolerance or target is about
        # numerics or speed, config or environment problems are not the exporter's either, and a
        # store that does not verify (an edited, forged or corrupt artifact) is never the graph's
        return None, ""
    failed = _failed_stage(result)
    export = next((r for r in result.stages if r.stage == "export" and r.artifact is not None), None)
    if failed in (None, "export") or export is None:
        return None, ""
    return failed, str(export.artifact.manifest.summary.get("exporter", ""))


def _from_the_store(error: BaseException) -> bool:
    """Whether ``error`` was raised from (or while handling) an artifact that does not verify."""
    seen: BaseException | None = error
    for _ in range(50):
        if seen is None:
            return False
        if isinstance(seen, ArtifactCorrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _failed_stage(result: Any) -> str | None:
    if result is None:
        return None
    return next((r.stage for r in result.stages if r.status == "failed" or r.error), None)


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)
