"""Judge a quantized graph exactly as parity will: its data, its elementwise tolerances, its task checks.

:class:`Judge` holds the FP32 reference outputs on the judging samples and runs a candidate through
the target flavour's evaluator into a :class:`deploykit.metrics.comparison.Comparison` built from
``config.parity``, the class the parity stage itself uses. So when the samples are parity's
validation samples, "the quantize check passed" means "parity will pass", up to the engine's
kernel rounding (and the torch reference, which quantization cannot change).

A search needs more than pass/fail: :class:`Measurement` keeps the raw numbers (worst elementwise
metrics per output, task metrics), which :func:`score` turns into one ratio per limit (<= 1 passes;
rel-L2 0.12 against 0.1 is 1.2, IoU 0.94 against 0.97 is (1 - 0.94) / (1 - 0.97) = 2). Measurements
do not depend on the limits, so a search cached at one tolerance is re-scored at another.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import numpy as np

from deploykit.metrics.tasks import LIMIT_FIELDS as TASK_LIMIT_FIELDS
from deploykit.quant.check import Check, Reference, weak_signal

if TYPE_CHECKING:
    import onnx

    from deploykit.config import ParityConfig, Tolerance
    from deploykit.graph.parallel import Background

RATIO_CAP = 1e3  # a NaN output or a zero limit missed counts this much, so states still order
_LESS = ("max_abs", "mean_abs", "rel_l2", "max_rel")  # checks where smaller is better
_MORE = ("cosine", "snr_db")
# Fields of the task checks that are limits: a measurement does not depend on them (tested).
LIMIT_FIELDS = frozenset(TASK_LIMIT_FIELDS)
_KEPT = (
    "max_abs",
    "mean_abs",
    "rel_l2",
    "max_rel",
    "cosine",
    "snr_db",
    "nonfinite",
    "ref_nonfinite",
    "ref_absmax",
    "ref_range",
)


@dataclass(frozen=True)
class Measurement:
    """What one candidate scored on ``samples`` samples: worst elementwise metrics per output (against
    the ONNX reference) and each task check's metrics; JSON-ready."""

    outputs: dict[str, dict[str, float]]
    tasks: list[dict[str, Any]]  # {"label", "kind", "metrics", "inconclusive"}
    samples: int
    # set where the judgement stopped once the candidate could no longer pass (Judge.measure's ``stop``):
    # the samples it ran; the values are then the best it could still reach on all ``samples``, so they
    # prove a failure only (a looser limit they would pass is measured again)
    ran: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"outputs": self.outputs, "tasks": self.tasks, "samples": self.samples}
        return out if self.ran is None else {**out, "ran": self.ran}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        return cls(data["outputs"], data["tasks"], data["samples"], data.get("ran"))


@dataclass(frozen=True)
class Score:
    """Ratios of each measured value to its limit; ``excess`` (how far past the limits, summed) is what
    a search drives to zero, ``objective`` breaks ties between passing states by their margin."""

    ratios: dict[str, float]
    values: dict[str, float] = field(default_factory=dict)  # the measured value behind each ratio
    ran: int | None = None  # the measurement's ``ran``: stopped early, the ratios the best it could reach

    @property
    def excess(self) -> float:
        return float(sum(max(r - 1.0, 0.0) for r in self.ratios.values()))

    @property
    def worst(self) -> float:
        return max(self.ratios.values(), default=0.0)

    @property
    def objective(self) -> float:
        mean = float(np.mean(list(self.ratios.values()))) if self.ratios else 0.0
        return self.excess + 0.01 * mean

    @property
    def passed(self) -> bool:
        return all(r <= 1.0 for r in self.ratios.values())

    def failing(self) -> list[str]:
        return [f"{k} {r:.3g}x its limit" for k, r in sorted(self.ratios.items(), key=lambda kv: -kv[1]) if r > 1]


