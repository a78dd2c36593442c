"""Sensitivity-driven mixed precision: measure each layer group's causal effect, then search.

What the quantize stage runs when ``quantize.repair.enabled`` and the base graph misses parity:

1. **First-order ranking** (``repair.screen_samples`` samples): groups quantized alone, all others
   at the float rest's precision; the error energy they add (squared rel-L2 over the outputs:
   independent errors add up this way) ranks the groups, per latency they cost. Up to 24 groups
   each is measured alone; above, contiguous runs of about sqrt(N) groups are, and the worst run is
   halved until 4 sqrt(N) evaluations are spent (:func:`first_order`): a group that carries the
   damage is found and measured alone, the groups of a run never halved share its damage. On the
   base graph's own ranges (no recalibration: a candidate is the base graph with a patch applied,
   :mod:`deploykit.quant.patch`); where the raise is to the float rest's FP32, every patch runs in
   one open screening graph (:mod:`deploykit.quant.screen`: fake-quantized, for ranking only).
2. **Leave-one-out measurement** (``repair.samples`` samples) of the ``repair.candidates`` worst
   groups where the flavour offers a choice of higher precision (tensorrt INT8: FP8 or FP16): the
   base graph with only that group raised, at each of them, scored by parity's metrics; FP8 is the
   target where it recovers as much as FP16 (it costs what INT8 costs). It does not reorder: with the
   error spread over many layers, raising one of them moves a thresholded task metric by less than
   its noise on a few samples, where the first-order energy stays steady.
3. **Search** (:mod:`deploykit.quant.search`) for the fastest assignment that passes, with latency
   costs from :mod:`deploykit.quant.latency_cost` (FLOPs, bytes and precision boundaries: the same
   on any load, so two runs choose the same mix; whole graphs are timed only to confirm the answer),
   the groups ordered greedily by gain per cost given the groups before them (a neighbour of a
   raised group costs less: no boundary between them).

Every evaluation is judged by :class:`deploykit.quant.judge.Judge` (parity's data, metrics and
tolerances) and memoised by (patch, sample count). The measurements go into the artifact
(``sensitivity.json``, covered by its digest) under a key of everything they depend on except the
limits (:func:`cache_key`), so a rerun at a tighter tolerance re-scores them instead of measuring
again. The final verdict is parity's on every judging sample, run in this process (never taken from
an earlier artifact's measurements).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.graph.files import fill_held
from deploykit.quant.groups import Group
from deploykit.quant.judge import Judge, Measurement, Runner, Score, measurement_settings, score
from deploykit.quant.latency_cost import Costs
from deploykit.quant.reasons import Reason
from deploykit.quant.screen import Screen
from deploykit.quant.search import Budget, Move, Outcome, Patch, Stop, order_moves, search
from deploykit.quant.speed import WARNING_EDGES

if TYPE_CHECKING:
    import onnx

    from deploykit.config import RepairConfig
    from deploykit.quant.check import Check

# 2: screened first-order ranking, costs with their precision boundaries; 3: the screening graph; 4: measurements
# that stopped once the state could not pass (Measurement.ran), which an older reader would take as complete
CACHE_SCHEMA = 4
CEILING_MARGIN = 0.9  # INT8 must be at least this much faster than FP32 for a latency ceiling to mean anything
# The speed-ups against FP32 that timing the answer decides on (faster at all, the ceiling's margin, the
# stage's warning): the timing stops once each graph's side of each is certain (deploykit.quant.speed)
TIMED_EDGES = (1.0, 1 / CEILING_MARGIN, *WARNING_EDGES)
COST_FLOOR = 0.01  # latency costs below this share of an average group's are noise: floored there
FP8_ENOUGH = 0.9  # FP8 is the target where it recovers this share of what the float precision recovers


@dataclass
class Evaluations:
    """Patch -> Measurement, memoised in ``cache`` (persisted in the artifact); counts what ran."""

    judge: Judge
    build: Callable[[Patch], onnx.ModelProto]
    cache: dict[str, dict[str, Any]] = field(default_factory=dict)  # filled from an earlier artifact, or empty
    fresh: int = 0  # candidates built and run
    cached: int = 0  # measurements taken from the earlier artifact instead
    progress: Callable[[], Any] | None = None  # called after each candidate run (a progress bar)
    screen: Screen | None = None  # the screening graph for the first-order ranking, where the flavour has one
    on_screen: int = 0  # fresh measurements the screening graph made
    keys: dict[str, str] = field(default_factory=dict)  # patch state -> the judge's key its graph was judged under
    _inherited: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._inherited = set(self.cache)

    def measure(self, patch: Patch, n: int, stop: bool = False) -> Measurement:
        """The patch's own graph, judged as the target computes it; ``stop``: see :meth:`Judge.measure`.
        A measurement that stopped early proves a failure only: asked for in full, or passing the limits
        it is scored by now (a rerun at a looser tolerance), it is measured again."""
        state = state_of(patch)
        key = f"{n}|{state}"
        found = self.cache.get(key)
        if found is not None and found.get("ran") is not None:
            if not stop or score(Measurement.from_dict(found), self.judge.parity, self.judge.preset).passed:
                del self.cache[key]
        judged = self.keys.get(state, f"patch|{state}")
        return self._memo(
            key, lambda: self.judge.measure(partial(self.build, patch), n, key=judged, stop=stop)
        )  # on more samples: extends fewer, in the session they ran in (the graph is not built again)

    def screened(self, patches: list[Patch], n: int) -> list[Measurement]:
        """For ranking, each patch's measurement: through the screening graph where it covers the patch
        (one open session, fake-quantized FP32), else on the patch's own graph as :meth:`measure` judges
        it; the ones not measured yet run side by side (:meth:`Judge.measure_side_by_side`)."""
        keys: list[tuple[str, str]] = []  # (memo key, the judge's key)
        todo: dict[str, Callable[[], Runner]] = {}  # the judge's key -> what opens the graph
        on_screen: set[str] = set()
        for patch in patches:
            state = state_of(patch)
            if self.screen is not None and self.screen.covers(patch):
                key = judged = f"screen|{n}|{state}"
                run = partial(self.screen.runner, patch)
                on_screen.add(key)
            else:
                key, judged = f"{n}|{state}", f"patch|{state}"
                run = partial(lambda p: self.judge.runner(self.build(p)), patch)
            keys.append((key, judged))
            if key not in self.cache:
                todo[judged] = run
        found = self.judge.measure_side_by_side(todo.items(), n) if todo else {}
        self.on_screen += len(on_screen & todo.keys())
        return [self._memo(key, partial(found.__getitem__, judged)) for key, judged in keys]

    def _memo(self, key: str, run: Callable[[], Measurement]) -> Measurement:
        if key in self.cache:
            if key in self._inherited:
                self.cached += 1
                self._inherited.discard(key)
            return Measurement.from_dict(self.cache[key])
        found = run()
        self.cache[key] = found.to_dict()
        self.fresh += 1
        if self.progress is not None:
            self.progress()
        return found

    def score(self, patch: Patch, n: int, stop: bool = False) -> Score:
        return score(self.measure(patch, n, stop), self.judge.parity, self.judge.preset)


def state_of(patch: Patch) -> str:
    """A patch's name in measurement keys: its group=precision pairs, sorted."""
    return ",".join(f"{g}={p}" for g, p in sorted(patch.items()))


