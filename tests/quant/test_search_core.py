"""The search core, driven by fakes: the best state is kept, passes are confirmed on every sample,
the shortest passing prefix is found by bisection, trimming lowers what is not needed, budgets hold."""

from deploykit.quant.judge import Score
from deploykit.quant.search import Budget, Move, Stop, rank, search

LADDER = ("int8", "fp32")


def additive(weights, limit=1.0, full_extra=0.0, floor=0.0, log=None):
    """A fake judge: the worst ratio is the sum of the weights of the groups still in INT8, plus
    ``full_extra`` on all samples (a few samples can look better than all of them), plus ``floor``
    (error no precision removes)."""

    def evaluate(patch, full, stop=False):
        if log is not None:
            log.append((tuple(sorted(patch)), full))
        value = floor + sum(w for g, w in weights.items() if g not in patch) + (full_extra if full else 0.0)
        return Score({"out.rel_l2": value / limit})

    return evaluate


def latency(patch):
    return 10.0 + sum({"d": -0.5}.get(g, 1.0) for g in patch)


def ladders(groups, ladder=LADDER):
    return {g: ladder for g in groups}


def moves(weights, cost=1.0):
    return [Move(g, "fp32", w, cost) for g, w in weights.items()]


def test_one_culprit_is_found_with_a_single_raise():
    weights = {"a": 3.0, "b": 0.05, "c": 0.05, "d": 0.05}
    log = []
    out = search(additive(weights, log=log), latency, rank(moves(weights)), {}, ladders(weights), Budget(20, 10))
    # d runs faster in FP32 (latency -0.5): once a passes, raising d too is one more, faster state
    assert out.passed and out.best == {"a": "fp32", "d": "fp32"} and out.stopped.code == "passed"
    assert log[:3] == [((), False), (("a",), False), (("a",), True)]  # base, raise a, confirm on all samples
    assert [s.action for s in out.steps][3:5] == ["fill", "verify"] and out.steps[3].changes == {"d": "fp32"}


def test_spread_out_error_is_bisected_to_the_shortest_passing_prefix():
    weights = {f"g{i:02d}": 0.1 for i in range(20)}  # 2.0 in total, 0.85 allowed: 12 groups must go
    order = rank([Move(g, "fp32", 0.1 + (20 - i) * 1e-3, 1.0) for i, g in enumerate(weights)])
    out = search(additive(weights, limit=0.85), latency, order, {}, ladders(weights), Budget(40, 20))
    assert out.passed and len(out.best) == 12 and set(out.best) == {f"g{i:02d}" for i in range(12)}
    assert sum(s.action in ("raise", "bisect") for s in out.steps) <= 2 * 5 + 1  # doubling, then halving
    assert len(out.steps) < 40


def test_a_pass_on_few_samples_is_confirmed_and_the_search_goes_on_when_it_fails_on_all():
    weights = {"a": 2.0, "b": 0.15, "c": 0.05}
    log = []
    out = search(
        additive(weights, limit=0.25, full_extra=0.1, log=log),
        latency,
        rank(moves(weights)),
        {},
        ladders(weights),
        Budget(20, 10),
    )
    assert (("a",), False) in log and (("a",), True) in log  # a alone: 0.2 on few samples, 0.3 on all
    assert out.passed and out.best == {"a": "fp32", "b": "fp32"}
    confirmed = [patch for patch, full in log if full]
    assert confirmed == [("a",), ("a", "b")] and (("a", "b"), False) in log  # each few-sample pass confirmed


def test_the_best_state_is_returned_when_later_states_are_worse():
    """Trimming evaluates states worse than the best (they fail); the answer is still the best one,
    and when nothing passes, the closest state, not the last one evaluated."""
    weights = {"a": 2.0, "b": 0.5, "c": 0.4}
    out = search(additive(weights, limit=0.45), latency, rank(moves(weights)), {}, ladders(weights), Budget(20, 10))
    assert out.passed and out.best == {"a": "fp32", "b": "fp32"}
    assert out.steps[-1].action == "trim" and not out.steps[-1].score.passed  # the last state is worse
    nothing = search(
        additive(weights, limit=0.1, floor=0.2), latency, rank(moves(weights)), {}, ladders(weights), Budget(20, 10)
    )
    assert not nothing.passed and nothing.best == {"a": "fp32", "b": "fp32", "c": "fp32"}
    assert nothing.stopped == Stop.ALL_RAISED_FAIL(n=3)  # "every ranked group raised (3) still fails"


