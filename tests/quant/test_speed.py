"""The CPU speed check of the onnxruntime flavour: FP32 vs INT8, and when it warns."""

import pytest

from deploykit.quant import speed
from deploykit.quant.speed import SpeedCheck
from tests.quant import models


@pytest.mark.parametrize(
    ("fp32_ms", "int8_ms", "says"),
    [
        (2.0, 1.0, None),  # 2x faster: nothing to say
        (1.0, 0.95, "not faster than"),  # 1.05x is within a VM's drift
        (1.0, 1.5, "slower than"),
    ],
)
def test_the_warning_says_plainly_when_int8_is_not_faster(fp32_ms, int8_ms, says):
    check = SpeedCheck(fp32_ms, int8_ms, rounds=5, iterations=10, batch=1, evaluator="ort")
    assert check.speedup == pytest.approx(fp32_ms / int8_ms)
    warning = check.warning("int8")
    if says is None:
        assert warning is None
    else:
        assert warning.startswith(f"INT8 is {says} FP32") and f"{int8_ms:.3f} ms vs {fp32_ms:.3f} ms" in warning
    assert check.to_dict()["speedup"] == pytest.approx(check.speedup)


def test_compare_times_both_graphs_on_the_sample_within_its_budget():
    from deploykit.config import QuantizeConfig
    from deploykit.quant.quantize import Job, quantize_model
    from deploykit.quant.reader import SampleStream

    fp32 = models.cnn((8, 16))
    int8 = quantize_model(
        Job(fp32, QuantizeConfig(precision="int8"), "onnxruntime", SampleStream(models.images(16)))
    ).model
    sample = models.images(1, batch=2)[0]
    check = speed.compare(fp32, int8, sample, "extended", budget_s=0.2)
    assert check.fp32_ms > 0 and check.quantized_ms > 0
    assert speed.DECIDED_ROUNDS <= check.rounds <= speed.MAX_ROUNDS and check.iterations >= 1 and check.batch == 2
    assert check.speedup_low <= check.speedup <= check.speedup_high  # the median ratio lies within the rounds'
    assert check.fp32_spread >= 0 and check.quantized_spread >= 0
    assert "optimization level extended" in check.evaluator


def test_compare_interleaves_rounds_in_alternating_order(monkeypatch):
    """Each round times both graphs; the order alternates so drift within a round does not favour one."""
    from deploykit.metrics import latency

    order = []
    real = latency.time_iterations

    def spy(run, n):
        order.append(run)
        return real(run, n)

    monkeypatch.setattr(latency, "time_iterations", spy)
    fp32 = models.cnn((8,))
    check = speed.compare(fp32, fp32, models.images(1)[0], "extended", budget_s=0.05)
    timed = order[2:]  # after one sizing run each
    assert len(timed) == 2 * check.rounds and check.rounds >= speed.DECIDED_ROUNDS
    firsts = [timed[2 * r] for r in range(check.rounds)]
    assert firsts[0] is not firsts[1] and firsts[0] is firsts[2]  # A B, B A, A B, ...


def test_the_timed_sessions_do_not_spin_between_turns(monkeypatch):
    """A spinning session's idle threads take the cores from the next graph's turn: the ratio then
    depends on how many graphs are timed together (measured 1.57x beside three against 1.20x alone)."""
    from deploykit.graph import run

    spins = []
    real = run.session_from_onnx

    def spy(*a, **k):
        spins.append(k.get("spin", True))
        return real(*a, **k)

    monkeypatch.setattr(run, "session_from_onnx", spy)
    fp32 = models.cnn((8,))
    speed.compare_all(fp32, {"a": fp32, "b": fp32}, models.images(1)[0], "extended", budget_s=0.05)
    assert spins == [False, False, False]


def test_the_stage_times_a_library_call_without_a_progress_bar(monkeypatch):
    """A Job without a Reporter's task (a library call, the real-model bench) still gets the stage's
    CPU timing, with the stage's default budget; INT8 of the onnxruntime flavour only."""
    from deploykit.config import QuantizeConfig
    from deploykit.quant.quantize import Job, quantize_model
    from deploykit.quant.reader import SampleStream
    from deploykit.stages.quantize import cpu_speed

    budgets = []
    real = speed.compare

    def spy(fp32, quantized, sample, level, budget_s=speed.BUDGET_S):
        budgets.append(budget_s)
        return real(fp32, quantized, sample, level, budget_s=0.05)

    monkeypatch.setattr(speed, "compare", spy)
    fp32 = models.cnn((8,))
    stream = SampleStream(models.images(16))
    job = Job(fp32, QuantizeConfig(precision="int8"), "onnxruntime", stream)
    assert job.task is None
    found = cpu_speed(job, quantize_model(job), stream)
    assert isinstance(found, SpeedCheck) and found.fp32_ms > 0 and budgets == [speed.BUDGET_S]
    fp16 = Job(fp32, QuantizeConfig(precision="fp16"), "onnxruntime", SampleStream(models.images(4)))
    assert cpu_speed(fp16, quantize_model(fp16), stream) is None and budgets == [speed.BUDGET_S]


