"""Run stages in order: check declared kinds, consult the cache, publish, record lineage."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploykit import tracing
from deploykit.config import Config
from deploykit.config.surface import spelled
from deploykit.errors import (
    ArtifactCorrupt,
    DeployKitError,
    DiskFull,
    EnvironmentProblem,
    GateFailed,
    InternalError,
    TimeLimitExceeded,
    UsageError,
    disk_full,
    disk_nearly_full,
    is_disk_full,
)
from deploykit.pipeline.result import RunResult, StageRecord
from deploykit.progress import Reporter, SilentReporter
from deploykit.safety import thirdparty
from deploykit.safety.limits import time_limit
from deploykit.stages.base import Stage, StageContext
from deploykit.store.artifacts import MANIFEST, Artifact, Manifest, Store, recipe_key
from deploykit.store.environment import device_fingerprint, tool_versions
from deploykit.store.hashing import canonical


@dataclass
class _Run:
    ctx: StageContext
    stages: Sequence[Stage]
    whole: bool = True  # every stage was asked for (no ``until``)
    roles: dict[str, Artifact] = field(default_factory=dict)
    records: list[StageRecord] = field(default_factory=list)
    failures: list[GateFailed] = field(default_factory=list)


def run_pipeline(
    config: Config,
    store: Store,
    stages: Sequence[Stage],
    *,
    reporter: Reporter | None = None,
    until: str | None = None,
    rerun: Sequence[str] = (),
) -> RunResult:
    """Run ``stages`` (up to and including ``until``); reuse artifacts whose recipe exists.

    Gate failures (parity, targets) do not stop later stages: every report gets written. Any other
    error stops the run. Either way the error carries the partial result as ``error.result``.
    """
    known = [s.name for s in stages]
    for flag, names in (
        (spelled("rerun=", "--rerun"), rerun),
        ("until=", [until] if until else []),
        ("limits.stage_timeouts", list(config.limits.stage_timeouts)),
    ):
        for name in names:
            if name not in known:
                raise UsageError(f"{flag} {name!r}: no such stage (stages: {', '.join(known)})")
    run = _Run(StageContext(config, store, reporter or SilentReporter()), stages, whole=until is None)
    # what libraries log, warn or print on stderr goes to WORKDIR/third-party.log
    with thirdparty.logged_to(store.root):
        planned = _planned(stages, run.ctx, until)
        for stage in planned:
            stage.preflight(run.ctx)
        for stage in planned:
            try:
                _run_stage(run, stage, force=stage.name in rerun or stage.fresh_every_run(run.ctx))
            except DeployKitError as e:
                e.result = _result(run, config, e)  # type: ignore[attr-defined]
                raise
    result = _result(run, config, run.failures[0] if run.failures else None)  # the record says why it failed
    if run.failures:
        run.failures[0].result = result  # type: ignore[attr-defined]
        raise run.failures[0]
    return result


def _planned(stages: Sequence[Stage], ctx: StageContext, until: str | None) -> list[Stage]:
    out = []
    for stage in stages:
        if stage.applies(ctx):
            out.append(stage)
        if stage.name == until:
            break
    return out


def _run_stage(run: _Run, stage: Stage, force: bool) -> None:
    ctx, start = run.ctx, time.perf_counter()
    ctx.reporter.event("stage_start", stage=stage.name)
    note = ""
    try:
        with (
            time_limit(ctx.config.limits.timeout(stage.name), f"stage {stage.name}"),
            _environment_errors(stage),
            tracing.span(f"stage {stage.name}"),
        ):
            parents = _parents(run, stage)
            key_config, env = canonical(stage.key_config(ctx)), stage.key_env(ctx)
            key = recipe_key(stage.name, stage.version, parents, key_config, env)
            artifact = None if force else ctx.store.lookup(key)
            if artifact is not None:
                _check_reuse(ctx.store, artifact, key, env)
                note = stage.reuse_note(artifact)
            status = "reused" if artifact else "ran"
            if artifact is None:
                artifact = _execute(run, stage, key, parents, key_config)
    except DeployKitError as e:
        seconds = time.perf_counter() - start
        run.records.append(StageRecord(stage.name, "failed", seconds, None, str(e)))
        ctx.reporter.event("stage_end", stage=stage.name, status="failed", seconds=seconds, error=str(e))
        raise
    seconds = time.perf_counter() - start
    for role in stage.output_roles:
        run.roles[role] = artifact
    try:
        stage.verdict(artifact)
        error = ""
    except GateFailed as e:
        run.failures.append(e)
        error = str(e)
    run.records.append(StageRecord(stage.name, status, seconds, artifact, error, note))
    ctx.reporter.event(
        "stage_end",
        stage=stage.name,
        status=status,
        seconds=seconds,
        digest=artifact.digest,
        passed=not error,
        **({"note": note} if note else {}),
    )


def _check_reuse(store: Store, artifact: Artifact, key: str, env: dict[str, Any]) -> None:
    """A reused artifact must be what its recipe says: its manifest's stage, version, parents and
    config hash to the recipe key with this machine's toolchain, and a stage whose key holds the device
    (a measurement, a device-specific build) was made on this device. Anything else was moved or
    rewritten by hand: ArtifactCorrupt, never a silent reuse."""
    m = artifact.manifest
    where = store.root / "objects" / artifact.digest / MANIFEST
    if recipe_key(m.stage, m.stage_version, m.parents, m.config, env) != key:
        raise ArtifactCorrupt(
            f"{where}: its stage, parents or config are not those of recipe {key[:12]}, which names it",
            hint=f"delete {store.root / 'recipes' / key} and rerun; see `deploykit artifacts verify`",
        )
    device = env.get("device")
    if device is not None and canonical(m.device) != canonical(device):
        raise ArtifactCorrupt(
            f"{where}: made on another machine ({_machine(m.device)}), not this one "
            f"({_machine(device)}), though its recipe is keyed to this machine",
            hint=f"delete {store.root / 'recipes' / key} and rerun to measure here; a "
            "measurement from another device is never reused",
        )


def _machine(device: Any) -> str:
    if not isinstance(device, dict):
        return repr(device)[:80]
    features = device.get("features")
    listed = f", {' '.join(map(str, features))}" if isinstance(features, list) else ""
    return f"{device.get('model', '?')}{listed}"


@contextlib.contextmanager
def _environment_errors(stage: Stage) -> Iterator[None]:
    """A full disk or exhausted memory is the machine's problem, whatever error it surfaced as."""
    try:
        yield
    except DeployKitError as e:
        timeout = _in_chain(e, lambda x: isinstance(x, TimeLimitExceeded))
        if timeout is not None and timeout is not e:
            raise timeout from e  # a stage's own error handling wrapped the deadline
        full = _in_chain(e, lambda x: isinstance(x, OSError) and is_disk_full(x))
        if full is not None and not isinstance(e, DiskFull):
            raise disk_full(full, f"stage {stage.name}") from e
        raise
    except MemoryError as e:
        raise EnvironmentProblem(
            f"stage {stage.name}: out of memory", hint="free memory, or lower the dims, batch sizes or sample counts"
        ) from e
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(e, f"stage {stage.name}") from e
        raise