def test_fp8_moves_that_fail_together_are_tried_at_the_fallback_before_giving_up():
    """Each group's move is FP8 (alone it recovered about what FP16 does), but FP8 everywhere still
    fails: the search raises them to the fallback precision, bisects, and trimming takes back to FP8
    what the pass does not need in FP16."""
    ladder = ("int8", "fp8", "fp16")
    residual = {"int8": 1.0, "fp8": 0.4, "fp16": 0.0}  # FP8 everywhere: 0.64 > 0.5
    weights = {"a": 1.0, "b": 0.5, "c": 0.1}

    limit = [0.5]

    def evaluate(patch, full, stop=False):  # each group's error at its precision; limit 0.5 in all
        return Score({"out.rel_l2": sum(w * residual[patch.get(g, "int8")] for g, w in weights.items()) / limit[0]})

    def latency(patch):  # FP8 costs what INT8 costs (tensorrt), FP16 more
        return 10.0 + sum(p == "fp16" for p in patch.values())

    order = rank([Move(g, "fp8", w, 1.0) for g, w in weights.items()])
    no_fallback = search(evaluate, latency, order, {}, ladders(weights, ladder), Budget(30, 10))
    assert not no_fallback.passed and no_fallback.stopped == Stop.ALL_RAISED_FAIL(n=3)
    out = search(
        evaluate, latency, order, {}, ladders(weights, ladder), Budget(30, 10), fallback=dict.fromkeys(weights, "fp16")
    )
    assert out.passed and out.stopped.code == "passed"
    assert out.best == {"a": "fp16", "b": "fp8"}  # a, b in FP16 is the shortest prefix; b goes back to FP8
    assert not search(
        evaluate, latency, order, {}, ladders(weights, ladder), Budget(30, 10), fallback={"a": "fp8"}
    ).passed  # a fallback equal to the move adds nothing
    # every group at the fallback is the top state: judged as the bisection's upper end, never returned
    top = latency(dict.fromkeys(weights, "fp16"))
    capped = search(
        evaluate,
        latency,
        order,
        {},
        ladders(weights, ladder),
        Budget(30, 10, ceiling=top),
        fallback=dict.fromkeys(weights, "fp16"),
    )
    assert capped.passed and capped.best == {"a": "fp16", "b": "fp8"}
    # the ceiling summed in another order than the search's latency (in the last bits: the 60-conv
    # detector's tensorrt search never tried its fallback and failed at IoU 0.919 where it passes)
    for rounded in (top * (1 - 1e-12), top * (1 + 1e-12)):
        again = search(
            evaluate,
            latency,
            order,
            {},
            ladders(weights, ladder),
            Budget(30, 10, ceiling=rounded),
            fallback=dict.fromkeys(weights, "fp16"),
        )
        assert again.passed and again.best == capped.best
    limit[0] = 0.01  # now only the top state passes: said, and not returned
    only_top = search(
        evaluate,
        latency,
        order,
        {},
        ladders(weights, ladder),
        Budget(30, 10, ceiling=top),
        fallback=dict.fromkeys(weights, "fp16"),
    )
    assert not only_top.passed and only_top.stopped.code == "only_all_pass"
    assert only_top.stopped.sentence.startswith("cannot pass faster than every layer at the top")
    assert latency(only_top.best) < top


def test_trimming_lowers_groups_the_pass_does_not_need():
    # the ranking puts b first (it looked good alone) but only a matters
    weights = {"a": 1.5, "b": 0.0, "c": 0.0}
    order = rank([Move("b", "fp32", 2.0, 1.0), Move("a", "fp32", 1.0, 1.0), Move("c", "fp32", 0.1, 1.0)])
    out = search(additive(weights), latency, order, {}, ladders(weights), Budget(20, 10))
    assert out.passed and out.best == {"a": "fp32"}
    assert any(s.action == "trim" and s.changes == {"b": "int8"} and s.score.passed for s in out.steps)


def test_trimming_steps_down_the_ladder():
    ladder = ("int8", "fp8", "fp16")

    def evaluate(patch, full, stop=False):
        return Score({"r": {None: 3.0, "fp8": 0.9, "fp16": 0.5}[patch.get("a")]})

    out = search(
        evaluate,
        lambda p: 10.0 + {"fp8": 0.0, "fp16": 1.0}.get(p.get("a"), 0.0),
        rank([Move("a", "fp8", 1.0, 0.0), Move("a", "fp16", 2.5, 1.0)]),
        {},
        {"a": ladder},
        Budget(20, 5),
    )
    assert out.best == {"a": "fp8"}  # raised to FP16 (the most gain), trimmed to FP8: faster and still passing