@dataclass
class SearchResult:
    """The chosen graph and everything that justifies it (``precision.json``'s ``search`` entry)."""

    model: onnx.ModelProto
    check: Check  # parity's verdict on every judging sample, evaluated fresh
    patch: Patch  # group -> precision above the base
    outcome: Outcome
    groups: list[Group]
    sensitivity: list[dict[str, Any]]
    costs: Costs
    table: list[dict[str, Any]]
    measured_ms: dict[str, float]  # label (fp32, base, chosen, step N) -> ms on this CPU (onnxruntime flavour)
    evaluations: dict[str, int]
    ladder: tuple[str, ...]
    data: str
    wall_s: float = 0.0  # the search's own time (measurements, search, final check, timing)
    cpu_s: float = 0.0  # CPU time it used, all threads (on a shared machine: what it would need alone)
    timings: dict[str, float] = field(default_factory=dict)  # seconds per phase
    speeds: dict[str, Any] = field(default_factory=dict)  # base, chosen -> SpeedCheck against FP32 (onnxruntime)

    @property
    def stopped(self) -> Reason:
        return self.outcome.stopped

    @property
    def added(self) -> list[str]:
        """Groups the search raised above the base precision."""
        return sorted(self.patch)

    def faster_than_top(self) -> bool:
        """Whether the chosen mix beats every group at the top precision: measured on this CPU where it
        was timed (the onnxruntime flavour: against the FP32 graph), else by the cost model."""
        if "chosen" in self.measured_ms and "fp32" in self.measured_ms:
            return self.measured_ms["chosen"] < self.measured_ms["fp32"]
        return self.costs.of(self.patch) < self.costs.top

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.check.passed,
            "stopped": self.stopped.to_dict(),
            "patch": dict(sorted(self.patch.items())),
            "layer_precisions": dict(sorted(self.patch.items())),
            "precisions": self.ladder,
            "judged_on": self.data,
            "evaluations": self.evaluations,
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "timings": self.timings,
            "latency": self.costs.method,
            "faster_than_top": self.faster_than_top(),
            "latency_unit": self.costs.unit,
            "table": self.table,
            "measured_ms": self.measured_ms,
            "speed": {k: v.to_dict() for k, v in self.speeds.items()},
            "steps": [s.to_dict() for s in self.outcome.steps],
            "not_run": self.outcome.skipped,
            "sensitivity": self.sensitivity,
            "groups": [g.to_dict() for g in self.groups],
        }