def score(measurement: Measurement, parity: ParityConfig, preset: Tolerance) -> Score:
    """One ratio per checked limit (<= 1 passes); vacuous checks are left out (no precision helps)."""
    from deploykit.metrics.tasks import build_tasks, max_abs_exempt

    exempt = max_abs_exempt(parity.tasks)
    ratios: dict[str, float] = {}
    values: dict[str, float] = {}
    for name, m in measurement.outputs.items():
        tol = parity.tolerance(name, preset)
        if m.get("nonfinite", 0) > 0:
            ratios[f"{name}.nonfinite"], values[f"{name}.nonfinite"] = RATIO_CAP, m["nonfinite"]
        for key in (*_LESS, *_MORE) if parity.elementwise_judged else ():
            limit = getattr(tol, key)
            if limit is None or key not in m or (key == "max_abs" and name in exempt):
                continue
            ratios[f"{name}.{key}"], values[f"{name}.{key}"] = _ratio(m[key], limit, key in _MORE, key), m[key]
    tasks = {t.label: t for t in build_tasks(parity.tasks)}
    for entry in measurement.tasks:
        task = tasks.get(entry["label"])
        if task is None or entry.get("inconclusive"):
            continue
        for metric, op, limit in task.judged(parity.judge):
            key, value = f"{entry['label']}.{metric}", entry["metrics"][metric]
            ratios[key], values[key] = _ratio(value, limit, op == ">=", metric), value
    return Score(ratios, values, measurement.ran)


def task_losses(measurement: Measurement, parity: ParityConfig) -> dict[str, float]:
    """Each limited task metric as a loss (smaller is better: a fraction that must reach its limit is
    negated), whatever its limit: what range sets are ordered by when no limit decides."""
    from deploykit.metrics.tasks import build_tasks

    tasks = {t.label: t for t in build_tasks(parity.tasks)}
    losses: dict[str, float] = {}
    for entry in measurement.tasks:
        task = tasks.get(entry["label"])
        if task is None or entry.get("inconclusive"):
            continue
        for metric, op, _ in task.judged(parity.judge):
            losses[f"{entry['label']}.{metric}"] = _loss(entry["metrics"][metric], op)
    return losses


def _loss(value: Any, op: str) -> float:
    return math.inf if _missing(value) else (-value if op == ">=" else value)


def rank_sums(losses: dict[str, dict[str, float]]) -> dict[str, float]:
    """Per candidate, the sum over metrics of its rank among the candidates (1 = smallest loss; equal
    values share the mean rank). Ranks, not ratios to the limits: against a limit of zero (class
    flips) one flip would outweigh every other metric."""
    sums = dict.fromkeys(losses, 0.0)
    for key in sorted({k for r in losses.values() for k in r}):
        values = {m: r.get(key, math.inf) for m, r in losses.items()}
        for m, v in values.items():
            sums[m] += sum(1 for w in values.values() if w < v) + (sum(1 for w in values.values() if w == v) + 1) / 2
    return sums