@pytest.mark.parametrize(("int8_ms", "settles"), [((1.0,), True), ((0.5, 2.0), False)])
def test_the_timing_stops_once_the_rounds_agree(monkeypatch, standin_clock, int8_ms, settles):
    """Rounds that agree stop the timing after ROUNDS, within its budget; rounds that keep disagreeing
    (INT8 at 4x, then 1x, ...) take the whole budget. Scripted latencies on the stand-in clock."""
    from deploykit.graph import run
    from tests.standins import StandInSession

    scripts = iter([(2.0,), int8_ms])
    monkeypatch.setattr(run, "session_from_onnx", lambda *a, **k: StandInSession(standin_clock, next(scripts)))
    fp32 = models.cnn((8,))
    check = speed.compare_all(fp32, {"int8": fp32}, models.images(1)[0], "extended", budget_s=0.05)["int8"]
    rounds_ms = check.rounds * (2.0 + sum(int8_ms) / len(int8_ms))  # one iteration of each per round
    assert check.iterations == 1
    if settles:
        assert check.rounds == speed.ROUNDS and check.speedup == pytest.approx(2.0) and rounds_ms < 50
    else:
        assert speed.ROUNDS < check.rounds <= speed.MAX_ROUNDS and rounds_ms >= 50
        assert check.speedup_low == pytest.approx(1.0) and check.speedup_high == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("int8_ms", "decided"),
    [((1.0,), True), ((2.0 / 1.08, 2.0 / 1.12), False)],  # 2x; rounds at 1.08x and 1.12x, about NOT_FASTER
)
def test_the_stage_timing_stops_once_whether_to_warn_is_certain(monkeypatch, standin_clock, int8_ms, decided):
    """The quantize stage's timing (compare) stops after DECIDED_ROUNDS once the speed-up lies far from both
    of the warning's thresholds; rounds that straddle NOT_FASTER go on until they settle, as the search's
    timings (compare_all) always do. Scripted latencies on the stand-in clock."""
    from deploykit.graph import run
    from tests.standins import StandInSession

    scripts = iter([(2.0,), int8_ms])
    monkeypatch.setattr(run, "session_from_onnx", lambda *a, **k: StandInSession(standin_clock, next(scripts)))
    fp32 = models.cnn((8,))
    check = speed.compare(fp32, fp32, models.images(1)[0], "extended", budget_s=0.05)  # one iteration a round
    if decided:
        assert check.rounds == speed.DECIDED_ROUNDS and check.speedup == pytest.approx(2.0)
        assert check.warning("int8") is None
    else:
        assert check.rounds == speed.ROUNDS  # settled: the per-round ratios pin the speed-up to PRECISION
        assert check.speedup_low == pytest.approx(1.08) and check.speedup_high == pytest.approx(1.12)


def test_a_timing_asked_to_decide_stops_once_every_graph_is_on_a_certain_side_of_every_edge(monkeypatch, standin_clock):
    """compare_all with ``decide`` (the search's answer, TIMED_EDGES): a graph at 2x and one at exactly 1x are
    decided about 1.1x after DECIDED_ROUNDS; asked about 1x too, the graph on it never is, and the rounds run
    on until they settle. Scripted latencies on the stand-in clock."""
    from deploykit.graph import run
    from deploykit.quant.sensitivity import TIMED_EDGES
    from tests.standins import StandInSession

    assert 1.0 in TIMED_EDGES and speed.NOT_FASTER in TIMED_EDGES
    fp32 = models.cnn((8,))
    for edges, rounds in (((1.1,), speed.DECIDED_ROUNDS), ((1.0, 1.1), speed.ROUNDS)):
        scripts = iter([(2.0,), (1.0,), (2.0,)])
        monkeypatch.setattr(run, "session_from_onnx", lambda *a, s=scripts, **k: StandInSession(standin_clock, next(s)))
        found = speed.compare_all(fp32, {"fast": fp32, "same": fp32}, models.images(1)[0], "extended", 0.05, edges)
        assert found["fast"].rounds == found["same"].rounds == rounds
        assert found["fast"].speedup == pytest.approx(2.0) and found["same"].speedup == pytest.approx(1.0)