def cache_key(facts: Mapping[str, Any]) -> str:
    """The key a measurement cache is filed under: ``facts`` (the base graph's digest, the reference,
    the judging data, the evaluator, the sample counts, the device) plus the schema version."""
    from deploykit.store.hashing import digest_value

    return digest_value({"schema": CACHE_SCHEMA, **facts})


def cache_facts(judge: Judge, cfg: RepairConfig, base: onnx.ModelProto) -> dict[str, Any]:
    """What every cached measurement depends on, by content (the base graph, the reference graph, the
    judging samples), plus the sample counts, parity's non-limit settings and the device; the limits
    are left out: they only change the scores."""
    import hashlib

    from deploykit.graph.proto import digest_model
    from deploykit.store.environment import device_fingerprint, onnxruntime_version

    samples = hashlib.sha256()
    for sample in judge.samples:
        for name in sorted(sample):
            array = np.ascontiguousarray(sample[name])
            samples.update(f"{name}:{array.dtype}:{array.shape}".encode())
            samples.update(array.tobytes())
    return {
        "base": digest_model(base),
        "reference": digest_model(judge.reference),
        "data": samples.hexdigest(),
        "samples": len(judge.samples),
        "screen_samples": cfg.screen_samples,
        "search_samples": cfg.samples,
        "parity": measurement_settings(judge.parity),
        "device": device_fingerprint(),
        "onnxruntime": onnxruntime_version(),
    }


