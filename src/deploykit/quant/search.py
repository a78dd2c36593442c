"""The mixed-precision search core: greedy by accuracy gained per latency lost, keeping the best state.

Generic over callables so it can be tested with fakes:

* ``evaluate(patch, full)`` scores a precision patch (group -> precision) on the search samples, or on
  every judging sample when ``full`` (:class:`deploykit.quant.judge.Score`; ``passed`` on all
  samples is parity's verdict);
* ``latency(patch)`` is the patch's latency (measured or estimated costs add up per group);
* ``moves`` are the measured candidates: a group at a higher precision and what that alone gained
  over the base state (the causal leave-one-out measurement).

Each step raises the moves with the best gain per latency (a move that makes the model faster and
more accurate comes first), evaluates the new state, and keeps it only if the objective improves;
the best state ever evaluated is what the search returns, never simply the last one. When a state
passes on the search samples it is checked on every judging sample; a pass there stops the raising,
and a trimming pass then lowers raised groups again, cheapest gain first, as long as the full check
still passes (the fastest passing state wins).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from deploykit.quant.judge import Score

Patch = dict[str, str]


@dataclass(frozen=True)
class Move:
    """``group`` at ``precision``: ``gain`` (objective lowered) and ``cost`` (latency added) over the base."""

    group: str
    precision: str
    gain: float
    cost: float


@dataclass(frozen=True)
class Budget:
    evaluations: int  # states the greedy and trimming phases may evaluate (the base included)
    groups: int  # groups that may be raised above the base precision
    per_step: int = 1  # groups raised per step


@dataclass
class Step:
    """One evaluated state: what changed, its score, its latency, whether the search kept it."""

    step: int
    action: str  # base | raise | trim | verify
    changes: Patch
    patch: Patch
    score: Score
    latency: float
    samples: str  # "search" or "all"
    kept: bool

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "action": self.action, "changes": dict(self.changes), "patch": dict(self.patch),
                "objective": self.score.objective, "excess": self.score.excess, "worst_ratio": self.score.worst,
                "passed": self.score.passed, "failing": self.score.failing()[:6], "ratios": self.score.ratios,
                "latency": self.latency, "samples": self.samples, "kept": self.kept}


@dataclass
class Outcome:
    best: Patch
    best_score: Score
    passed: bool  # the best state passed on every judging sample
    stopped: str
    steps: list[Step] = field(default_factory=list)


def greedy(evaluate: Callable[[Patch, bool], Score], latency: Callable[[Patch], float], moves: list[Move],
           start: Patch, ladder: Mapping[str, tuple[str, ...]], budget: Budget) -> Outcome:
    """Search from ``start``; see the module docstring. ``ladder``: group -> its precisions, cheapest first."""
    run = _Run(evaluate, latency, budget)
    state, current = dict(start), run.evaluate(dict(start), {}, "base")
    while True:
        if current.passed and not run.full:
            current = run.verify(state)
        if current.passed and run.full:
            return run.trim(state, moves, ladder)
        if run.spent():
            return run.outcome(f"evaluation budget spent ({budget.evaluations})")
        picks = _ranked(state, moves, ladder, run.rejected)[: budget.per_step]
        if not picks:
            return run.outcome("no measured layer improves the score any more")
        new = {**state, **{m.group: m.precision for m in picks}}
        changes = {m.group: m.precision for m in picks}
        if len([g for g, p in new.items() if p != ladder[g][0]]) > budget.groups:
            return run.outcome(f"layer budget spent ({budget.groups} groups above the base precision)")
        score = run.evaluate(new, changes, "raise")
        if score.objective < current.objective - 1e-12:
            state, current = new, score
            run.keep()
        else:
            run.rejected |= {(m.group, m.precision) for m in picks}


def _ranked(state: Patch, moves: list[Move], ladder: Mapping[str, tuple[str, ...]], rejected: set) -> list[Move]:
    """Moves above each group's current precision, best gain per latency first, one per group."""
    measured = {(m.group, m.precision): m for m in moves}
    options = []
    for m in moves:
        now = state.get(m.group, ladder[m.group][0])
        steps = ladder[m.group]
        if steps.index(m.precision) <= steps.index(now) or (m.group, m.precision) in rejected:
            continue
        held = measured.get((m.group, now))
        gain = m.gain - (held.gain if held else 0.0)
        cost = m.cost - (held.cost if held else 0.0)
        if gain > 0:
            options.append((_priority(gain, cost), m))
    options.sort(key=lambda pm: pm[0], reverse=True)
    seen, out = set(), []
    for _, m in options:
        if m.group not in seen:
            seen.add(m.group)
            out.append(m)
    return out