def _missing(value: Any) -> bool:
    """A metric that could not be computed (None, or NaN from a non-finite output)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _ratio(value: float, limit: float, at_least: bool, key: str) -> float:
    if _missing(value):
        return RATIO_CAP
    if key == "snr_db":  # decibels: compare the error amplitudes they stand for
        return float(min(RATIO_CAP, 10.0 ** ((limit - value) / 20.0)))
    if at_least:  # fractions (cosine, IoU, top-1, recall): compare the shortfalls from 1
        gap, allowed = 1.0 - value, 1.0 - limit
    else:
        gap, allowed = value, limit
    if math.isinf(allowed):
        return 0.0
    if allowed <= 0:
        return 0.0 if gap <= 0 else RATIO_CAP
    return float(min(RATIO_CAP, max(gap, 0.0) / allowed))


@dataclass
class Judging:
    """What the quantize stage's check and search are judged by (the stage fills it from the config).

    ``samples``: parity's validation samples in parity's order, or None: then the held-out
    calibration samples judge (parity itself will run on random inputs, so its verdict can differ).
    ``reference``: parity's FP32 reference graph (before surgery), or None: the stage's input graph.
    """

    parity: ParityConfig | None = None  # None: default parity settings with the precision's preset
    samples: list[dict[str, np.ndarray]] | None = None
    source: str = ""
    reference: onnx.ModelProto | None = None


Runner = Callable[[dict[str, np.ndarray]], dict[str, Any]]  # one open graph: a sample's feeds -> its outputs
Candidate: TypeAlias = "onnx.ModelProto | Callable[[], onnx.ModelProto]"  # a graph, or what builds it (Judge.measure)


OPEN_RUNS = 2  # candidates whose session stays open, so a judgement on more samples extends the one on fewer


@dataclass
class Judge:
    """The reference outputs on the judging samples, and the evaluator candidates run through.

    A candidate is identified by ``key`` where the caller has one (the search: its patch), else by
    its bytes' digest. What a candidate scored on its first ``n`` samples is kept, so the same graph
    judged again on those samples is not run again (method ``auto``'s chosen graph is the base the
    check then judges), and a judgement on more samples runs only the samples it adds (a search state
    confirmed on every sample after passing on a few).

    Args:
        reference: the FP32 graph (parity's reference when the stage has it).
        samples: the judging samples, in parity's order when they are parity's.
        opener: the target flavour's evaluator (``quantize._opener``).
        parity: the parity config whose tolerances and task checks apply.
        preset: the tolerance preset for the precision (``config.parity_preset``).
        precision: the quantize precision (for the Comparison's report).
        source: a sentence saying where the samples come from.
    """

    reference: onnx.ModelProto
    samples: list[dict[str, np.ndarray]]
    opener: Callable[..., Any]
    parity: ParityConfig
    preset: Tolerance
    precision: str
    source: str
    early: int = 0  # reports kept as a candidate judged in full passes each count up to this (the search's samples)
    evaluations: int = 0  # candidate sessions opened, for budgets and benchmarks
    inferences: int = 0
    evaluator: str = ""  # the sentence the last candidate's session gave
    _ref: Reference | None = field(default=None, repr=False)
    _ahead: Background[Reference] | None = field(default=None, repr=False)  # the reference, being made (prefetch)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _reports: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict, repr=False)
    _open: dict[str, tuple[Any, Any]] = field(default_factory=dict, repr=False)  # key -> (session, Comparison)
    _perfect: list[Perfect] | None = field(default=None, repr=False)
    _per_sample: dict[str, list[Any]] = field(default_factory=dict, repr=False)  # key -> Comparison.per_sample

    @property
    def ref(self) -> Reference:
        if self._ref is None:
            self._ref = self._ahead.result() if self._ahead else Reference(self.reference, self.samples)
        return self._ref

    def prefetch(self) -> None:
        """Start the reference outputs on a thread of their own (:func:`deploykit.graph.parallel.in_background`):
        the FP32 runs overlap the single-core work before the first candidate is judged (placing Q/DQ,
        the thresholds); :meth:`cancel` stops them where that work fails."""
        from deploykit.graph.parallel import in_background

        if self._ref is None and self._ahead is None:
            self._ahead = in_background(lambda: Reference(self.reference, self.samples, self._stop))

    def cancel(self) -> None:
        self._stop.set()

    def report(self, candidate: Candidate, n: int | None = None, key: str | None = None) -> dict[str, Any]:
        """Parity's report on ``candidate`` over the first ``n`` samples (all by default)."""
        count = len(self.samples) if n is None else min(n, len(self.samples))
        key = key or graph_digest(candidate)
        if (key, count) not in self._reports:
            session, comparison = self._session(candidate, key, count)
            self._extend(session, comparison, count, key if count == len(self.samples) else None)
            self._finish(key, comparison)
        return self._reports[(key, count)]

    def _finish(self, key: str, comparison: Any) -> None:
        """Keep a candidate's report on the samples ``comparison`` holds (and, on all of them, its
        per-sample sums for :meth:`hardest_first`)."""
        self._reports[(key, comparison.samples)] = comparison.report()
        if comparison.samples == len(self.samples):
            self._per_sample[key] = comparison.per_sample

    def _session(self, candidate: Candidate, key: str, count: int) -> tuple[Any, Any]:
        from deploykit.graph.parallel import threads_per_run

        session, comparison = self._open.pop(key, (None, None))
        if comparison is None or comparison.samples > count:
            # one sample judged alone runs on every core, not its share (the first-order ranking runs its
            # one-sample judgements side by side instead: measure_side_by_side)
            threads = threads_per_run() if count > 1 else 0
            session = self.opener(candidate() if callable(candidate) else candidate, threads=threads)
            comparison = self._comparison()
            self.evaluations += 1
            self.evaluator = session.evaluator
        self._open[key] = (session, comparison)
        while len(self._open) > OPEN_RUNS:
            del self._open[next(iter(self._open))]
        return session, comparison

    def _comparison(self) -> Any:
        """An empty comparison; no error histograms: nothing draws a candidate's (on a YOLOv8n search,
        binning was 2 of its 46 s, on the recognizer's default quantize 0.6 of 5 s)."""
        from deploykit.metrics.comparison import Comparison

        return Comparison(self.parity, self.preset, self.precision, histogram=False)

    def _extend(
        self, session: Any, comparison: Any, count: int, key: str | None = None, stop: bool = False
    ) -> Measurement | None:
        """Run the samples ``comparison`` lacks up to ``count``, side by side (:mod:`deploykit.graph.parallel`),
        and fold them in in order; ``key``, ``stop``: see :meth:`_fold`."""
        from deploykit.graph.parallel import in_order

        outputs = in_order(session.infer, self.samples[comparison.samples : count])
        try:
            return self._fold(comparison, outputs, key, stop)
        finally:
            outputs.close()  # stopped: the samples still running are waited for, the rest never start

    def _fold(
        self, comparison: Any, outputs: Iterable[dict[str, Any]], key: str | None = None, stop: bool = False
    ) -> Measurement | None:
        """Fold a candidate's outputs on the samples ``comparison`` lacks, in the samples' order; with its
        ``key`` (a judgement on every sample), keep its report on each count up to :attr:`early` (a search
        then scores its start, judged in full by method auto's race or the check, on its first samples
        without running it again: on ViT-S a session and four samples, 0.4 s). ``stop`` (a judgement on
        every sample): end as soon as the candidate cannot pass whatever the samples still to come give,
        and return that best possible finish (:meth:`_bound`); None when all were folded."""
        start = comparison.samples
        for expected, got in zip(self.ref.outputs[start:], outputs, strict=False):
            comparison.add({"onnx": expected}, got)
            self.inferences += 1
            if key is not None and comparison.samples <= self.early and comparison.samples < len(self.samples):
                self._reports.setdefault((key, comparison.samples), comparison.report())
            if stop and comparison.samples < len(self.samples):
                bound = self._bound(comparison)
                if not score(bound, self.parity, self.preset).passed:
                    return bound
        return None

    def _bound(self, comparison: Any) -> Measurement:
        """The measurement ``comparison``'s candidate would end with on every judging sample if it matched
        the reference exactly on each one still to come: its best possible finish. Elementwise metrics are
        worst cases over samples, which an exact sample leaves as they are. No worse finish exists for
        parity's task metrics either: each is a ratio of sums over samples (agreeing pixels, matched boxes,
        error totals) that an exact sample moves towards its best value. Failing this, the candidate fails
        on all of them."""
        if self._perfect is None:
            self._perfect = self._perfect_sums()
        tasks = comparison.tasks.get("onnx", [])
        kept = [task.sums for task in tasks]
        try:
            for task, perfect in zip(tasks, self._perfect, strict=True):
                rest = perfect.suffix[comparison.samples]
                if rest is not None:
                    task.sums = task.merge(task.sums, rest)
            found = measurement_of(comparison.report())
        finally:
            for task, sums in zip(tasks, kept, strict=True):
                task.sums = sums
        return replace(found, samples=len(self.samples), ran=comparison.samples)

    def measure(
        self, candidate: Candidate, n: int | None = None, key: str | None = None, stop: bool = False
    ) -> Measurement:
        """What ``candidate`` measures on the first ``n`` samples (all by default). ``stop``, on all of them:
        once it cannot pass, its best possible finish instead (``ran``: the samples run), which is where a
        search's confirmation of a state that passed on a few samples mostly ends. ``candidate`` may be
        what builds the graph (with ``key``): it is built only where no session over ``key`` is open (a
        confirmation extends the session its search samples ran in; building a ViT-S patch again cost 57 ms)."""
        count = len(self.samples) if n is None else min(n, len(self.samples))
        key = key or graph_digest(candidate)
        if stop and count == len(self.samples) and (key, count) not in self._reports:
            session, comparison = self._session(candidate, key, count)
            bound = self._extend(session, comparison, count, key, stop=True)
            if bound is not None:
                return bound
            self._finish(key, comparison)
        return measurement_of(self.report(candidate, n, key))

    def runner(self, candidate: onnx.ModelProto) -> Runner:
        """A session over ``candidate`` on its share of the cores, for :meth:`measure_side_by_side`."""
        from deploykit.graph.parallel import threads_per_run

        session = self.opener(candidate, threads=threads_per_run())
        self.evaluations += 1
        self.evaluator = session.evaluator
        return session.infer

    def measure_side_by_side(self, runs: Iterable[tuple[str, Callable[[], Runner]]], n: int) -> dict[str, Measurement]:
        """The measurements of several graphs the caller opens, each given as (key, open) where ``open()``
        returns what runs it on one sample: :func:`~deploykit.graph.parallel.runs_at_once` graphs at a time, each on
        its share of the cores (:func:`~deploykit.graph.parallel.in_order`), each graph's samples folded
        in their order. A graph is opened on the caller's thread when it is reached, so only a few are
        open at once. For the first-order ranking's one-sample judgements: two side by side on a core
        each get through more of them than one at a time on every core, as calibration's samples do."""
        from deploykit.graph.parallel import in_order

        count = min(n, len(self.samples))
        samples = self.samples[:count]
        wanted = dict(runs)

        def opened() -> Iterator[tuple[str, Runner]]:
            for key, open_graph in wanted.items():
                if (key, count) not in self._reports:
                    yield key, open_graph()

        def outputs(item: tuple[str, Runner]) -> tuple[str, list[dict[str, Any]]]:
            return item[0], [item[1](sample) for sample in samples]

        for key, got in in_order(outputs, opened()):
            comparison = self._comparison()
            self._fold(comparison, got)
            self._finish(key, comparison)
        return {key: measurement_of(self._reports[(key, count)]) for key in wanted}

    def check(self, candidate: onnx.ModelProto, key: str | None = None) -> Check:
        """Parity's verdict on every judging sample, as the stage's Check."""
        report = self.report(candidate, key=key)
        return check_of(report, self.evaluator, self.ref, self.parity, self.preset, self.source)

    def race(self, candidates: Mapping[str, Callable[[], onnx.ModelProto]]) -> dict[str, Entry]:
        """Task losses of each candidate on every judging sample; a candidate stops being scored once it
        cannot win: when the losses it would have if it matched the reference exactly on every sample
        still to come (its best possible finish, see :meth:`_best_finish`) are already dominated by a
        finished candidate's (no better on any metric, worse on one). Those it finishes are kept, so
        judging the winner again runs nothing.

        Samples are scored :func:`~deploykit.graph.parallel.runs_at_once` at a time (side by side), and
        the rivals looked at between. Every candidate is scored on the first of them, then the race goes
        on in the order of those scores (best first): a strong finished rival stops the others sooner.
        Which candidates finish undominated does not depend on the order (a stopped candidate is
        dominated by a finished one, and what it would have dominated, that one dominates too); the
        entries come back in the given order."""
        from deploykit.graph.parallel import runs_at_once

        n, step = len(self.samples), runs_at_once()  # samples scored between two looks at the rivals
        started: dict[str, tuple[str, Any, Any]] = {}  # name -> (key, session, comparison); kept open here
        for name, build in candidates.items():
            candidate = build()
            key = graph_digest(candidate)
            session, comparison = (None, None) if (key, n) in self._reports else self._session(candidate, key, n)
            if comparison is not None and comparison.samples == 0:
                self._extend(session, comparison, step, key)
            started[name] = (key, session, comparison)
        first = rank_sums({m: self._best_finish(c) if c is not None else {} for m, (_, _, c) in started.items()})
        done: dict[str, Entry] = {}
        for name in sorted(started, key=lambda m: (started[m][2] is not None, first[m])):  # finished ones first
            key, session, comparison = started[name]
            if comparison is not None:
                while comparison.samples < n:
                    rivals = {r: e.losses for r, e in done.items() if not e.stopped}
                    best = self._best_finish(comparison) if rivals else {}
                    rival = next((r for r, losses in rivals.items() if best and dominates(losses, best)), None)
                    if rival is not None:
                        done[name] = Entry(best, comparison.samples, rival)
                        break
                    self._extend(session, comparison, comparison.samples + step, key)
                else:
                    self._finish(key, comparison)
            if name not in done:
                done[name] = Entry(task_losses(measurement_of(self._reports[(key, n)]), self.parity), n)
        return {name: done[name] for name in candidates}

    def _best_finish(self, comparison: Any) -> dict[str, float]:
        """The task losses of ``comparison``'s best possible finish (:meth:`_bound`); the checks the full
        reference makes inconclusive are left out, as they are at the end."""
        return task_losses(self._bound(comparison), self.parity)

    def _perfect_sums(self) -> list[Perfect]:
        """Per task, the reference against itself: its sums over samples k.. and over each sample."""
        from deploykit.metrics.tasks import build_tasks

        out = []
        for task in build_tasks(self.parity.tasks):
            suffix: list[Any] = [None] * (len(self.samples) + 1)
            each: list[Any] = [None] * len(self.samples)
            for k in range(len(self.samples) - 1, -1, -1):
                task.sums = suffix[k + 1]  # a fold makes new sums: this one is left as it is
                each[k] = task.add(self.ref.outputs[k], self.ref.outputs[k])
                suffix[k] = task.sums
            out.append(Perfect(suffix, each))
        return out

    def hardest_first(self, key: str, keep: int) -> None:
        """Put the judging samples after the first ``keep`` (the search samples) in the order the graph
        judged in full as ``key`` (the search's start) missed most on them: a confirmation that stops
        once a state cannot pass (:meth:`measure`) then meets the samples that fail it first (ViT-S's
        failing confirmations ran 5 to 9 samples instead of 12 to 16, YOLOv8n's 5 to 14 instead of 7 to
        15). Each sample's miss is the task
        objective the graph would score on every sample were it exact on all the others, then its worst
        rel-L2 (the elementwise limits' worst case). What the reordering invalidates is dropped: reports
        and open comparisons on more than ``keep`` samples and fewer than all."""
        per_sample, n = self._per_sample.get(key), len(self.samples)
        if per_sample is None or keep >= n - 1:
            return
        missed = self._missed(per_sample)
        order = list(range(keep)) + sorted(range(keep, n), key=lambda k: (-missed[k][0], -missed[k][1], k))
        if order == list(range(n)):
            return
        self.samples = [self.samples[k] for k in order]
        self._ref = self.ref.reordered(order)
        self._perfect, self._per_sample = None, {}
        self._reports = {(k, c): r for (k, c), r in self._reports.items() if c <= keep or c == n}
        self._open = {k: v for k, v in self._open.items() if v[1].samples <= keep or v[1].samples == n}

    def _missed(self, per_sample: list[Any]) -> list[tuple[float, float]]:
        """Per sample: (the task objective on every sample with only this one the candidate's, its worst rel-L2)."""
        from functools import reduce

        from deploykit.metrics.tasks import build_tasks

        if self._perfect is None:
            self._perfect = self._perfect_sums()
        tasks = build_tasks(self.parity.tasks)
        before: list[list[Any]] = []  # per task: the reference's own sums over samples ..k
        for task, perfect in zip(tasks, self._perfect, strict=True):
            run = [None]
            for each in perfect.each:
                run.append(each if run[-1] is None else task.merge(run[-1], each))
            before.append(run)
        out = []
        for j, (worst, sums) in enumerate(per_sample):
            entries = []
            for i, (task, perfect) in enumerate(zip(tasks, self._perfect, strict=True)):
                parts = [p for p in (before[i][j], sums["onnx"][i], perfect.suffix[j + 1]) if p is not None]
                total = reduce(task.merge, parts)
                metrics = task.metrics(total)
                entries.append(
                    {
                        "label": task.label,
                        "kind": task.kind,
                        "metrics": metrics,
                        "inconclusive": task.inconclusive(total, metrics),
                    }
                )
            out.append((score(Measurement({}, entries, len(self.samples)), self.parity, self.preset).objective, worst))
        return out


class Perfect(NamedTuple):
    """One task check's sums of the reference against itself, for best possible finishes."""

    suffix: list[Any]  # over samples k.. (None at the end)
    each: list[Any]  # over each sample alone


@dataclass(frozen=True)
class Entry:
    """A candidate's task losses in a :meth:`Judge.race`: final, or (stopped) its best possible finish."""

    losses: dict[str, float]
    samples: int  # judging samples it was scored on
    beaten_by: str = ""  # the finished candidate that dominated its best finish

    @property
    def stopped(self) -> bool:
        return bool(self.beaten_by)


def front_ranks(entries: Mapping[str, Entry]) -> dict[str, float | None]:
    """Rank sums (:func:`rank_sums`) among the candidates no other finished candidate dominates; the
    rest (stopped in the race, or dominated at the end) get None. A dominated candidate can never have
    the smallest rank sum, and leaving it out keeps it from swaying the ranks of those that can win,
    which is what lets the race stop scoring it early."""
    finished = {m: e.losses for m, e in entries.items() if not e.stopped}
    front = {
        m: losses
        for m, losses in finished.items()
        if not any(dominates(other, losses) for o, other in finished.items() if o != m)
    }
    ranks = rank_sums(front)
    return {m: ranks.get(m) for m in entries}


def dominates(a: Mapping[str, float], b: Mapping[str, float]) -> bool:
    """Whether losses ``a`` are no worse than ``b`` on every metric and better on one."""
    keys = set(a) | set(b)
    pairs = [(a.get(k, math.inf), b.get(k, math.inf)) for k in keys]
    return all(x <= y for x, y in pairs) and any(x < y for x, y in pairs)


def typical_rel_l2(report: dict[str, Any]) -> float:
    """The largest over outputs of the mean rel-L2 over samples in a parity report (:meth:`Check.typical`)."""
    means = [float(np.mean(refs["onnx"]["per_sample_rel_l2"])) for refs in report["outputs"].values() if "onnx" in refs]
    return max(means, default=0.0)


def graph_digest(model: onnx.ModelProto) -> str:
    from deploykit.graph.proto import digest_model

    return digest_model(model)


def measurement_settings(parity: ParityConfig) -> dict[str, Any]:
    """What a measurement depends on in ``parity`` (its limits left out): the part of a search cache's key."""
    import dataclasses

    tasks = {
        f.name: [
            {k: v for k, v in dataclasses.asdict(c).items() if k not in LIMIT_FIELDS}
            for c in getattr(parity.tasks, f.name)
        ]
        for f in dataclasses.fields(parity.tasks)
    }
    floors = {name: t.rel_floor for name, t in sorted(parity.outputs.items())}
    return {
        "tasks": tasks,
        "rel_floor": parity.default.rel_floor,
        "output_rel_floor": floors,
        "vacuous_below": parity.vacuous_below,
    }


def measurement_of(report: dict[str, Any]) -> Measurement:
    outputs = {
        name: {k: float(v) for k, v in refs["onnx"]["metrics"].items() if k in _KEPT}
        for name, refs in report["outputs"].items()
        if "onnx" in refs
    }
    tasks = [
        {"label": t["label"], "kind": t["kind"], "metrics": _plain(t["metrics"]), "inconclusive": t["inconclusive"]}
        for t in report["tasks"]
        if t["reference"] == "onnx"
    ]
    return Measurement(outputs, tasks, int(report["samples"]))


def _plain(metrics: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (float(v) if isinstance(v, (float, np.floating)) else int(v) if isinstance(v, (int, np.integer)) else v)
        for k, v in metrics.items()
    }


def check_of(
    report: dict[str, Any], evaluator: str, ref: Reference, parity: ParityConfig, preset: Tolerance, source: str
) -> Check:
    """A parity report folded into the quantize stage's Check (worst metrics, violations, tasks)."""
    from deploykit.metrics.reasons import Reason, Verdict, as_reason

    metrics: dict[str, dict[str, float]] = {}
    violations: list[Reason] = []
    for name, refs in sorted(report["outputs"].items()):
        entry = refs["onnx"]
        m = {k: float(v) for k, v in entry["metrics"].items() if k in _KEPT}
        m["mean_rel_l2"] = float(np.mean(entry["per_sample_rel_l2"]))
        metrics[name] = m
        violations += [as_reason(v).about(name) for v in entry["violations"]]
        if entry["status"] == "inconclusive" and parity.inconclusive == "fail":
            violations.append(Verdict.INCONCLUSIVE.restate(as_reason(entry["inconclusive"])).about(name))
    tasks = [t for t in report["tasks"] if t["reference"] == "onnx"]
    for t in tasks:
        violations += [as_reason(v).about(t["label"]) for v in t["violations"]]
        if t["status"] == "inconclusive" and parity.inconclusive == "fail":
            violations.append(Verdict.INCONCLUSIVE.restate(as_reason(t["inconclusive"])).about(t["label"]))
    nonfinite = [name for name, m in metrics.items() if m["nonfinite"] > 0]
    limits = {
        name: float(tol.rel_l2)
        for name in metrics
        if (tol := parity.tolerance(name, preset)).rel_l2 is not None and math.isfinite(tol.rel_l2)
    }
    task_rows = [
        {
            "label": t["label"],
            "kind": t["kind"],
            "metrics": _plain(t["metrics"]),
            "limits": t["limits"],
            "violations": t["violations"],
            "status": t["status"],
        }
        for t in tasks
    ]
    return Check(
        metrics,
        violations,
        evaluator,
        int(report["samples"]),
        nonfinite,
        weak_signal(metrics, ref),
        limits,
        task_rows,
        source,
    )
