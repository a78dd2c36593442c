"""Judging a candidate as parity does: ratios to limits, measurements independent of the limits."""

import dataclasses

import numpy as np
import pytest

from deploykit.config import (
    ClassificationCheck,
    DepthCheck,
    DetectionCheck,
    ParityConfig,
    ProbabilityMapCheck,
    SegmentationCheck,
    TaskChecks,
    Tolerance,
    TrajectoryCheck,
)
from deploykit.graph.run import session_from_onnx
from deploykit.metrics.comparison import Comparison
from deploykit.metrics.tasks import build_tasks
from deploykit.quant.judge import (
    LIMIT_FIELDS,
    Judge,
    Measurement,
    measurement_of,
    measurement_settings,
    score,
)
from tests.quant import models

PRESET = Tolerance(rel_l2=0.1, cosine=0.995, rel_floor=1e-2)


def test_ratios_compare_each_value_with_its_limit():
    parity = ParityConfig(tasks=TaskChecks(probability_map=(ProbabilityMapCheck("prob", min_iou=0.97),)))
    m = Measurement(
        {"prob": {"rel_l2": 0.12, "cosine": 0.9975, "max_abs": 0.9, "nonfinite": 0}},
        [{"label": "probability_map[0]", "kind": "probability_map", "metrics": {"iou": 0.94}, "inconclusive": ""}],
        4,
    )
    s = score(m, parity, PRESET)
    assert s.ratios["prob.rel_l2"] == pytest.approx(1.2)
    assert s.ratios["prob.cosine"] == pytest.approx(0.5)  # shortfall 0.0025 of an allowed 0.005
    assert s.ratios["probability_map[0].iou"] == pytest.approx(2.0)
    assert "prob.max_abs" not in s.ratios  # a probability map's max_abs is not checked (as in parity)
    assert s.excess == pytest.approx(0.2 + 1.0) and not s.passed and s.values["probability_map[0].iou"] == 0.94
    tighter = dataclasses.replace(parity, default=Tolerance(rel_l2=0.06))
    assert score(m, tighter, PRESET).ratios["prob.rel_l2"] == pytest.approx(2.0)  # same measurement, new limits


def test_nan_outputs_and_vacuous_checks():
    parity = ParityConfig(tasks=TaskChecks(probability_map=(ProbabilityMapCheck("prob"),)))
    m = Measurement(
        {"prob": {"rel_l2": 0.01, "cosine": 1.0, "nonfinite": 3}},
        [
            {
                "label": "probability_map[0]",
                "kind": "probability_map",
                "metrics": {"iou": 0.0},
                "inconclusive": "no reference pixel reaches the threshold 0.5",
            }
        ],
        2,
    )
    s = score(m, parity, PRESET)
    assert not s.passed and s.ratios["prob.nonfinite"] >= 1e3 and "probability_map[0].iou" not in s.ratios


CHECKS = [
    ClassificationCheck("y"),
    DetectionCheck("b", "s"),
    SegmentationCheck("y"),
    DepthCheck("y"),
    TrajectoryCheck("y", scores="s"),
    ProbabilityMapCheck("y"),
]  # with scores, min_top1 is a limit too


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: type(c).__name__)
def test_limit_fields_are_exactly_the_fields_limits_read(check):
    """A cached measurement is re-scored at new limits: every field that moves a limit must be in
    LIMIT_FIELDS (left out of the cache key), and no other field may be."""
    kind = {
        ClassificationCheck: "classification",
        DetectionCheck: "detection",
        SegmentationCheck: "segmentation",
        DepthCheck: "depth",
        TrajectoryCheck: "trajectory",
        ProbabilityMapCheck: "probability_map",
    }[type(check)]

    def limits(c):
        return build_tasks(TaskChecks(**{kind: (c,)}))[0].limits()

    for f in dataclasses.fields(check):
        value = getattr(check, f.name)
        if not isinstance(value, float):
            continue
        changed = dataclasses.replace(check, **{f.name: value * 0.5 + 0.01})
        assert (limits(changed) != limits(check)) == (f.name in LIMIT_FIELDS), f.name