def test_faster_and_more_accurate_moves_rank_first_and_no_gain_last():
    order = rank(
        [
            Move("a", "fp32", 1.0, 1.0),
            Move("d", "fp32", 0.1, -0.5),
            Move("z", "fp32", -0.2, 0.1),
            Move("b", "fp32", 3.0, 1.0),
        ]
    )
    assert [m.group for m in order] == ["d", "b", "a", "z"]


def test_budgets_stop_the_search_with_the_best_state_so_far():
    weights = {f"g{i}": 0.3 for i in range(8)}
    out = search(additive(weights), latency, rank(moves(weights)), {}, ladders(weights), Budget(3, 8))
    assert not out.passed and out.stopped == Stop.BUDGET_SPENT(n=3)
    assert str(out.stopped) == "evaluation budget spent (3)"  # what the report prints
    assert out.best == {"g0": "fp32", "g1": "fp32"}  # base, 1 and 2 raised: the last is the closest
    capped = search(additive(weights), latency, rank(moves(weights)), {}, ladders(weights), Budget(20, 2))
    assert not capped.passed and len(capped.best) == 2 and capped.stopped == Stop.ALL_RAISED_FAIL(n=2)


def test_a_worse_later_prefix_never_replaces_the_best_earlier_one():
    table = {(): 3.0, ("a",): 1.5, ("a", "b"): 2.5, ("a", "b", "c"): 2.0, ("a", "c"): 1.2, ("c",): 2.8}

    def evaluate(patch, full, stop=False):  # raising b interacts badly; a with c is the best state, still failing
        return Score({"r": table[tuple(sorted(patch))]})

    weights = {"a": 1.0, "b": 0.5, "c": 0.2}
    out = search(evaluate, latency, rank(moves(weights)), {}, ladders(weights), Budget(20, 10))
    assert [len(s.patch) for s in out.steps][:4] == [0, 1, 2, 3] and not out.passed
    assert out.best == {"a": "fp32", "c": "fp32"} and out.best_score.worst == 1.2 < out.steps[3].score.worst


def test_refinement_skips_a_group_that_makes_the_prefix_worse_and_finds_the_pass():
    """Doubling assumes raising more never hurts; when it does (FP32 islands among INT8 measured so on
    a real text detector), the best prefix grows by the groups that help, skipping the one that hurts."""
    table = {(): 3.0, ("a",): 1.5, ("a", "b"): 2.5, ("a", "b", "c"): 2.0, ("a", "c"): 0.9, ("c",): 2.8}
    log = []

    def evaluate(patch, full, stop=False):
        log.append((tuple(sorted(patch)), full))
        return Score({"r": table[tuple(sorted(patch))]})

    weights = {"a": 1.0, "b": 0.5, "c": 0.2}
    out = search(evaluate, latency, rank(moves(weights)), {}, ladders(weights), Budget(20, 10))
    assert out.passed and out.best == {"a": "fp32", "c": "fp32"} and out.stopped.code == "passed_refined"
    assert any(s.action == "refine" for s in out.steps) and log.count((("a", "b"), False)) == 1  # none runs twice


def test_when_nothing_passes_the_answer_is_not_worse_than_the_start_on_every_sample():
    """The closest state on the few search samples can be worse on all of them (selection on 4 samples
    of a real text detector): the start and it are compared on every judging sample."""
    few = {(): 3.0, ("a",): 1.2, ("a", "b"): 1.6}
    every = {(): 2.0, ("a",): 2.5, ("a", "b"): 2.8}

    def evaluate(patch, full, stop=False):
        return Score({"r": (every if full else few)[tuple(sorted(patch))]})

    weights = {"a": 1.0, "b": 0.5}
    out = search(evaluate, latency, rank(moves(weights)), {}, ladders(weights), Budget(20, 10))
    assert not out.passed and out.best == {} and out.best_score.worst == 2.0
    assert [s.samples for s in out.steps if s.action == "verify"] == ["all", "all"]  # both judged on every sample
    every[("a",)] = 1.8  # now the closest state is better on every sample too: it stays the answer
    again = search(evaluate, latency, rank(moves(weights)), {}, ladders(weights), Budget(20, 10))
    assert again.best == {"a": "fp32"} and again.best_score.worst == 1.8


