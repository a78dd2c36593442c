"""Run a plan on an executor: jobs start when the shared jobs they build on are done, results land in
the driver's store as each job finishes, and a view redraws after every change.

The driver's store keeps, per job, the digests it ended with (``runs/matrix-<key>.json``, the
ledger) and per cell a human run name (``runs/<model>.<precision>.<target>.json``). Everything is
written as each job finishes, so a matrix stopped by Ctrl-C or a killed driver keeps every finished
cell; the next run sends those artifacts back to the workers, whose pipelines reuse them wherever
their recipe keys match, so only missing or failed work runs again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from deploykit.errors import DeployKitError, EnvironmentProblem, InternalError, UsageError
from deploykit.matrix import result as R
from deploykit.matrix.plan import Cell, Job, Plan, unsatisfiable
from deploykit.matrix.results import RunRecord, StageRun, error_record, is_gate_failure
from deploykit.matrix.transfer import has, unpack
from deploykit.matrix.worker import JobOutcome, JobSpec
from deploykit.store.artifacts import Store


class Executor(Protocol):
    name: str

    def nodes(self) -> dict[str, dict[str, float]]: ...
    def can_start(self, job: Job) -> bool: ...
    def submit(self, job: Job, spec: JobSpec, inputs: list[tuple[str, list[str]]]) -> None: ...
    def wait(self, timeout: float) -> list[tuple[str, JobOutcome | DeployKitError]]: ...
    def busy(self) -> bool: ...
    def events(self) -> list[dict[str, Any]]: ...
    def cancel(self) -> None: ...


class View(Protocol):
    def update(self, result: R.MatrixResult) -> None: ...


@dataclass
class _State:
    job: Job
    status: str = "waiting"  # waiting | running | done | failed | skipped
    record: RunRecord | None = None
    attempts: int = 0
    node: str = ""
    stage: str = ""
    live: list[StageRun] = field(default_factory=list)  # stages finished so far (from events)
    seconds: float = 0.0  # what the worker measured
    submitted: float = 0.0  # wall-clock times: the worker reports its start in the same clock
    started: float = 0.0
    wall: float = 0.0  # what the driver saw: submit to result, scheduling and transfers included
    transfer: dict[str, float] = field(default_factory=dict)


class Driver:
    def __init__(
        self,
        name: str,
        plan: Plan,
        executor: Executor,
        store: Store,
        view: View | None = None,
        rerun: tuple[str, ...] = (),
    ) -> None:
        self.name, self.plan, self.executor, self.store, self.view, self.rerun = (
            name,
            plan,
            executor,
            store,
            view,
            rerun,
        )
        self.states = {jid: _State(job) for jid, job in plan.jobs.items()}
        self.start = time.perf_counter()
        self.interrupted = False

    def run(self) -> R.MatrixResult:
        self._refuse_unschedulable()
        try:
            while self._step():
                pass
        except KeyboardInterrupt:
            self.interrupted = True
            self.executor.cancel()
        return self.snapshot(final=True)

    def _refuse_unschedulable(self) -> None:
        """A job no node can run fails now, with what it asked for and what the nodes have."""
        nodes = self.executor.nodes()
        targets = {c.id: c.target.name for c in self.plan.cells}
        for state in self.states.values():
            reason = unsatisfiable(state.job.requests, nodes)
            if reason:
                what = f"target {targets[state.job.id]}" if state.job.kind == "cell" else "a shared job"
                self._close(
                    state,
                    error_record(
                        EnvironmentProblem(
                            f"{what} cannot be scheduled: {reason}",
                            hint="fix the target's resources in the matrix file, or add a node that has them",
                        )
                    ),
                    "failed",
                )
        for state in reversed(list(self.states.values())):  # shared work no schedulable cell needs
            if (
                state.job.kind == "shared"
                and state.status == "waiting"
                and all(self.states[c].status != "waiting" for c in state.job.cells)
            ):
                self._close(state, RunRecord(error="no cell that needs it can be scheduled"), "skipped")

    def _step(self) -> bool:
        if not self._start_ready() and not self.executor.busy():
            for state in (s for s in self.states.values() if s.status == "waiting"):  # never wait forever
                self._close(state, error_record(InternalError(f"{state.job.id}: never became ready")), "skipped")
            return False
        for jid, outcome in self.executor.wait(0.2):
            self._events()
            self._finish(self.states[jid], outcome)
        self._events()
        if self.view is not None:
            self.view.update(self.snapshot())
        return True

    def _start_ready(self) -> bool:
        started = False
        for state in self.states.values():
            if state.status != "waiting":
                continue
            deps = [self.states[d] for d in state.job.deps]
            bad = next((d for d in deps if d.status in ("failed", "skipped")), None)
            if bad is not None:
                record = bad.record or RunRecord(exit_code=70, error="no record")
                self._close(
                    state,
                    RunRecord(exit_code=record.exit_code, error=f"shared job {bad.job.id} failed: {record.error}"),
                    "skipped",
                )
                continue
            if all(d.status == "done" for d in deps) and self.executor.can_start(state.job):
                self._submit(state)
                started = True
        return started

    def _submit(self, state: _State) -> None:
        job = state.job
        inputs: list[tuple[str, list[str]]] = []
        if self.executor.name != "local":  # the local pool reads the driver's store itself
            if job.deps:
                dep = self.states[job.deps[-1]]
                inputs.append((f"job:{dep.job.id}", list(dep.record.digests.values()) if dep.record else []))
            seed = self._ledger(job)
            if seed:
                inputs.append((f"seed:{job.id}", seed))
        shared = {name for j in self.plan.jobs.values() if j.kind == "shared" for name in j.stages}
        owned = set(job.stages) if job.kind == "shared" else {s for s in self.rerun if s not in shared}
        spec = JobSpec(
            job.id, str(job.config_path), job.overrides, job.until, tuple(s for s in self.rerun if s in owned)
        )
        state.submitted = time.time()
        self.executor.submit(job, spec, inputs)
        state.status = "running"

    def _ledger(self, job: Job) -> list[str]:
        """What an earlier run of this job left in the driver's store."""
        try:
            refs = self.store.run_refs(job.key)
        except UsageError:
            return []
        return [d for d in dict.fromkeys(refs.values()) if has(self.store, d)]

    def _events(self) -> None:
        for event in self.executor.events():
            state = self.states.get(event.get("job", ""))
            if state is None:
                continue
            name = event.get("event")
            if name == "job_start":
                state.attempts += 1
                state.started = state.started or float(event.get("time", 0.0))
                state.node, state.live, state.stage = event.get("node", ""), [], ""
            elif name == "stage_start":
                state.stage = event.get("stage", "")
            elif name == "stage_end":
                state.stage = ""
                state.live.append(
                    StageRun(
                        event.get("stage", ""),
                        event.get("status", ""),
                        float(event.get("seconds", 0.0)),
                        event.get("digest", ""),
                    )
                )

    def _finish(self, state: _State, outcome: JobOutcome | DeployKitError) -> None:
        state.wall = round(time.time() - state.submitted, 4)
        if isinstance(outcome, DeployKitError):
            self._close(state, error_record(outcome), "failed")
            return
        state.node, state.seconds, state.transfer = outcome.node, outcome.seconds, dict(outcome.transfer)
        record = outcome.record
        try:
            if outcome.package:
                t0 = time.perf_counter()
                unpack(self.store, outcome.package, origin=f"{state.job.id} from {outcome.node}")
                state.transfer["import_s"] = round(time.perf_counter() - t0, 4)
            if record.digests:
                self.store.name_run(state.job.key, record.digests)
            if state.job.kind == "cell" and record.roles:
                self.store.name_run(state.job.id.replace("/", "."), record.roles)
        except DeployKitError as e:
            record = RunRecord(record.stages, e.exit_code, str(e), record.parity, record.gate)
        ok = record.exit_code == 0 or is_gate_failure(record.exit_code)  # a failed check still has its reports
        self._close(state, record, "done" if ok else "failed")

    def _close(self, state: _State, record: RunRecord, status: str) -> None:
        state.record, state.status, state.stage = record, status, ""

    # -- results ---------------------------------------------------------------------------------

    def snapshot(self, final: bool = False) -> R.MatrixResult:
        cells = tuple(self._cell(c, final) for c in self.plan.cells)
        jobs = tuple(self._job(s) for s in self.states.values() if s.job.kind == "shared")
        nodes = tuple(sorted({s.node for s in self.states.values() if s.node}))
        return R.MatrixResult(
            self.name,
            self.executor.name,
            self.store.root,
            time.perf_counter() - self.start,
            cells,
            jobs,
            self.interrupted and final,
            nodes,
        )

    @staticmethod
    def _queued(state: _State) -> float:
        return round(max(0.0, state.started - state.submitted), 4) if state.started else 0.0

    def _job(self, state: _State) -> R.JobResult:
        record = state.record or RunRecord()
        return R.JobResult(
            state.job.id,
            state.job.kind,
            state.job.stages,
            record.stages or tuple(state.live),
            record.exit_code,
            record.error,
            state.attempts,
            state.node,
            state.seconds,
            len(state.job.cells),
            state.wall,
            self._queued(state),
            state.transfer,
        )

    def _cell(self, cell: Cell, final: bool) -> R.CellResult:
        base = {"id": cell.id, "model": cell.model, "precision": cell.precision, "target": cell.target.name}
        if cell.error is not None:
            return R.CellResult(**base, status=R.ERROR, exit_code=cell.error.exit_code, error=str(cell.error))
        state = self.states[cell.id]
        record = state.record
        shared = tuple(self.plan.jobs[cell.id].deps)
        if record is None:  # still to finish (a live view), or stopped by an interrupt
            status = (
                R.INTERRUPTED if final else f"running {state.stage}".strip() if state.status == "running" else "waiting"
            )
            return R.CellResult(
                **base,
                status=status,
                exit_code=130 if final else 0,
                attempts=state.attempts,
                node=state.node,
                stages=tuple(state.live),
                shared=shared,
            )
        status = (
            R.SKIPPED
            if state.status == "skipped"
            else R.PASSED
            if record.exit_code == 0
            else R.FAILED
            if is_gate_failure(record.exit_code)
            else R.ERROR
        )
        return R.CellResult(
            **base,
            status=status,
            exit_code=record.exit_code,
            error=record.error,
            attempts=state.attempts,
            node=state.node,
            seconds=state.seconds,
            wall=state.wall,
            queued=self._queued(state),
            stages=record.stages,
            shared=shared,
            parity=record.parity,
            gate=record.gate,
            transfer=state.transfer,
        )