def _priority(gain: float, cost: float) -> tuple[int, float]:
    """Faster *and* more accurate beats any trade; then gain per unit of latency."""
    return (1, gain) if cost <= 0 else (0, gain / cost)


class _Run:
    """The steps taken so far, the best state, and the budget."""

    def __init__(self, evaluate: Callable[[Patch, bool], Score], latency: Callable[[Patch], float],
                 budget: Budget) -> None:
        self._evaluate, self._latency, self.budget = evaluate, latency, budget
        self.steps: list[Step] = []
        self.full = False  # after a search-sample pass failed on all samples, every state is judged on all
        self.rejected: set[tuple[str, str]] = set()
        self.best: tuple[Patch, Score, bool] | None = None

    def spent(self) -> bool:
        return len(self.steps) >= self.budget.evaluations

    def evaluate(self, patch: Patch, changes: Patch, action: str) -> Score:
        score = self._evaluate(patch, self.full)
        self.steps.append(Step(len(self.steps), action, changes, dict(patch), score, self._latency(patch),
                               "all" if self.full else "search", action == "base"))
        self._consider(patch, score, self.full)
        return score

    def verify(self, patch: Patch) -> Score:
        """The state passed on the search samples: judge it on every sample (parity's verdict)."""
        self.full = True
        score = self._evaluate(patch, True)
        self.steps.append(Step(len(self.steps), "verify", {}, dict(patch), score, self._latency(patch), "all", True))
        self._consider(patch, score, True)
        return score

    def keep(self) -> None:
        self.steps[-1].kept = True

    def _consider(self, patch: Patch, score: Score, full: bool) -> None:
        """Best: a state that passed on every sample, fastest first; else the lowest objective."""
        passed = score.passed and full
        key = self._key(patch, score, passed)
        if self.best is None or key < self._key(*self.best):
            self.best = (dict(patch), score, passed)

    def _key(self, patch: Patch, score: Score, passed: bool) -> tuple[int, float, float]:
        latency = self._latency(patch)
        return (0, latency, score.objective) if passed else (1, score.objective, latency)

    def trim(self, state: Patch, moves: list[Move], ladder: Mapping[str, tuple[str, ...]]) -> Outcome:
        """Lower raised groups one step, least gain per latency first, while every sample still passes."""
        gains = {(m.group, m.precision): (m.gain, m.cost) for m in moves}
        raised = [g for g, p in state.items() if p != ladder[g][0]]
        raised.sort(key=lambda g: _priority(*gains.get((g, state[g]), (0.0, 1.0))))
        for group in raised:
            if self.spent():
                break
            steps = ladder[group]
            lower = steps[steps.index(state[group]) - 1]
            new = {**state, group: lower}
            if lower == steps[0]:
                del new[group]
            score = self.evaluate(new, {group: lower}, "trim")
            if score.passed and self._latency(new) <= self._latency(state):
                state = new
                self.keep()
        return self.outcome("passed")

    def outcome(self, stopped: str) -> Outcome:
        assert self.best is not None
        best, score, passed = self.best
        return Outcome(best, score, passed, stopped, self.steps)