def test_contiguous_groups_come_first_when_boundaries_cost():
    """Three groups in a chain a -> b -> c with equal damage: raising b alone adds two conversions, so
    with boundaries counted the order raises a region (a or c first, then its neighbour) before b alone."""
    from deploykit.quant.latency_cost import Borders, Costs
    from deploykit.quant.search import order_moves
    from deploykit.quant.sensitivity import _marginal, _neighbours

    borders = Borders(((5.0, "", ("a",)), (5.0, "a", ("b",)), (5.0, "b", ("c",))), "int8", "fp32")
    costs = Costs({g: {"fp32": 1.0} for g in "abc"}, 10.0, 13.0, "us", "test", borders)
    order = order_moves(
        [Move(g, "fp32", 1.0 if g != "b" else 1.05, 1.0) for g in "abc"], _marginal(costs), _neighbours(costs)
    )
    assert order[0].group == "a"  # its input conversion goes away: cheaper than b's two new ones
    assert [m.group for m in order] == ["a", "b", "c"] and order[
        1
    ].cost == 1.0  # b next to raised a: one boundary moves
    assert [m.group for m in rank([Move(g, "fp32", 1.0 if g != "b" else 1.05, 1.0) for g in "abc"])][0] == "b"
    assert costs.of({"b": "fp32"}) == 10.0 + 1.0 + 10.0  # an island: a dequantize in, a quantize out
    assert costs.of({"a": "fp32", "b": "fp32", "c": "fp32"}) == 13.0 - 5.0  # the input's quantize is gone too


def test_the_screened_first_order_ranking_finds_concentrated_damage_with_few_evaluations():
    """100 groups, three carry the damage: runs of about sqrt(100) groups are measured, the worst run
    halved down to the culprits; each culprit is measured alone, the rest share their run's damage."""
    import math

    from deploykit.quant.judge import Measurement
    from deploykit.quant.sensitivity import SCREEN_PER_ROOT, Evaluations, first_order

    names = [f"g{i:03d}" for i in range(100)]
    weight = {**dict.fromkeys(names, 1e-4), "g010": 5.0, "g057": 3.0, "g090": 1.0}

    class Judge:  # a stand-in: a patch's "graph" is the patch, its error energy the quantized groups' weights
        runs = 0

        def runner(self, patch):
            return patch

        def measure_side_by_side(self, runs, n):
            out = {}
            for key, open_graph in runs:
                Judge.runs += 1
                energy = sum(w for g, w in weight.items() if g not in open_graph())  # the groups left quantized
                out[key] = Measurement({"y": {"rel_l2": math.sqrt(energy)}}, [], n)
            return out

    damage, screened = first_order(Evaluations(Judge(), lambda patch: patch), names, "fp32", 1)
    assert Judge.runs <= 1 + SCREEN_PER_ROOT * 10
    assert sorted(damage, key=lambda g: -damage[g])[:3] == ["g010", "g057", "g090"]
    assert all(screened[g] == 1 and math.isclose(damage[g], weight[g]) for g in ("g010", "g057", "g090"))
    assert max(screened.values()) > 1 and all(damage[g] < 0.01 for g in names if g not in ("g010", "g057", "g090"))


def test_bisection_and_trims_that_could_save_too_little_are_not_run():
    # 20 groups of 0.1 each, 0.85 allowed: the shortest passing prefix is 12 groups; the doubling
    # passes at 16. On a base of 1000 each group costs 1 (0.1 %): with a 2 % floor no step between
    # 12 and 16 is worth a run, so the search stops at 16, where with 0 it bisects down to 12.
    weights = {f"g{i:02d}": 0.1 for i in range(20)}
    order = rank([Move(g, "fp32", 0.1 + (20 - i) * 1e-3, 1.0) for i, g in enumerate(weights)])

    def slow_base(patch):
        return 1000.0 + len(patch)

    exhaustive = search(additive(weights, limit=0.85), slow_base, order, {}, ladders(weights), Budget(40, 20))
    floored = search(
        additive(weights, limit=0.85), slow_base, order, {}, ladders(weights), Budget(40, 20, min_saving=0.02)
    )
    assert exhaustive.passed and len(exhaustive.best) == 12 and not exhaustive.skipped
    assert floored.passed and len(floored.best) == 16  # the doubling's pass, never bisected
    assert not any(s.action in ("bisect", "trim") for s in floored.steps)
    assert floored.skipped[0] == "bisection between 8 and 16 groups"
    assert len(floored.skipped) == 1 + 16  # and each of the 16 trims (0.06 % each)
    assert len(floored.steps) < len(exhaustive.steps) // 2
    # on a base of 10 a group is 10 % of the latency: the same floor runs the whole search
    same = search(additive(weights, limit=0.85), latency, order, {}, ladders(weights), Budget(40, 20, min_saving=0.02))
    assert len(same.best) == 12 and not same.skipped