def test_measurement_settings_ignore_limits_but_not_what_changes_a_measurement():
    base = ParityConfig(tasks=TaskChecks(probability_map=(ProbabilityMapCheck("prob", min_iou=0.97),)))
    tighter = dataclasses.replace(
        base,
        default=Tolerance(rel_l2=0.01, cosine=0.9999),
        tasks=TaskChecks(probability_map=(ProbabilityMapCheck("prob", min_iou=0.99),)),
    )
    other_threshold = dataclasses.replace(
        base, tasks=TaskChecks(probability_map=(ProbabilityMapCheck("prob", threshold=0.3),))
    )
    assert measurement_settings(base) == measurement_settings(tighter)
    assert measurement_settings(base) != measurement_settings(other_threshold)


def test_the_judge_agrees_with_a_parity_comparison_on_the_same_samples():
    model = models.cnn((8, 16), head="sigmoid")
    candidate = models.cnn((8, 16), head="sigmoid", seed=0)
    for init in candidate.graph.initializer:  # a perturbed copy: the same graph with noisy weights
        if init.name.endswith(".weight"):
            from onnx import numpy_helper

            w = numpy_helper.to_array(init)
            init.CopyFrom(
                numpy_helper.from_array(
                    (w * (1 + 0.05 * np.sin(np.arange(w.size)).reshape(w.shape))).astype(np.float32), init.name
                )
            )
    samples = models.images(5, seed=3)
    parity = ParityConfig(tasks=TaskChecks(probability_map=(ProbabilityMapCheck("y", min_iou=0.99),)))
    judge = Judge(model, samples, session_from_onnx, parity, PRESET, "int8", "5 samples")
    verdict = judge.check(candidate)
    comparison = Comparison(parity, PRESET, "int8")
    ref, got = session_from_onnx(model), session_from_onnx(candidate)
    for s in samples:
        comparison.add({"onnx": ref.infer(s)}, got.infer(s))
    report = comparison.report()
    assert verdict.passed == report["passed"]
    assert verdict.metrics["y"]["rel_l2"] == report["outputs"]["y"]["onnx"]["metrics"]["rel_l2"]
    assert verdict.tasks[0]["metrics"] == measurement_of(report).tasks[0]["metrics"]
    assert score(judge.measure(candidate), parity, PRESET).passed == report["passed"]
    assert judge.evaluations == 1 and judge.inferences == 5  # the same graph judged twice ran once
    # the judge bins no error histogram (no plot reads a candidate's); the parity stage's comparison does
    assert "abs_error_histogram" not in judge.report(candidate)["outputs"]["y"]["onnx"]
    assert "abs_error_histogram" in report["outputs"]["y"]["onnx"]


def _perturbed(model, amount):
    """The same graph with its weights scaled by 1 + amount * sin(i): a candidate ``amount`` away."""
    from onnx import numpy_helper

    out = type(model)()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        if init.name.endswith(".weight"):
            w = numpy_helper.to_array(init)
            wave = np.sin(np.arange(w.size)).reshape(w.shape)
            init.CopyFrom(numpy_helper.from_array((w * (1 + amount * wave)).astype(np.float32), init.name))
    return out


def test_the_race_scores_the_best_first_sample_first_and_keeps_the_full_evaluations_front():
    """Every candidate is scored on the first sample and the best goes on first, so a candidate given
    first can be stopped by one given last; which candidates finish undominated is what scoring each
    on every sample gives, and the entries come back in the given order."""
    from deploykit.quant.judge import Entry, front_ranks, task_losses

    model = models.cnn((8, 16), head="sigmoid")
    candidates = {f"noise {a}": _perturbed(model, a) for a in (0.3, 0.15, 0.05)} | {"exact": _perturbed(model, 0.0)}
    samples = models.images(8, seed=4)
    parity = ParityConfig(tasks=TaskChecks(probability_map=(ProbabilityMapCheck("y", min_iou=0.99),)))
    judge = Judge(model, samples, session_from_onnx, parity, PRESET, "int8", "8 samples")
    entries = judge.race({name: (lambda c=c: c) for name, c in candidates.items()})

    assert list(entries) == list(candidates)
    assert not entries["exact"].stopped and entries["exact"].samples == len(samples)
    assert entries["noise 0.3"].stopped and entries["noise 0.3"].beaten_by == "exact"  # given first, stopped
    assert entries["noise 0.3"].samples < len(samples)
    assert judge.inferences < len(candidates) * len(samples)

    full = Judge(model, samples, session_from_onnx, parity, PRESET, "int8", "8 samples")
    scored = {name: Entry(task_losses(full.measure(c), parity), len(samples)) for name, c in candidates.items()}
    raced, every = front_ranks(entries), front_ranks(scored)
    assert {m for m, r in raced.items() if r is not None} == {m for m, r in every.items() if r is not None}
    assert min((r, m) for m, r in raced.items() if r is not None) == min(
        (r, m) for m, r in every.items() if r is not None
    )