def run_search(
    ev: Evaluations,
    groups: list[Group],
    ladder: tuple[str, ...],
    costs: Costs,
    cfg: RepairConfig,
    start: Patch,
    timer: Callable[[dict[str, Patch]], dict[str, float]] | None = None,
) -> SearchResult:
    """Rank, measure and search; see the module docstring.

    Args:
        ev: the memoised evaluations (judge, patch builder, cache).
        groups: the base graph's groups.
        ladder: the precisions each group may take, the base first.
        costs: latency per group and precision.
        cfg: the budgets.
        start: the configured patch (``quantize.layer_precisions``), where the search begins.
        timer: label -> patch to measured ms against FP32 (the onnxruntime flavour times its answer).
    """
    judge, clock = ev.judge, _Clock()
    n_screen, n_search, n_all = (min(n, len(judge.samples)) for n in (cfg.screen_samples, cfg.samples, 10**9))
    high = next((p for p in ladder[1:] if p != "fp8"), ladder[-1])
    by_name = {g.name: g for g in groups}
    damage, screened = first_order(ev, list(by_name), high, n_screen)
    ranked = sorted(damage, key=lambda g: -damage[g])[: cfg.candidates]  # stable: graph order breaks ties
    clock.lap("first_order")
    causal = _causal(ev, ranked, ladder, high, start, costs, n_search) if "fp8" in ladder else []
    clock.lap("causal")
    floor = COST_FLOOR * costs.base / max(len(by_name), 1)
    order = order_moves(
        [Move(g, _target(g, causal, high), damage[g], costs.delta.get(g, {}).get(high, 0.0)) for g in damage],
        _marginal(costs),
        _neighbours(costs),
        floor,
    )
    top_precision = ladder[-1] if high == "fp32" else high
    top = costs.of(dict.fromkeys(by_name, top_precision))
    ceiling = top if costs.base < CEILING_MARGIN * top else float("inf")
    outcome = search(
        lambda patch, full, stop: ev.score(patch, n_all if full else n_search, stop),
        costs.of,
        order,
        start,
        {g: ladder for g in by_name},
        Budget(cfg.max_iterations, cfg.max_nodes or len(by_name), cfg.nodes_per_step, ceiling, cfg.min_saving),
        fallback={m.group: high for m in order if m.precision != high},
    )
    clock.lap("search")
    model = fill_held(ev.build(outcome.best))  # the answer holds its weights (the states may refer to them)
    check = judge.check(model, key="patch|" + ",".join(f"{g}={p}" for g, p in sorted(outcome.best.items())))
    if check.passed and not outcome.passed:  # the closest state missed on the few samples, passes on all
        before = outcome.stopped  # its codes stay: why the search samples did not pass it
        outcome.passed, outcome.stopped = (
            True,
            dataclasses.replace(
                Stop.PASSED_AT_CLOSEST(n_all=n_all, n_search=n_search, before=before), also=before.codes
            ),
        )
    if not outcome.passed and ceiling == float("inf"):  # a bigger budget buys accuracy, never speed: say so
        raised = top_precision.upper()
        outcome.stopped = outcome.stopped.qualified(
            Stop.RANKED_BY_ACCURACY(
                base=ladder[0].upper(),
                margin=1 / CEILING_MARGIN,
                raised=raised,
                base_cost=costs.base,
                top=top,
                unit=costs.unit,
            )
        )
    clock.lap("final_check")
    sensitivity = [
        {
            "group": m.group,
            "ops": by_name[m.group].ops,
            "alone_damage": damage[m.group],
            "rank": i,
            "screened_with": screened[m.group],
            "target": m.precision,
            "gain": {c.precision: c.gain for c in causal if c.group == m.group},
            "cost": costs.delta.get(m.group, {}),
            "cost_in_order": m.cost,
        }
        for i, m in enumerate(order)
    ]
    # a passing answer is timed against FP32 alone (what confirms it); a failing one beside the base too,
    # whose speed against FP32 says whether any mix could pass faster (TIMED_NOT_FASTER)
    states = {"chosen": outcome.best} if outcome.passed else {"base": {}, "chosen": outcome.best}
    found = timer(states) if timer else {}
    table, measured = pareto_table(outcome, costs, list(by_name), ladder[0], found)
    speeds = timed(found)[1]
    if (
        not outcome.passed
        and ceiling != float("inf")
        and measured.get("base", 0.0) >= CEILING_MARGIN * measured.get("fp32", float("inf"))
    ):  # the profiler's kernel times said faster; whole runs say not
        outcome.stopped = outcome.stopped.qualified(
            Stop.TIMED_NOT_FASTER(
                base=ladder[0].upper(), margin=1 / CEILING_MARGIN, base_ms=measured["base"], fp32_ms=measured["fp32"]
            )
        )
    clock.lap("timing")
    return SearchResult(
        model,
        check,
        dict(outcome.best),
        outcome,
        groups,
        sensitivity,
        costs,
        table,
        measured,
        _counts(ev),
        ladder,
        judge.source,
        timings=clock.laps,
        speeds=speeds,
    )