def test_a_trim_saving_enough_is_still_run_where_small_ones_are_skipped():
    # a costs 3 % of the latency, b 5 %, c 0.5 %: under a 2 % floor c's trim is not worth a run
    weights = {"a": 1.5, "b": 0.0, "c": 0.0}
    order = rank([Move("b", "fp32", 2.0, 5.0), Move("c", "fp32", 1.5, 0.5), Move("a", "fp32", 1.0, 3.0)])
    costs = {"a": 3.0, "b": 5.0, "c": 0.5}

    def cost(patch):
        return 100.0 + sum(costs[g] for g in patch)

    out = search(additive(weights), cost, order, {}, ladders(weights), Budget(20, 10, min_saving=0.02))
    assert out.passed and out.best == {"a": "fp32", "c": "fp32"}
    assert out.skipped == ["trim of c"]
    # a's trim is worth a run (its state, a in INT8, failed as the doubling's first step: not run again)
    assert [s.changes for s in out.steps if s.action == "trim"] == [{"b": "int8"}]


def test_small_trims_are_tried_together_once_together_they_save_enough():
    # g0-g3 are needed (0.3 each against 0.25), g4-g9 are not but rank first; each group is 0.5 of a
    # latency of about 105: no single trim saves 2 %, five together do
    needed, spare = [f"g{i}" for i in range(4)], [f"g{i}" for i in range(4, 10)]
    weights = {**dict.fromkeys(spare, 0.0), **dict.fromkeys(needed, 0.3)}
    order = rank([Move(g, "fp32", 2.0, 0.5) for g in spare] + [Move(g, "fp32", 1.0, 0.5) for g in needed])

    def cost(patch):
        return 100.0 + 0.5 * len(patch)

    floored = search(additive(weights, limit=0.25), cost, order, {}, ladders(weights), Budget(40, 10, min_saving=0.02))
    trims = [(sorted(s.changes), s.score.passed) for s in floored.steps if s.action == "trim"]
    assert trims == [(["g0", "g1", "g2", "g3", "g9"], False), (["g4", "g5", "g6", "g7", "g8"], True)]
    assert floored.passed and floored.best == dict.fromkeys(["g0", "g1", "g2", "g3", "g9"], "fp32")
    assert floored.skipped == ["bisection between 8 and 10 groups"]
    exhaustive = search(additive(weights, limit=0.25), cost, order, {}, ladders(weights), Budget(40, 10))
    assert exhaustive.best == dict.fromkeys(needed, "fp32") and len(exhaustive.steps) > len(floored.steps)


def test_a_confirmation_may_stop_early_but_the_closest_state_is_compared_in_full():
    """A pass on the few samples is confirmed on all with ``stop`` (it may end once the state cannot
    pass, its ratios then the best it could still reach); when nothing passes, the closest state and
    the start are compared on complete scores, never on a stopped confirmation's."""
    weights = {"a": 0.5, "b": 0.3}
    log = []

    def evaluate(patch, full, stop=False):
        log.append((tuple(sorted(patch)), full, stop))
        value = 0.1 + sum(w for g, w in weights.items() if g not in patch) + (0.95 if full else 0.0)
        if full and stop:  # it cannot pass: stopped after 2 samples, every state's best finish alike
            return Score({"out.rel_l2": 1.01}, ran=2)
        return Score({"out.rel_l2": value})

    out = search(evaluate, latency, rank(moves(weights)), {}, ladders(weights), Budget(20, 10))
    assert not out.passed
    few = {p for p, full, _ in log if not full and 0.1 + sum(w for g, w in weights.items() if g not in p) <= 1}
    assert {patch for patch, full, stop in log if full and stop} == few  # each few-sample pass confirmed
    assert out.best == {"a": "fp32", "b": "fp32"}  # 1.05 on all samples against the start's 1.85
    assert out.best_score.ran is None and abs(out.best_score.ratios["out.rel_l2"] - 1.05) < 1e-9
    assert {(patch, stop) for patch, full, stop in log[-2:] if full} == {(("a", "b"), False), ((), False)}