def _two_cores_counting_threads(monkeypatch):
    """An opener on a 2-core machine that lists the thread count each session was opened with."""
    from deploykit.graph import parallel

    monkeypatch.setattr(parallel, "cores", lambda: 2)
    opened = []

    def opener(model, **kw):
        opened.append(kw.get("threads"))
        return session_from_onnx(model, **kw)

    return opener, opened


def test_one_sample_runs_on_every_core_and_several_side_by_side(monkeypatch):
    """A graph judged alone on one sample keeps every core; a judgement on several runs them two at a
    time on a core each (deploykit.graph.parallel)."""
    opener, opened = _two_cores_counting_threads(monkeypatch)
    model = models.cnn((8,), head="sigmoid", seed=0)
    judge = Judge(model, models.images(4, seed=5), opener, ParityConfig(), PRESET, "int8", "4 samples")
    one = judge.report(models.cnn((8,), head="sigmoid", seed=1), n=1)
    four = judge.report(models.cnn((8,), head="sigmoid", seed=2), n=4)
    assert opened == [0, 1] and len(one["outputs"]["y"]["onnx"]["per_sample_rel_l2"]) == 1
    assert len(four["outputs"]["y"]["onnx"]["per_sample_rel_l2"]) == 4


def test_graphs_judged_side_by_side_measure_what_each_alone_does(monkeypatch):
    """The first-order ranking's one-sample judgements run two graphs at a time, each on a core of its
    own, opened as they are reached; each measures what judging it alone does, and one judged already
    is not run again."""
    opener, opened = _two_cores_counting_threads(monkeypatch)
    model = models.cnn((8,), head="sigmoid", seed=0)
    samples = models.images(3, seed=8)
    graphs = {f"seed {k}": models.cnn((8,), head="sigmoid", seed=k) for k in (1, 2, 3)}
    judge = Judge(model, samples, opener, ParityConfig(), PRESET, "int8", "3 samples")
    both = judge.measure_side_by_side([(k, lambda g=g: judge.runner(g)) for k, g in graphs.items()], 2)
    assert list(both) == list(graphs) and opened == [1, 1, 1] and judge.inferences == 6
    again = judge.measure_side_by_side([("seed 1", lambda: pytest.fail("judged already: not opened again"))], 2)
    assert again["seed 1"] == both["seed 1"] and judge.inferences == 6

    alone = Judge(model, samples, session_from_onnx, ParityConfig(), PRESET, "int8", "3 samples")
    for key, graph in graphs.items():
        expected = alone.measure(graph, 2, key=key)
        assert both[key].samples == expected.samples == 2
        for output, metrics in expected.outputs.items():
            assert both[key].outputs[output] == pytest.approx(metrics, rel=1e-5, abs=1e-9)


def test_the_reference_made_ahead_is_the_reference_and_a_stopped_one_runs_nothing():
    import threading

    from deploykit.quant.check import Reference

    model = models.cnn((8,), head="sigmoid", seed=0)
    samples = models.images(5, seed=7)
    judge = Judge(model, samples, session_from_onnx, ParityConfig(), PRESET, "int8", "5 samples")
    judge.prefetch()
    direct = Reference(model, samples)
    assert len(judge.ref.outputs) == 5
    for a, b in zip(judge.ref.outputs, direct.outputs, strict=True):
        assert all(np.array_equal(a[k], b[k]) for k in b)
    assert judge.ref.signal == direct.signal
    stop = threading.Event()
    stop.set()
    assert Reference(model, samples, stop).outputs == []