def _in_chain(e: BaseException | None, match: Callable[[BaseException], bool]) -> BaseException | None:
    """The first exception in ``e``'s cause/context chain that ``match``es."""
    for _ in range(50):
        if e is None or match(e):
            return e
        e = e.__cause__ or e.__context__
    return None


def _parents(run: _Run, stage: Stage) -> dict[str, str]:
    parents = {}
    for role, kind in stage.inputs.items():
        artifact = run.roles.get(role)
        if artifact is None or artifact.kind != kind:
            got = artifact.kind if artifact else "nothing"
            raise InternalError(f"stage {stage.name!r} needs a {kind!r} artifact as {role!r}, the pipeline has {got}")
        parents[role] = artifact.digest
    return parents


def _execute(run: _Run, stage: Stage, key: str, parents: dict[str, str], key_config: object) -> Artifact:
    ctx = run.ctx
    inputs = {role: run.roles[role] for role in stage.inputs}
    with ctx.store.staging(stage.name) as tmp:
        start = time.perf_counter()
        ctx.recipe = key_config
        try:
            summary = stage.run(ctx, inputs, tmp).to_dict()
        except (DeployKitError, OSError) as e:
            # A library that hit the full disk may say only "serialization failed": check while the
            # partial output still fills it.
            if not isinstance(e, DiskFull) and disk_nearly_full(tmp):
                raise disk_full(None, f"stage {stage.name}: while writing to {ctx.store.root}") from e
            raise
        finally:
            ctx.recipe = None
        manifest = Manifest(
            kind=stage.output_kind,
            stage=stage.name,
            stage_version=stage.version,
            recipe_key=key,
            config=key_config,
            parents=parents,
            files={},
            tools=tool_versions(),
            device=device_fingerprint(),
            timings={"run_s": round(time.perf_counter() - start, 4)},
            summary=summary,
            measured=sorted(stage.measured),
        )
        return ctx.store.publish(tmp, manifest)


def _result(run: _Run, config: Config, error: DeployKitError | None = None) -> RunResult:
    """The run's result with its record, written to the store (``records/<identity>.json``) once a stage ran."""
    from deploykit.record import model as records
    from deploykit.record.collect import build_record

    store = run.ctx.store
    rows = [
        records.StageStatus(
            r.stage,
            r.status,
            round(r.seconds, 4),
            r.artifact.digest if r.artifact else "",
            r.artifact.kind if r.artifact else "",
            r.artifact.manifest.created if r.artifact else "",
            r.error,
            r.note,
        )
        for r in run.records
    ]
    produced = {r.stage: r.artifact for r in run.records if r.artifact is not None}
    q = config.quantize
    identity = (config.name, q.precision, config.build.backend, q.flavour(config.build.backend) if q.enabled else "")
    record = build_record(identity, rows, produced, run.stages, store, error=error)
    # A partial run (`deploykit export`, `parity`, ...) is recorded unless a record of the whole
    # pipeline exists: `deploykit report NAME` keeps showing the last complete verdict.
    stored = None if run.whole else records.stored(store.root, record.identity)
    if run.records and (run.whole or stored is None or stored.details.get("partial")):
        if not run.whole:
            record.details["partial"] = True
        records.write(store, record)
        if error is None or isinstance(error, GateFailed):  # what a finished run made (a failed check finishes)
            store.name_run(record.identity, {role: a.digest for role, a in run.roles.items()})
    return RunResult(config.name, list(run.records), dict(run.roles), store.root, record, config)
