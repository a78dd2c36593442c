"""The greedy search core, driven by fakes: best state kept, full-sample verification, trimming, budgets."""

from deploykit.quant.judge import Score
from deploykit.quant.search import Budget, Move, greedy

LADDER = ("int8", "fp32")


def fake(table, full_table=None, log=None):
    """evaluate(patch, full) from a table: frozenset of raised groups -> worst ratio."""

    def evaluate(patch, full):
        key = frozenset(patch)
        value = (full_table or {}).get(key, table[key]) if full else table[key]
        if log is not None:
            log.append((tuple(sorted(patch)), full))
        return Score({"out.rel_l2": value})

    return evaluate


def latency(patch):
    return 10.0 + sum({"a": 1.0, "b": 2.0, "c": 4.0, "d": -0.5}.get(g, 0.0) for g in patch)


def ladders(*groups):
    return {g: LADDER for g in groups}


def test_a_later_state_that_is_worse_is_never_returned():
    # raising a helps, then b (ranked next) makes it worse; c is never measured to help
    table = {frozenset(): 3.0, frozenset("a"): 2.0, frozenset("ab"): 2.5, frozenset("ac"): 2.2}
    moves = [Move("a", "fp32", 1.0, 1.0), Move("b", "fp32", 0.9, 1.0), Move("c", "fp32", 0.1, 1.0)]
    out = greedy(fake(table), latency, moves, {}, ladders("a", "b", "c"), Budget(10, 10))
    assert out.best == {"a": "fp32"} and not out.passed
    assert [s.patch for s in out.steps] == [{}, {"a": "fp32"}, {"a": "fp32", "b": "fp32"}, {"a": "fp32", "c": "fp32"}]
    assert out.steps[-1].score.worst > out.best_score.worst  # the last state evaluated is worse than the best
    assert out.stopped.startswith("no measured layer improves")


def test_the_best_state_survives_a_spent_budget():
    table = {frozenset(): 3.0, frozenset("a"): 1.5, frozenset("ab"): 4.0}
    moves = [Move("a", "fp32", 1.0, 1.0), Move("b", "fp32", 0.5, 1.0)]
    out = greedy(fake(table), latency, moves, {}, ladders("a", "b"), Budget(3, 10))
    assert out.stopped == "evaluation budget spent (3)" and out.best == {"a": "fp32"}


def test_a_pass_on_the_search_samples_is_confirmed_on_all_before_stopping():
    log = []
    table = {frozenset(): 3.0, frozenset("a"): 0.9, frozenset("ab"): 0.8, frozenset("b"): 2.0}
    full = {frozenset("a"): 1.2, frozenset("ab"): 0.95, frozenset("b"): 2.5}  # a alone passes only on few samples
    moves = [Move("a", "fp32", 2.0, 1.0), Move("b", "fp32", 1.0, 2.0)]
    out = greedy(fake(table, full, log), latency, moves, {}, ladders("a", "b"), Budget(10, 10))
    assert out.passed and out.best == {"a": "fp32", "b": "fp32"} and out.stopped == "passed"
    assert (("a",), True) in log and (("a", "b"), True) in log  # judged on every sample before stopping
    assert [s.action for s in out.steps][:4] == ["base", "raise", "verify", "raise"]


def test_trimming_lowers_raised_layers_the_pass_does_not_need():
    # b then a get raised (b is the better ratio), but a alone already passes: trimming drops b
    table = {frozenset(): 3.0, frozenset("b"): 2.0, frozenset("ab"): 0.5, frozenset("a"): 0.9}
    moves = [Move("a", "fp32", 0.5, 1.0), Move("b", "fp32", 1.0, 1.0)]
    out = greedy(fake(table, table), latency, moves, {}, ladders("a", "b"), Budget(10, 10))
    assert out.passed and out.best == {"a": "fp32"}
    assert any(s.action == "trim" and s.kept for s in out.steps)


def test_a_move_that_is_faster_and_more_accurate_comes_first():
    log = []
    table = {frozenset(): 3.0, frozenset("d"): 2.9, frozenset("a"): 2.0, frozenset("ad"): 1.9}
    moves = [Move("a", "fp32", 1.0, 1.0), Move("d", "fp32", 0.1, -0.5)]
    greedy(fake(table, log=log), latency, moves, {}, ladders("a", "d"), Budget(10, 10))
    assert log[1] == (("d",), False)


def test_the_layer_budget_stops_the_search():
    table = {frozenset(): 3.0, frozenset("a"): 2.0, frozenset("ab"): 1.5}
    moves = [Move("a", "fp32", 1.0, 1.0), Move("b", "fp32", 0.5, 1.0)]
    out = greedy(fake(table), latency, moves, {}, ladders("a", "b"), Budget(10, 1))
    assert out.best == {"a": "fp32"} and out.stopped.startswith("layer budget spent (1")


def test_a_ladder_step_gains_only_what_it_adds_over_the_current_precision():
    ladder = {"a": ("int8", "fp8", "fp16")}
    seen = []

    def evaluate(patch, full):
        seen.append(dict(patch))
        return Score({"r": {(): 3.0, ("fp8",): 2.0, ("fp16",): 1.8}[tuple(patch.values())]})

    moves = [Move("a", "fp8", 1.0, 0.0), Move("a", "fp16", 1.2, 1.0)]
    out = greedy(evaluate, lambda p: 10.0 + (1.0 if p.get("a") == "fp16" else 0.0), moves, {}, ladder,
                 Budget(10, 5))
    assert seen[1] == {"a": "fp8"} and seen[2] == {"a": "fp16"}  # free FP8 first, then the 0.2 FP16 adds
    assert out.best == {"a": "fp16"}  # FP16 lowered the objective further