@pytest.mark.parametrize("judged", ["task", "elementwise"])
def test_a_judgement_on_every_sample_stops_once_the_candidate_cannot_pass(judged):
    """Asked to stop, a judgement on every sample ends at the first sample after which no outputs on the
    rest could make the candidate pass: its verdict is the full one's, its ratios the best it could
    still reach (none above the full one's), and judging it in full afterwards runs only the rest."""
    model = models.cnn((8, 16), head="sigmoid")
    samples = models.images(12, seed=6)
    if judged == "task":
        off = Tolerance(rel_l2=float("inf"), cosine=-float("inf"), max_abs=float("inf"), mean_abs=float("inf"))
        parity = ParityConfig(default=off, tasks=TaskChecks(probability_map=(ProbabilityMapCheck("y", min_iou=0.99),)))
    else:
        parity = ParityConfig()
    stopped_somewhere = False
    for amount in (0.0, 0.01, 0.03, 0.1, 0.3, 1.0):
        candidate = _perturbed(model, amount)
        full = Judge(model, samples, session_from_onnx, parity, PRESET, "int8", "12 samples").measure(candidate)
        judge = Judge(model, samples, session_from_onnx, parity, PRESET, "int8", "12 samples")
        early = judge.measure(candidate, stop=True)
        whole, best = score(full, parity, PRESET), score(early, parity, PRESET)
        assert best.passed == whole.passed and early.samples == full.samples == len(samples)
        if early.ran is None:
            assert early == full and judge.inferences == len(samples)
            continue
        stopped_somewhere = True
        assert 1 <= early.ran < len(samples) and judge.inferences <= early.ran + 1  # one more may be in flight
        assert all(best.ratios[k] <= whole.ratios[k] * (1 + 1e-9) + 1e-12 for k in best.ratios)
        assert judge.measure(candidate) == full and judge.inferences == len(samples) and judge.evaluations == 1
    assert stopped_somewhere  # the worst candidates fail within the first samples


def test_a_judgement_on_fewer_samples_never_stops_early():
    """The best possible finish counts the samples after the judged ones; on fewer than all it would
    count the wrong ones, so such a judgement runs its samples in full."""
    model = models.cnn((8, 16), head="sigmoid")
    judge = Judge(model, models.images(6, seed=7), session_from_onnx, ParityConfig(), PRESET, "int8", "6 samples")
    found = judge.measure(_perturbed(model, 0.3), 4, stop=True)
    assert found.ran is None and found.samples == 4 and judge.inferences == 4


def test_a_stopped_measurement_in_the_search_cache_proves_only_a_failure():
    """A search measurement that stopped early is reused while it still fails, and measured again in
    full where a complete one is asked for, or where a looser limit (a rerun) would pass it."""
    from deploykit.quant.sensitivity import Evaluations

    model = models.cnn((8, 16), head="sigmoid")
    bad, patch = _perturbed(model, 1.0), {"g": "fp32"}
    judge = Judge(model, models.images(8, seed=6), session_from_onnx, ParityConfig(), PRESET, "int8", "8 samples")
    ev = Evaluations(judge, lambda p: bad)
    stopped = ev.measure(patch, 8, stop=True)
    assert stopped.ran is not None and ev.measure(patch, 8, stop=True) == stopped and ev.fresh == 1

    complete = Evaluations(judge, lambda p: bad, cache=dict(ev.cache)).measure(patch, 8)
    assert complete.ran is None and complete.samples == 8

    judge.preset = Tolerance(rel_l2=100.0, cosine=0.0, rel_floor=1e-2)  # a rerun at a looser tolerance
    again = Evaluations(judge, lambda p: bad, cache=dict(ev.cache))
    assert again.measure(patch, 8, stop=True) == complete and again.fresh == 1 and again.cached == 0


def test_a_confirmation_extends_the_session_its_search_samples_ran_in_without_building_the_graph_again():
    from deploykit.quant.sensitivity import Evaluations

    model = models.cnn((8, 16), head="sigmoid")
    built, patch = [], {"g": "fp32"}
    judge = Judge(model, models.images(8, seed=7), session_from_onnx, ParityConfig(), PRESET, "int8", "8 samples")
    ev = Evaluations(judge, lambda p: built.append(dict(p)) or _perturbed(model, 0.01))
    few = ev.measure(patch, 3)
    full = ev.measure(patch, 8, stop=True)
    assert built == [patch] and judge.evaluations == 1 and judge.inferences == 8
    assert few.samples == 3 and full.samples == 8 and full.ran is None
    other = ev.measure({"h": "fp32"}, 8)  # a state never measured is built
    assert len(built) == 2 and other.samples == 8


