"""The mixed-precision search core: the fewest, cheapest layers in higher precision that pass.

Generic over callables so it can be tested with fakes:

* ``evaluate(patch, full, stop)`` scores a precision patch (group -> precision) on the search samples, or
  on every judging sample when ``full`` (:class:`deploykit.quant.judge.Score`; ``passed`` on every
  sample is parity's verdict); ``stop``: it may stop once the patch cannot pass on every sample (its
  ``ran`` then says so, and its ratios are the best it could still reach);
* ``latency(patch)`` is the patch's latency (per-group costs add up);
* ``order`` is every group's move (the group at its target precision) ranked by accuracy gained per
  latency lost, best first (:func:`rank`): a move that makes the model faster *and* more accurate
  comes before any trade.

The search raises a growing prefix of that order (``per_step`` groups, then twice as many, ...)
until a state passes, never a prefix as slow as every group at the top precision (``ceiling``: such
a mix is not worth shipping, and the search says it cannot pass rather than return it); when every
move raised still fails and some moves are FP8, one more state raises those to ``fallback`` (FP16).
Then it bisects for the shortest passing prefix: a few evaluations whether one layer is the culprit
(an outlier channel) or the error is spread over forty (a deep depthwise network). It stops
bisecting once no prefix in between could save ``min_saving`` of the passing one's latency, and
trims that save less are tried together once together they save that much: such steps were 10 to
17 of the 32 states the searches on four real models evaluated, each for under 2 % of the estimated
latency, less than whole-graph timings drift. A pass on the
search samples counts only once confirmed on every judging sample, a confirmation that stops as soon
as the state cannot pass; a state that fails on the few samples is not run on the rest. A passing
state's INT8 islands whose raising makes it faster (their conversions cost more than their integer
kernel saves) are then raised too, as one more state (``fill``). Trimming then lowers the raised
groups, least valuable first, one precision step each (FP16 -> FP8, FP32 -> INT8), keeping each step that
still passes. When the doubling fails because raising more made the score worse (FP32 islands among
INT8 do not always add up), the best prefix it met grows by chunks of the groups after it, kept only
where they help (:func:`_refine`). The result is the best state ever evaluated: the fastest that
passed on every sample, else the one closest to passing — compared with the start on every judging
sample, so it is never worse than the start there — never simply the last one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from deploykit.quant.judge import Score
from deploykit.quant.reasons import Code, Reason

Patch = dict[str, str]
SAME_COST = 1e-9  # latencies this close (relative) are the same sum of costs


class Stop(Code):
    """Why the search stopped: each exit of :func:`search`, and the qualifications
    :func:`deploykit.quant.sensitivity.run_search` adds once the final check and the timing are in."""

    PASSED_AT_START = ("passed_at_start", "passed")  # the start passed: nothing raised
    PASSED = ("passed", "passed")  # a raised prefix passed, bisected and trimmed
    PASSED_REFINED = ("passed_refined", "passed")  # raising more made it worse; chunks kept where they helped
    ONLY_ALL_PASS = (
        "only_all_pass",
        "cannot pass faster than every layer at the top precision: only all {n} ranked groups raised "
        "({tops}) pass{instead}",
    )
    BUDGET_SPENT = ("budget_spent", "evaluation budget spent ({n})")
    NO_FASTER_PREFIX = (
        "no_faster_prefix",
        "cannot pass faster than every layer at the top precision: the {n} best-ranked groups raised still "
        "fail, and raising more would be no faster",
    )
    ALL_RAISED_FAIL = ("all_raised_fail", "every ranked group raised ({n}) still fails")
    # run_search's, after the search:
    PASSED_AT_CLOSEST = (
        "passed_at_closest",
        "passed on all {n_all} judging samples at the closest state (on the {n_search} search samples: {before})",
    )
    RANKED_BY_ACCURACY = (
        "ranked_by_accuracy",
        "{base} alone is not {margin:.2g}x faster than every group at {raised} here ({base_cost:.3g} vs "
        "{top:.3g} {unit}), so no mix can pass faster than {raised}: the search ranked by accuracy alone",
    )
    TIMED_NOT_FASTER = (
        "timed_not_faster",
        "timed after the search, {base} alone is not {margin:.2g}x faster than FP32 here ({base_ms:.3g} vs "
        "{fp32_ms:.3g} ms), so no mix could pass faster than FP32",
    )


@dataclass(frozen=True)
class Move:
    """``group`` at ``precision``: ``gain`` (objective lowered) and ``cost`` (latency added) over the base."""

    group: str
    precision: str
    gain: float
    cost: float


@dataclass(frozen=True)
class Budget:
    evaluations: int  # states the search may evaluate (the base and confirmations included)
    groups: int  # groups that may be raised above the base precision
    per_step: int = 1  # groups the first step raises; each later step doubles it
    ceiling: float = float("inf")  # a state this slow is not worth shipping (every group at the top precision)
    min_saving: float = 0.0  # a bisection or trim step that can save less than this share of the latency is skipped

    def worth(self, latency: float, after: float) -> bool:
        """Whether a state of latency ``after`` saves enough over ``latency`` to be evaluated."""
        return after <= latency * (1 - self.min_saving)

    def at_ceiling(self, latency: float) -> bool:
        """Whether ``latency`` is as slow as the ceiling: the same costs summed in another order
        differ in the last bits (every group raised, once by the search and once for the ceiling)."""
        return latency >= self.ceiling * (1 - SAME_COST)

    def above_ceiling(self, latency: float) -> bool:
        return latency > self.ceiling * (1 + SAME_COST)


@dataclass
class Step:
    """One evaluated state: what changed, its score, its latency, whether the search kept it."""

    step: int
    action: str  # base | raise | bisect | refine | fill | verify | trim
    changes: Patch
    patch: Patch
    score: Score
    latency: float
    samples: str  # "search" or "all"
    kept: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "action": self.action,
            "changes": dict(self.changes),
            "patch": dict(self.patch),
            "objective": self.score.objective,
            "excess": self.score.excess,
            "worst_ratio": self.score.worst,
            "passed": self.score.passed,
            "failing": self.score.failing()[:6],
            "ratios": self.score.ratios,
            "latency": self.latency,
            "samples": self.samples,
            "ran": self.score.ran,  # stopped once it could not pass: the samples run (ratios: its best finish)
            "kept": self.kept,
        }


@dataclass
class Outcome:
    best: Patch
    best_score: Score
    passed: bool  # the best state passed on every judging sample
    stopped: Reason  # a Stop
    steps: list[Step] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # steps not run: too small a saving (Budget.min_saving)


def priority(gain: float, cost: float, floor: float = 0.0) -> tuple[int, float]:
    """Gain per unit of latency, the cost floored at ``floor`` (a layer that is faster in higher
    precision, or costs less than measurement noise, ranks by its gain at that floor); no gain last."""
    if gain <= 0:
        return (-1, gain)
    cost = max(cost, floor)
    return (1, gain) if cost <= 0 else (0, gain / cost)


def rank(moves: list[Move], floor: float = 0.0) -> list[Move]:
    """One move per group, the precision that gains most (trimming lowers it again where a cheaper one
    suffices), groups by the priority of that move, best first; ties keep the given order."""
    best: dict[str, Move] = {}
    for m in moves:
        if m.group not in best or m.gain > best[m.group].gain:
            best[m.group] = m
    return sorted(best.values(), key=lambda m: priority(m.gain, m.cost, floor), reverse=True)


def order_moves(
    moves: list[Move], cost: Callable[[Patch, Move], float], neighbours: Mapping[str, set[str]], floor: float = 0.0
) -> list[Move]:
    """One move per group (as :func:`rank`), ordered greedily: each next move is the one with the best
    priority given the moves before it, its cost what it adds on top of them (``cost(state, move)``).
    Where raising a group removes the boundary to a raised neighbour its cost drops, so contiguous
    regions come before scattered groups; ``neighbours``: the groups whose cost a move can change
    (with no boundaries counted, this is :func:`rank`). Ties keep the given order."""
    import heapq

    best: dict[str, Move] = {}
    for m in moves:
        if m.group not in best or m.gain > best[m.group].gain:
            best[m.group] = m
    position = {g: i for i, g in enumerate(best)}
    state: Patch = {}
    version = dict.fromkeys(best, 0)

    def entry(g: str) -> tuple[tuple[float, float], int, str, int]:
        c = cost(state, best[g])
        rank_, value = priority(best[g].gain, c, floor)
        return (-rank_, -value), position[g], g, version[g]

    heap = [entry(g) for g in best]
    heapq.heapify(heap)
    out: list[Move] = []
    while heap:
        _, _, g, seen = heapq.heappop(heap)
        if g in state or seen != version[g]:
            continue
        m = best[g]
        out.append(Move(g, m.precision, m.gain, cost(state, m)))
        state[g] = m.precision
        for h in neighbours.get(g, ()):
            if h in best and h not in state:
                version[h] += 1
                heapq.heappush(heap, entry(h))
    return out


def search(
    evaluate: Callable[[Patch, bool, bool], Score],
    latency: Callable[[Patch], float],
    order: list[Move],
    start: Patch,
    ladder: Mapping[str, tuple[str, ...]],
    budget: Budget,
    fallback: Mapping[str, str] | None = None,
) -> Outcome:
    """Search from ``start``; see the module docstring. ``ladder``: group -> its precisions, cheapest first.

    ``fallback``: group -> the precision to raise it to instead when every ranked move raised still
    fails (a group whose move is FP8 because FP8 recovered about as much alone as FP16: together the
    FP8 groups can still hold the error); one more state tries them there before the search gives up."""
    run = _Run(evaluate, latency, budget)
    order = [m for m in order if m.group not in start][: budget.groups]
    if run.judge(dict(start), {}, "base"):
        return run.outcome(Stop.PASSED_AT_START())
    affordable = next(
        (k for k in range(len(order), 0, -1) if not budget.at_ceiling(latency(_prefix(start, order, k)))), 0
    )
    slow = affordable < len(order)
    order = order[:affordable]
    failing, passing, k = 0, None, min(budget.per_step, len(order))
    raised: list[int] = []  # the prefix sizes the doubling judged
    while passing is None and k > failing and not run.spent():
        raised.append(k)
        if run.judge(_prefix(start, order, k), {m.group: m.precision for m in order[failing:k]}, "raise"):
            passing = k
        else:
            failing, k = k, min(2 * k, len(order))
    promoted = [Move(m.group, (fallback or {}).get(m.group, m.precision), m.gain, m.cost) for m in order]
    if (
        passing is None
        and failing == len(order)
        and promoted != order
        and not run.spent()
        and (not budget.above_ceiling(latency(_prefix(start, promoted, len(promoted)))))
    ):  # the bisection's upper end
        changes = {m.group: m.precision for m in promoted if m not in order}
        if run.judge(_prefix(start, promoted, len(promoted)), changes, "raise"):
            order, failing, passing = promoted, 0, len(promoted)
    while passing is not None and passing - failing > 1 and not run.spent():
        if not _bisection_worth(budget, latency, start, order, failing, passing):
            run.skipped.append(f"bisection between {failing} and {passing} groups")
            break
        mid = (failing + passing) // 2
        if run.judge(_prefix(start, order, mid), {m.group: m.precision for m in order[failing:mid]}, "bisect"):
            passing = mid
        else:
            failing = mid
    if passing is not None and budget.at_ceiling(latency(_prefix(start, order, passing))):
        tops = sorted({m.precision for m in order})
        instead = f"; --precision {tops[0]} does as well" if len(tops) == 1 else ""
        return run.outcome(Stop.ONLY_ALL_PASS(n=len(order), tops=", ".join(tops), instead=instead))
    targets = {m.group: m.precision for m in order}
    if passing is None and failing > 0 and not run.spent():
        found = _refine(run, start, order, raised)
        if found is not None and not budget.at_ceiling(latency(found[0])):
            return run.trim(*run.fill(*found, targets), ladder, Stop.PASSED_REFINED())
    if passing is None:
        if run.spent():
            return run.outcome(Stop.BUDGET_SPENT(n=budget.evaluations))
        if slow:
            return run.outcome(Stop.NO_FASTER_PREFIX(n=len(order)))
        return run.outcome(Stop.ALL_RAISED_FAIL(n=len(order)))
    filled = run.fill(_prefix(start, order, passing), [m.group for m in order[:passing]], targets)
    return run.trim(*filled, ladder, Stop.PASSED())


def _prefix(start: Patch, order: list[Move], k: int) -> Patch:
    return {**start, **{m.group: m.precision for m in order[:k]}}


def _lowered(state: Patch, groups: list[str], ladder: Mapping[str, tuple[str, ...]]) -> Patch:
    """``state`` with each of ``groups`` one precision step lower (at the base precision: left out)."""
    new = dict(state)
    for group in groups:
        steps = ladder[group]
        lower = steps[steps.index(state[group]) - 1]
        if lower == steps[0]:
            del new[group]
        else:
            new[group] = lower
    return new


def _bisection_worth(
    budget: Budget, latency: Callable[[Patch], float], start: Patch, order: list[Move], failing: int, passing: int
) -> bool:
    """Whether a prefix between the failing and the passing one could save enough latency
    (:meth:`Budget.worth`) to be worth bisecting for: the fastest of them, were it to pass."""
    fastest = min(latency(_prefix(start, order, k)) for k in range(failing + 1, passing))
    return budget.worth(latency(_prefix(start, order, passing)), fastest)


def _refine(run: _Run, start: Patch, order: list[Move], sizes: list[int]) -> tuple[Patch, list[str]] | None:
    """When raising more groups made the score worse (measured: a text detector's IoU 0.9685 with the
    first 8 groups raised, 0.954 with 16, 0.941 with 32 — islands of FP32 among INT8 do not always
    add up), grow the best prefix the doubling met by chunks of the groups after it, keeping a
    chunk only where it improves the score and halving the chunk where it does not; a group that
    alone makes it worse is skipped. Returns a passing state and the groups it raised, or None."""

    def objective(patch: Patch) -> float:
        found = run.objective(patch)
        return float("inf") if found is None else found

    best = min(sizes, key=lambda k: objective(_prefix(start, order, k)))
    state, kept, rest = _prefix(start, order, best), [m.group for m in order[:best]], order[best:]
    chunk, i = max(1, best // 2), 0
    while i < len(rest) and not run.spent():
        moves = rest[i : i + chunk]
        candidate = {**state, **{m.group: m.precision for m in moves}}
        if run.judge(candidate, {m.group: m.precision for m in moves}, "refine"):
            return candidate, kept + [m.group for m in moves]
        if objective(candidate) < objective(state):
            state, kept, i = candidate, kept + [m.group for m in moves], i + len(moves)
        elif chunk > 1:
            chunk //= 2
        else:
            i += 1  # this group alone makes it worse: left at the base precision
    return None


class Rank(NamedTuple):
    """How good an evaluated state is, the smallest best: passing states by latency, then failing ones
    by how far they miss, then states at the latency ceiling (judged as a bisection's upper end only)."""

    tier: int  # PASSING, FAILING or AT_CEILING
    first: float  # passing: the latency; else the objective
    second: float  # the other of the two


PASSING, FAILING, AT_CEILING = 0, 1, 2


class _Run:
    """The steps taken so far, the best state, and the budget."""

    def __init__(
        self, evaluate: Callable[[Patch, bool, bool], Score], latency: Callable[[Patch], float], budget: Budget
    ) -> None:
        self._evaluate, self._latency, self.budget = evaluate, latency, budget
        self.steps: list[Step] = []
        self.verdicts: dict[frozenset[tuple[str, str]], bool] = {}  # states judged already
        self.objectives: dict[frozenset[tuple[str, str]], float] = {}  # their scores on the search samples
        self.best: tuple[Patch, Score, bool] | None = None
        self.skipped: list[str] = []  # steps not evaluated: their saving was below the budget's min_saving

    def objective(self, patch: Patch) -> float | None:
        """``patch``'s objective on the search samples, if it was evaluated."""
        return self.objectives.get(frozenset(patch.items()))

    def spent(self) -> bool:
        return len(self.steps) >= self.budget.evaluations

    def judge(self, patch: Patch, changes: Patch, action: str) -> bool:
        """Whether ``patch`` passes on every judging sample: judged on the search samples, and a pass
        there confirmed on all of them (a state met again, e.g. trimmed back to, is not run again)."""
        key = frozenset(patch.items())
        if key not in self.verdicts:
            score = self._record(patch, changes, action, False)
            self.objectives[key] = score.objective
            # confirmed on every sample, stopping once it cannot pass: most states a few samples pass fail
            passed = score.passed and not self.spent() and self._record(patch, {}, "verify", True, stop=True).passed
            self.verdicts[key] = passed
        return self.verdicts[key]

    def _record(self, patch: Patch, changes: Patch, action: str, full: bool, stop: bool = False) -> Score:
        score = self._evaluate(patch, full, stop)
        self.steps.append(
            Step(
                len(self.steps),
                action,
                dict(changes),
                dict(patch),
                score,
                self._latency(patch),
                "all" if full else "search",
                False,
            )
        )
        passed = score.passed and full
        key = self._key(patch, score, passed)
        if self.best is None or key < self._key(*self.best):
            self.best = (dict(patch), score, passed)
        return score

    def _key(self, patch: Patch, score: Score, passed: bool) -> Rank:
        latency = self._latency(patch)
        if self.budget.at_ceiling(latency):  # judged as a bisection's upper end, never the answer
            return Rank(AT_CEILING, score.objective, latency)
        return Rank(PASSING, latency, score.objective) if passed else Rank(FAILING, score.objective, latency)

    def _settle(self, best: Patch, score: Score) -> tuple[Patch, Score]:
        """Nothing passed: the closest state on the few search samples can be worse than the start on
        all of them (measured: IoU 0.972 on 4 samples, 0.943 on 16, where the start had 0.945), so
        the two are compared on every judging sample and the better one is the answer."""
        start = self.steps[0].patch
        full = {}
        for patch in (best, start):
            known = next(
                (s.score for s in self.steps if s.samples == "all" and s.patch == patch and s.score.ran is None), None
            )
            full[frozenset(patch.items())] = known or self._record(patch, {}, "verify", True)
        mine, theirs = full[frozenset(best.items())], full[frozenset(start.items())]
        return (dict(start), theirs) if theirs.objective <= mine.objective else (best, mine)

    def fill(self, state: Patch, raised: list[str], targets: Mapping[str, str]) -> tuple[Patch, list[str]]:
        """Raise the groups left at the base precision whose raising makes the passing ``state`` faster
        (an INT8 island between raised neighbours costs more in conversions than its integer kernel
        saves), as one more state, kept where it passes; the filled groups are trimmed first."""
        current = dict(state)
        changed = True
        while changed:
            changed = False
            for group, precision in targets.items():
                trial = {**current, group: precision}
                if group not in current and self._latency(trial) < self._latency(current) * (1 - SAME_COST):
                    current, changed = trial, True
        added = {g: p for g, p in current.items() if g not in state}
        if added and not self.spent() and self.judge(current, added, "fill"):
            return current, raised + sorted(added, key=list(targets).index)
        return state, raised

    def trim(self, state: Patch, raised: list[str], ladder: Mapping[str, tuple[str, ...]], stop: Reason) -> Outcome:
        """Lower each raised group one precision step, least valuable first, while every sample passes.
        Lowerings that each save less than the budget's ``min_saving`` wait and are tried together
        once together they save that much (kept or dropped as one); what never adds up is not run."""
        waiting: list[str] = []
        for group in reversed(raised):
            if self.spent():
                break
            if self._latency(_lowered(state, [group], ladder)) > self._latency(state):
                continue  # lowering it would be slower (INT8 slower than FP32 for this layer here)
            waiting.append(group)
            new = _lowered(state, waiting, ladder)
            if not self.budget.worth(self._latency(state), self._latency(new)):
                continue
            if self.judge(new, {g: new.get(g, ladder[g][0]) for g in waiting}, "trim"):
                state = new
            waiting = []
        self.skipped += [f"trim of {g}" for g in waiting]
        return self.outcome(stop)

    def outcome(self, stopped: Reason) -> Outcome:
        assert self.best is not None
        best, score, passed = self.best
        if not passed and self.steps and best != self.steps[0].patch:
            best, score = self._settle(best, score)
        for s in self.steps:  # the states worth a row of their own: the start and every confirmed pass
            s.kept = s.step == 0 or (s.score.passed and s.samples == "all")
        return Outcome(best, score, passed, stopped, self.steps, self.skipped)
