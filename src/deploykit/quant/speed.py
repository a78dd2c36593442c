"""Is the quantized model faster than FP32 on this CPU? A short, interleaved measurement.

INT8 in the onnxruntime flavour pays off on dense convolutions (1.5-2x measured here) and not on
depthwise-heavy networks, nor where many excluded nodes put Q/DQ boundaries between float islands.
The quantize stage measures both graphs the way the onnxruntime backend will run them and says
plainly when the "optimized" model is not faster; the gate then times the built engine properly.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnx

NOT_FASTER = 1.1  # below this, a 2-core VM's drift between rounds can account for the difference
ROUNDS = 5


@dataclass(frozen=True)
class SpeedCheck:
    """Median per-inference time of each graph over interleaved rounds, one sample at a time."""

    fp32_ms: float
    quantized_ms: float
    rounds: int
    iterations: int  # per round and graph
    batch: int
    evaluator: str

    @property
    def speedup(self) -> float:
        return self.fp32_ms / self.quantized_ms if self.quantized_ms > 0 else float("inf")

    def warning(self, precision: str) -> str | None:
        if self.speedup >= NOT_FASTER:
            return None
        how = "slower than" if self.speedup < 1 / NOT_FASTER else "not faster than"
        return (f"{precision.upper()} is {how} FP32 on this CPU: {self.quantized_ms:.3f} ms vs {self.fp32_ms:.3f} ms "
                f"per inference at batch {self.batch} ({self.speedup:.2f}x; {self.evaluator}). Depthwise-heavy "
                "networks gain nothing from INT8 on the CPU, and every excluded node adds Q/DQ work; "
                "keep FP32 (--precision fp32) unless the gate's numbers say otherwise")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "speedup": self.speedup}


def compare(fp32: onnx.ModelProto, quantized: onnx.ModelProto, sample: dict[str, np.ndarray], level: str,
            budget_s: float = 1.0) -> SpeedCheck:
    """Time ``fp32`` and ``quantized`` on ``sample`` with ONNX Runtime's CPU kernels at ``level``.

    Rounds alternate between the graphs so drift hits both alike; the iteration count is sized from
    one timed run so the whole check takes about ``budget_s`` (at least one iteration per round).
    """
    from deploykit.graph.run import session_from_onnx

    sessions = [session_from_onnx(m, "onnxruntime", level=level) for m in (fp32, quantized)]
    runners = [s.timed_runner(sample) for s in sessions]
    single = []
    for run in runners:
        run()  # first run: allocations and kernel selection
        start = time.perf_counter()
        run()
        single.append(time.perf_counter() - start)
    iterations = max(1, min(200, int(budget_s / (ROUNDS * sum(single) or 1e-9))))
    times: list[list[float]] = [[], []]
    for _ in range(ROUNDS):
        for i, run in enumerate(runners):
            start = time.perf_counter()
            for _ in range(iterations):
                run()
            times[i].append((time.perf_counter() - start) / iterations * 1e3)
    batch = next(iter(sample.values())).shape[0] if sample else 1
    return SpeedCheck(statistics.median(times[0]), statistics.median(times[1]), ROUNDS, iterations, int(batch),
                      sessions[1].evaluator)