def test_a_graph_judged_in_full_is_scored_on_its_first_samples_without_running_again():
    """Judged on every sample, a candidate keeps its report on each count up to ``early``: the search's
    start (the graph method auto's race or the check judged in full) is then scored on its first samples
    as judging it on those samples alone would, and nothing runs; above ``early`` a judgement runs."""
    from deploykit.quant.sensitivity import Evaluations

    model = models.cnn((8, 16), head="sigmoid")
    samples = models.images(8, seed=9)
    candidate = _perturbed(model, 0.05)
    judge = Judge(model, samples, session_from_onnx, ParityConfig(), PRESET, "int8", "8 samples", early=4)
    judge.check(candidate, key="start")
    assert judge.inferences == 8 and judge.evaluations == 1
    ev = Evaluations(judge, lambda p: candidate, keys={"": "start"})
    for n in (1, 3, 4):
        alone = Judge(model, samples, session_from_onnx, ParityConfig(), PRESET, "int8", "8 samples")
        assert ev.measure({}, n) == alone.measure(candidate, n)
    assert judge.inferences == 8 and judge.evaluations == 1
    ev.measure({}, 5)  # beyond the kept counts: measured
    assert judge.evaluations == 2 and judge.inferences == 13


def test_confirmations_meet_the_samples_the_start_missed_most_first():
    """After the first ``keep`` samples (the search samples, left in place), the judging samples are put
    in the order the start graph missed most on them; the reference outputs follow their samples, the
    caller's list is left alone, and a stopped confirmation of a graph missing where the start did
    ends sooner than in the given order, with the same verdict."""
    model = models.cnn((8, 16), head="sigmoid")
    samples = models.images(10, seed=11)
    given = list(samples)
    reference = session_from_onnx(model)
    flipped = {id(samples[6]): 1.0, id(samples[8]): 0.3, id(samples[2]): 1.0}  # share of pixels flipped

    class Missing:  # the reference's map, with a share of its pixels flipped on some samples
        evaluator = "a test double"

        def infer(self, sample):
            out = reference.infer(sample)
            y = out["y"]
            mask = np.arange(y.size).reshape(y.shape) < flipped.get(id(sample), 0.0) * y.size
            return {"y": np.where(mask, 1.0 - y, y).astype(y.dtype)}

    off = Tolerance(rel_l2=float("inf"), cosine=-float("inf"), max_abs=float("inf"), mean_abs=float("inf"))
    parity = ParityConfig(default=off, tasks=TaskChecks(probability_map=(ProbabilityMapCheck("y", min_iou=0.99),)))

    def judge():
        return Judge(model, samples, lambda *a, **k: Missing(), parity, PRESET, "int8", "10 samples")

    ordered = judge()
    assert not ordered.check(model, key="start").passed
    ordered.report(model, 6, key="part")  # on more samples than kept and fewer than all: dropped
    ordered.hardest_first("start", 4)
    position = {id(s): k for k, s in enumerate(given)}
    assert [position[id(s)] for s in ordered.samples] == [0, 1, 2, 3, 6, 8, 4, 5, 7, 9]
    assert [id(s) for s in samples] == [id(s) for s in given]
    for sample, out in zip(ordered.samples, ordered.ref.outputs, strict=True):
        np.testing.assert_array_equal(out["y"], reference.infer(sample)["y"])
    assert ("part", 6) not in ordered._reports and ("start", 10) in ordered._reports

    del flipped[id(samples[2])]  # a state the search samples pass
    in_given_order = judge().measure(model, key="confirm", stop=True)
    sooner = ordered.measure(model, key="confirm", stop=True)
    assert sooner.ran is not None and in_given_order.ran is not None and sooner.ran < in_given_order.ran
    assert not score(sooner, parity, PRESET).passed and not score(in_given_order, parity, PRESET).passed