def _counts(ev: Evaluations) -> dict[str, Any]:
    """Measurements made fresh (on the screening graph: ``screened`` of them), taken from the cache,
    and why the screening graph was not used where it could not be opened."""
    out: dict[str, Any] = {"fresh": ev.fresh, "cached": ev.cached, "screened": ev.on_screen}
    if ev.screen is not None and ev.screen.unavailable:
        out["screen_unavailable"] = ev.screen.unavailable
    return out


class _Clock:
    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._last, 3)
        self._last = now


SCREEN_ALL = 24  # up to this many groups, each is measured quantized alone
SCREEN_PER_ROOT = 4  # above: first-order evaluations per square root of the group count


def first_order(ev: Evaluations, names: list[str], high: str, n: int) -> tuple[dict[str, float], dict[str, int]]:
    """Each group's damage quantized alone, every other group at ``high``: the error energy it adds
    (squared rel-L2 summed over outputs; independent errors add up this way, and it is steady on one
    sample where a thresholded task metric is not). Returns the damage and, per group, the size of
    the run of groups it was measured in (1: alone).

    Up to :data:`SCREEN_ALL` groups each is measured alone. Above, the groups (in graph order) are
    screened in about sqrt(N) contiguous runs, each quantized alone, and the run with the most damage
    is halved and its halves measured, until ``SCREEN_PER_ROOT * sqrt(N)`` evaluations are spent;
    the groups of a run never halved share its damage equally (so they rank together, as a
    contiguous region). Damage concentrates in few groups on the models measured, so the bisection
    finds them with a few evaluations each, where one per group spent 333 of 386 s on a 549-group
    transformer."""

    def quantized_alone(runs: list[tuple[str, ...]]) -> list[Patch]:
        return [{g: high for g in names if g not in inside} for inside in map(set, runs)]

    def alone(runs: list[tuple[str, ...]]) -> list[float]:  # measured side by side (Evaluations.screened)
        return [_energy(m) - clean for m in ev.screened(quantized_alone(runs), n)]

    if len(names) <= SCREEN_ALL:
        first = [(g,) for g in names]
    else:
        size = math.ceil(len(names) / math.ceil(math.sqrt(len(names))))
        first = [tuple(names[i : i + size]) for i in range(0, len(names), size)]
    # every group raised (the energy the runs add to) is measured beside the first runs
    clean_m, *measured = ev.screened([dict.fromkeys(names, high), *quantized_alone(first)], n)
    clean = _energy(clean_m)
    damages = [_energy(m) - clean for m in measured]
    if len(names) <= SCREEN_ALL:
        return dict(zip(names, damages, strict=True)), dict.fromkeys(names, 1)
    runs = list(zip(first, damages, strict=True))
    budget = SCREEN_PER_ROOT * math.ceil(math.sqrt(len(names))) - len(runs)
    while budget >= 2:
        splittable = [k for k, (r, _) in enumerate(runs) if len(r) > 1]
        if not splittable:
            break
        k = max(splittable, key=lambda k: (runs[k][1], -k))
        run = runs[k][0]
        halves = [run[: len(run) // 2], run[len(run) // 2 :]]
        runs[k : k + 1] = list(zip(halves, alone(halves), strict=True))
        budget -= 2
    damage = {g: e / len(r) for r, e in runs for g in r}
    return damage, {g: len(r) for r, _ in runs for g in r}


def _marginal(costs: Costs) -> Callable[[Patch, Move], float]:
    """What a move adds to a state's latency: its compute cost and the boundaries it adds or removes."""
    adjacent = costs.borders.adjacent() if costs.borders is not None else {}

    def cost(state: Patch, move: Move) -> float:
        own = costs.delta.get(move.group, {}).get(move.precision, 0.0)
        if costs.borders is None:
            return own
        return own + costs.borders.change(state, move.group, move.precision, adjacent.get(move.group, []))

    return cost


def _neighbours(costs: Costs) -> dict[str, set[str]]:
    """Groups that share a boundary tensor."""
    out: dict[str, set[str]] = {}
    if costs.borders is not None:
        for _, producer, readers in costs.borders.tensors:
            members = {producer, *readers} - {""}
            for g in members:
                out.setdefault(g, set()).update(members - {g})
    return out


def _energy(m: Measurement) -> float:
    return float(sum(o.get("rel_l2", 0.0) ** 2 for o in m.outputs.values()))


def _causal(
    ev: Evaluations, ranked: list[str], ladder: tuple[str, ...], high: str, start: Patch, costs: Costs, n: int
) -> list[Move]:
    """What raising each ranked group alone gains on parity's score over ``start``, at each precision
    offered (leave-one-out: the group's effect with every other group quantized)."""
    base = ev.score(start, n).objective
    moves = []
    for name in ranked:
        for p in ladder[1:]:
            if p == "fp32" and high == "fp16":
                continue  # FP32 over FP16 buys range, not rounding: offered in layer_precisions only
            moves.append(
                Move(name, p, base - ev.score({**start, name: p}, n).objective, costs.delta.get(name, {}).get(p, 0.0))
            )
    return moves


def _target(group: str, causal: list[Move], high: str) -> str:
    """The precision a group is raised to: FP8 where it alone recovers about as much as ``high`` (it
    costs what INT8 costs in the tensorrt flavour), else ``high``; trimming tries lower ones again."""
    gains = {m.precision: m.gain for m in causal if m.group == group}
    if gains.get("fp8", 0.0) > 0 and gains["fp8"] >= FP8_ENOUGH * gains.get(high, 0.0):
        return "fp8"
    return high


def timed(found: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """A timer's answer as ms per label (fp32 included) and the speed checks behind it (label ->
    :class:`deploykit.quant.speed.SpeedCheck`; a stand-in timer may give plain ms)."""
    speeds = {k: v for k, v in found.items() if hasattr(v, "quantized_ms")}
    ms = {k: float(v.quantized_ms if k in speeds else v) for k, v in found.items()}
    if speeds and "fp32" not in ms:
        ms["fp32"] = float(speeds.get("chosen", next(iter(speeds.values()))).fp32_ms)
    return ms, speeds


def pareto_table(
    outcome: Outcome,
    costs: Costs,
    groups: list[str],
    base: str,
    found: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """One row per evaluated state: precision counts, accuracy (worst ratio to a limit, the measured
    values), latency (the cost model's, relative to every group at the top precision), whether the
    search kept it and whether no other state beats it on both; ``found``: the timer's answer (empty
    without one), whose ms per label come back as ``measured`` (the chosen state against FP32, and the
    base beside them where the search did not pass)."""
    measured, _ = timed(found)
    rows = []
    for s in outcome.steps:
        counts: dict[str, int] = {}
        for g in groups:
            counts[s.patch.get(g, base)] = counts.get(s.patch.get(g, base), 0) + 1
        est = costs.of(s.patch)
        rows.append(
            {
                "step": s.step,
                "action": s.action,
                "changes": s.changes,
                "precisions": counts,
                "worst_ratio": s.score.worst,
                "excess": s.score.excess,
                "passed": s.score.passed,
                "samples": s.samples,
                "ran": s.score.ran,
                "values": s.score.values,
                "latency": est,
                "latency_vs_top": est / costs.top if costs.top > 0 else None,
                "kept": s.kept,
                "chosen": s.patch == outcome.best,
                "measured_ms": measured.get("base")
                if s.step == 0
                else measured.get("chosen")
                if s.patch == outcome.best and s.samples == "all"
                else None,
            }
        )
    for r in rows:
        r["pareto"] = not any(
            o["latency"] <= r["latency"]
            and o["worst_ratio"] <= r["worst_ratio"]
            and (o["latency"] < r["latency"] or o["worst_ratio"] < r["worst_ratio"])
            for o in rows
        )
    return rows, measured
