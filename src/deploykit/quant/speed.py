"""Is the quantized model faster than FP32 on this CPU? Interleaved rounds, with their spread.

INT8 in the onnxruntime flavour pays off on dense convolutions (1.5-2x measured here) and not on
depthwise-heavy networks, nor where many excluded nodes put Q/DQ boundaries between float islands.
The quantize stage measures both graphs the way the onnxruntime backend will run them and says
plainly when the "optimized" model is not faster; the gate then times the built engine properly.

The loop is the gate's (:func:`deploykit.metrics.latency.time_iterations` after
:func:`~deploykit.metrics.latency.warm_up`): at least :data:`ROUNDS` rounds, each timing FP32 and
the quantized graph back to back (in alternating order, so drift within a round hits both alike),
iterations per round sized so that :data:`MAX_ROUNDS` rounds fill the time budget. 5 rounds of 1
iteration said 2.00x where 40 interleaved rounds said 1.17x on a real text detector; the figure is
the ratio of the medians, and the per-round ratios give its spread. After :data:`ROUNDS` rounds the
timing stops once those ratios pin the speed-up down to :data:`PRECISION` (a standard error): a
small model whose rounds agree is done in a quarter of the budget, a noisy one takes all of it.
A timing that answers questions stops sooner: the quantize stage's own (:func:`compare`) decides
whether to warn that INT8 is not faster (:data:`WARNING_EDGES`), the search's whether its answer beats
FP32 and by its margins; each stops after :data:`DECIDED_ROUNDS` rounds once every answer is certain
(:data:`DECIDED` standard errors from each threshold), which ten rounds of a large model took seconds
to confirm. The figure comes with the rounds' range as always.

The timed sessions do not spin between runs: a session's idle worker threads spin-wait after its
turn and take the cores from the next graph's turn. On a 2-core VM a 3-ms recognizer timed beside
three other sessions read 1.57x (FP32 5.78 ms) with spinning and 1.21x (4.24 ms) without; timed as
a pair, 1.20x and 1.22x: without spinning the ratio no longer depends on how many graphs are timed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnx

TIMING_TASK = "timing FP32 against INT8 on this CPU"  # the progress task that names it (about a second)
NOT_FASTER = 1.1  # below this, a 2-core VM's drift between rounds can account for the difference
WARNING_EDGES = (NOT_FASTER, 1 / NOT_FASTER)  # the speed-ups at which the stage's warning changes
ROUNDS = 10  # at least; more when the budget allows a round of one iteration more often
MAX_ROUNDS = 40
# A timing asked to decide stops after this many rounds at the earliest, once its mean per-round log
# speed-up lies this many standard errors from the log of each threshold it decides: with 4 degrees of
# freedom, 5 standard errors leave under 1 % that the answer would have been the other side.
DECIDED_ROUNDS = 5
DECIDED = 5.0
# Runs and seconds per graph before the rounds: the first run allocates ONNX Runtime's buffers, and the
# sizing run after it is a second warm-up (three runs cost a large model 0.7 s and moved nothing).
WARMUP = (1, 0.05)
# Seconds of interleaved rounds per timing. Five timings each at 3 s and at 1 s, alternating, of a real
# recognizer and text detector spread alike (speed-up sd 0.014/0.020 at 3 s, 0.022/0.008 at 1 s): drift
# between timings outweighs what two more seconds buy, and every CPU-flavour INT8 quantize waits for it.
BUDGET_S = 1.0
# The standard error of the mean per-round log speed-up at which the timing stops early (about 1 %): below
# the 2 % the speed-up drifted between whole timings of a real recognizer and text detector.
PRECISION = 0.01


@dataclass(frozen=True)
class SpeedCheck:
    """Median per-inference time of each graph over interleaved rounds, one sample at a time."""

    fp32_ms: float
    quantized_ms: float
    rounds: int
    iterations: int  # per round and graph
    batch: int
    evaluator: str
    speedup_low: float = 0.0  # the slowest and fastest per-round ratio FP32 / quantized
    speedup_high: float = 0.0
    fp32_spread: float = 0.0  # (max - min) / median of the per-round medians
    quantized_spread: float = 0.0

    @property
    def speedup(self) -> float:
        return self.fp32_ms / self.quantized_ms if self.quantized_ms > 0 else float("inf")

    def warning(self, precision: str, mix: tuple[int, int] | None = None, reason: str = "") -> str | None:
        """The plain statement when the quantized graph is not faster; ``mix``: (groups the search kept
        in FP32, groups in all) when the graph is the search's mixed-precision answer; ``reason``: why,
        from the model (:func:`why_not_faster`)."""
        if self.speedup >= NOT_FASTER:
            return None
        how = "slower than" if self.speedup < 1 / NOT_FASTER else "not faster than"
        what = (
            f"the mix the search chose ({mix[0]} of {mix[1]} layer groups in FP32, the rest {precision.upper()})"
            if mix
            else precision.upper()
        )
        measured = (
            f"{self.quantized_ms:.3f} ms vs {self.fp32_ms:.3f} ms per inference at batch {self.batch} "
            f"({self.speedup:.2f}x, {self.speedup_low:.2f}-{self.speedup_high:.2f}x over {self.rounds} "
            f"interleaved rounds; {self.evaluator})"
        )
        if mix:
            return (
                f"{what} passes parity but is {how} FP32 on this CPU: {measured}. No mix the search tried both "
                "passes and beats FP32 here; keep FP32 (--precision fp32), or loosen the tolerance"
            )
        because = f" {reason[0].upper()}{reason[1:]}." if reason else ""
        return (
            f"{what} is {how} FP32 on this CPU: {measured}.{because} Keep FP32 (--precision fp32) unless the "
            "gate's numbers say otherwise"
        )

    def sentence(self, what: str) -> str:
        """``what`` against FP32 as every view prints it: ratio of the medians, the per-round range, the times."""
        return (
            f"{what} {self.speedup:.2f}x FP32 ({self.speedup_low:.2f}-{self.speedup_high:.2f}x over {self.rounds} "
            f"interleaved rounds; {self.quantized_ms:.3g} vs {self.fp32_ms:.3g} ms)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup}


DEPTHWISE_HEAVY = 0.3  # of the compute time: ORT's integer depthwise kernel is no faster than FP32
NO_INTEGER_KERNEL = ("GRU", "LSTM", "RNN", "LayerNormalization", "Softmax", "Erf", "InstanceNormalization")


def why_not_faster(model: onnx.ModelProto) -> str:
    """The likeliest reason INT8 does not beat FP32 on the CPU for this FP32 graph, from what it computes:
    depthwise convolutions (ORT's integer kernel gains nothing there), ops with no integer kernel
    (recurrent layers, normalisations: float between Q/DQ pairs), little convolution or MatMul work,
    else the Q/DQ work at every boundary between quantized and float nodes."""
    from deploykit.graph.proto import infer_shapes, static_shapes
    from deploykit.quant.latency_cost import _cpu_us, _depthwise

    graph = infer_shapes(model)
    shapes = static_shapes(graph)
    ops = [n.op_type for n in graph.graph.node]
    compute = [n for n in graph.graph.node if n.op_type in ("Conv", "ConvTranspose", "MatMul", "Gemm")]
    fp32_us = {n.name: _cpu_us(n, shapes, "fp32") for n in compute}  # the CPU roofline's FP32 time
    thin = sum(fp32_us[n.name] for n in compute if _depthwise(n, shapes))
    total = sum(fp32_us.values())
    if total and thin > DEPTHWISE_HEAVY * total:
        return (
            f"depthwise convolutions take {thin / total:.0%} of the estimated convolution and MatMul time, and "
            "ONNX Runtime's integer depthwise kernel is no faster than its FP32 one"
        )
    slow = sorted({op for op in ops if op in NO_INTEGER_KERNEL})
    if slow:
        return (
            f"its {', '.join(slow)} nodes have no integer kernel in ONNX Runtime: they run in float between "
            "Q/DQ pairs, which adds conversions around them"
        )
    if total == 0:
        return "it has no Conv, MatMul or Gemm work for integer kernels to speed up"
    return "every boundary between quantized and float nodes adds a Q/DQ pair, and its convolutions are small"


def compare(
    fp32: onnx.ModelProto,
    quantized: onnx.ModelProto,
    sample: dict[str, np.ndarray],
    level: str,
    budget_s: float = BUDGET_S,
) -> SpeedCheck:
    """Time ``fp32`` and ``quantized`` on ``sample`` with ONNX Runtime's CPU kernels at ``level``.

    The iterations per round are sized from one timed run of each so that :data:`MAX_ROUNDS` rounds
    take about ``budget_s``; at least :data:`ROUNDS` rounds of at least one iteration run, and more
    until the speed-up is known to :data:`PRECISION` or the budget is spent, unless whether to warn
    is decided first (at least :data:`DECIDED_ROUNDS` rounds, see :func:`_decided`).
    """
    return compare_all(fp32, {"quantized": quantized}, sample, level, budget_s, decide=WARNING_EDGES)["quantized"]


def compare_all(
    fp32: onnx.ModelProto,
    graphs: dict[str, onnx.ModelProto],
    sample: dict[str, np.ndarray],
    level: str,
    budget_s: float = BUDGET_S,
    decide: tuple[float, ...] = (),
) -> dict[str, SpeedCheck]:
    """Each of ``graphs`` against ``fp32``, all timed in the same interleaved rounds (the order rotates
    round by round), so every ratio comes from one measurement; see :func:`compare` (``decide``: the
    speed-ups whose side the caller needs, the timing stops once every graph's is certain)."""
    from deploykit.graph.run import session_from_onnx
    from deploykit.metrics.latency import aggregate_trials, now_s, time_iterations, warm_up

    models = [fp32, *graphs.values()]
    sessions = [session_from_onnx(m, "onnxruntime", level=level, spin=False) for m in models]
    runners = [s.timed_runner(sample) for s in sessions]
    for run in runners:
        warm_up(run, *WARMUP)  # allocations, kernel selection, caches
    single = [time_iterations(run, 1)[0] / 1e3 for run in runners]
    per_round = max(sum(single), 1e-9)
    iterations = max(1, int(budget_s / (MAX_ROUNDS * per_round)))
    trials: list[list[list[float]]] = [[] for _ in models]
    start, rounds = now_s(), 0
    while rounds < MAX_ROUNDS:
        order = list(range(len(models)))
        for i in order[rounds % len(order) :] + order[: rounds % len(order)]:
            trials[i].append(time_iterations(runners[i], iterations))
        rounds += 1
        if rounds >= ROUNDS and (now_s() - start >= budget_s or _settled(trials)):
            break
        if decide and rounds >= DECIDED_ROUNDS and _decided(trials, decide):
            break
    stats = [aggregate_trials(t) for t in trials]
    medians = [[t["p50_ms"] for t in s["trials"]] for s in stats]
    batch = int(next(iter(sample.values())).shape[0]) if sample else 1
    out = {}
    for k, (name, s) in enumerate(zip(graphs, stats[1:], strict=True), start=1):
        ratios = [a / b for a, b in zip(medians[0], medians[k], strict=True) if b > 0]
        out[name] = SpeedCheck(
            stats[0]["latency"]["p50_ms"],
            s["latency"]["p50_ms"],
            rounds,
            iterations,
            batch,
            sessions[k].evaluator,
            min(ratios, default=0.0),
            max(ratios, default=0.0),
            stats[0]["spread"]["p50_ms"]["rel"],
            s["spread"]["p50_ms"]["rel"],
        )
    return out


def _settled(trials: list[list[list[float]]]) -> bool:
    """Whether every graph's speed-up over the first (FP32) is known to :data:`PRECISION`: the standard
    error of the mean per-round log ratio of the rounds' medians."""
    found = _log_speedups(trials)
    return found is not None and bool((found[1] <= PRECISION).all())


def _decided(trials: list[list[list[float]]], edges: tuple[float, ...]) -> bool:
    """Whether every graph's mean per-round log speed-up lies :data:`DECIDED` standard errors from the log
    of each speed-up in ``edges``: which side of each it is on is then what more rounds would say."""
    import math

    found = _log_speedups(trials)
    if found is None:
        return False
    mean, error = found
    return all(bool((abs(mean - math.log(edge)) > DECIDED * error).all()) for edge in edges)  # on it: undecided


def _log_speedups(trials: list[list[list[float]]]) -> tuple[Any, Any] | None:
    """Per graph after the first: the mean per-round log ratio of the rounds' medians (FP32 over it) and
    its standard error; None while a median is not positive."""
    import numpy as np

    medians = np.array([[np.median(t) for t in graph] for graph in trials])
    if (medians <= 0).any():
        return None
    logs = np.log(medians[0]) - np.log(medians[1:])
    return logs.mean(axis=1), logs.std(axis=1, ddof=1) / np.sqrt(logs.shape[1])
