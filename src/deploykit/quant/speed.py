"""Is the quantized model faster than FP32 on this CPU? Interleaved rounds, with their spread.

INT8 in the onnxruntime flavour pays off on dense convolutions (1.5-2x measured here) and not on
depthwise-heavy networks, nor where many excluded nodes put Q/DQ boundaries between float islands.
The quantize stage measures both graphs the way the onnxruntime backend will run them and says
plainly when the "optimized" model is not faster; the gate then times the built engine properly.

The loop is the gate's (:func:`deploykit.metrics.latency.time_iterations` after
:func:`~deploykit.metrics.latency.warm_up`): at least :data:`ROUNDS` rounds, each timing FP32 and
the quantized graph back to back (in alternating order, so drift within a round hits both alike),
iterations per round sized to the time budget. 5 rounds of 1 iteration said 2.00x where 40
interleaved rounds said 1.17x on a real text detector; the figure is the ratio of the medians, and
the per-round ratios give its spread.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnx

NOT_FASTER = 1.1  # below this, a 2-core VM's drift between rounds can account for the difference
ROUNDS = 10  # at least; more when the budget allows a round of one iteration more often
MAX_ROUNDS = 40
WARMUP = (3, 0.05)  # runs and seconds, per graph


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

    def warning(self, precision: str, mix: tuple[int, int] | None = None) -> str | None:
        """The plain statement when the quantized graph is not faster; ``mix``: (groups the search kept
        in FP32, groups in all) when the graph is the search's mixed-precision answer."""
        if self.speedup >= NOT_FASTER:
            return None
        how = "slower than" if self.speedup < 1 / NOT_FASTER else "not faster than"
        what = (f"the mix the search chose ({mix[0]} of {mix[1]} layer groups in FP32, the rest {precision.upper()})"
                if mix else precision.upper())
        measured = (f"{self.quantized_ms:.3f} ms vs {self.fp32_ms:.3f} ms per inference at batch {self.batch} "
                    f"({self.speedup:.2f}x, {self.speedup_low:.2f}-{self.speedup_high:.2f}x over {self.rounds} "
                    f"interleaved rounds; {self.evaluator})")
        if mix:
            return (f"{what} passes parity but is {how} FP32 on this CPU: {measured}. No mix the search tried both "
                    "passes and beats FP32 here; keep FP32 (--precision fp32), or loosen the tolerance")
        return (f"{what} is {how} FP32 on this CPU: {measured}. Depthwise-heavy "
                "networks gain nothing from INT8 on the CPU, and every excluded node adds Q/DQ work; "
                "keep FP32 (--precision fp32) unless the gate's numbers say otherwise")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup}


def compare(fp32: onnx.ModelProto, quantized: onnx.ModelProto, sample: dict[str, np.ndarray], level: str,
            budget_s: float = 3.0) -> SpeedCheck:
    """Time ``fp32`` and ``quantized`` on ``sample`` with ONNX Runtime's CPU kernels at ``level``.

    The rounds and iterations are sized from one timed run of each so the check takes about
    ``budget_s``: at least :data:`ROUNDS` rounds of at least one iteration.
    """
    from deploykit.graph.run import session_from_onnx
    from deploykit.metrics.latency import aggregate_trials, time_iterations, warm_up

    sessions = [session_from_onnx(m, "onnxruntime", level=level) for m in (fp32, quantized)]
    runners = [s.timed_runner(sample) for s in sessions]
    for run in runners:
        warm_up(run, *WARMUP)  # allocations, kernel selection, caches
    single = [time_iterations(run, 1)[0] / 1e3 for run in runners]
    per_round = max(sum(single), 1e-9)
    rounds = max(ROUNDS, min(MAX_ROUNDS, int(budget_s / per_round)))
    iterations = max(1, int(budget_s / (rounds * per_round)))
    trials: list[list[list[float]]] = [[], []]
    for r in range(rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            trials[i].append(time_iterations(runners[i], iterations))
    stats = [aggregate_trials(t) for t in trials]
    medians = [[t["p50_ms"] for t in s["trials"]] for s in stats]
    ratios = [a / b for a, b in zip(*medians, strict=True) if b > 0]
    batch = next(iter(sample.values())).shape[0] if sample else 1
    return SpeedCheck(stats[0]["latency"]["p50_ms"], stats[1]["latency"]["p50_ms"], rounds, iterations, int(batch),
                      sessions[1].evaluator, min(ratios, default=0.0), max(ratios, default=0.0),
                      stats[0]["spread"]["p50_ms"]["rel"], stats[1]["spread"]["p50_ms"]["rel"])
