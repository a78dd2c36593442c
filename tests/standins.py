"""Test doubles for timing logic, so no test depends on how fast (or how busy) the machine is.

* :class:`StandInClock` replaces :data:`deploykit.metrics.latency.CLOCK_NS`, the one clock the gate,
  the soak and the stack read; it moves only when a stand-in run says so.
* :class:`StandInSession` is a session whose every timed run "takes" the next latency of a script
  on that clock (and whose outputs are zeros, or NaN where the script says so).

Use the ``standin_clock`` fixture (tests/conftest.py) and :func:`standin_engine`: the gate then
measures exactly the scripted numbers. :func:`gate_model` writes the gate tests' one-MatMul model.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pytest

from deploykit.graph.run import TensorSpec
from deploykit.metrics import latency


class StandInClock:
    """A monotonic nanosecond clock that moves only when told (a test double of the machine's clock)."""

    def __init__(self) -> None:
        self.ns = 1_000_000_000

    def __call__(self) -> int:
        return self.ns

    def advance_ms(self, ms: float) -> None:
        self.ns += int(round(ms * 1e6))


class StandInSession:
    """A test double of a backend session: each timed run advances ``clock`` by the next scripted latency.

    Args:
        clock: the stand-in clock.
        latencies_ms: per-run latencies, cycled (each > 0, or a warm-up for a time would never end).
        outputs: what ``infer`` returns; a callable gets the run count (to turn NaN on later).
    """

    evaluator = "stand-in session (test double)"

    def __init__(
        self,
        clock: StandInClock,
        latencies_ms: Iterable[float],
        outputs: Callable[[int], dict[str, np.ndarray]] | None = None,
    ) -> None:
        self.clock, self._script = clock, itertools.cycle(list(latencies_ms))
        self._outputs = outputs or (lambda n: {"y": np.zeros((1, 8), np.float32)})
        self.runs = 0
        self.runner_info: dict[str, str] = {}
        self.options: list[dict[str, str]] = []

    @property
    def inputs(self) -> list[TensorSpec]:
        return [TensorSpec("x", "float32", ("batch", 8))]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [TensorSpec("y", "float32", ("batch", 8))]

    def run_once(self) -> None:
        self.runs += 1
        self.clock.advance_ms(next(self._script))

    def timed_runner(self, feeds: dict[str, np.ndarray], **options: str) -> Callable[[], None]:
        self.options.append(options)
        return self.run_once

    def infer(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.run_once()
        return self._outputs(self.runs)


def install_clock(monkeypatch: pytest.MonkeyPatch) -> StandInClock:
    """A stand-in clock installed as the one clock deploykit's timings read (the ``standin_clock`` fixture)."""
    clock = StandInClock()
    monkeypatch.setattr(latency, "CLOCK_NS", clock)
    return clock


def standin_engine(monkeypatch: pytest.MonkeyPatch, session: StandInSession) -> None:
    """The gate times ``session`` instead of the built engine (the build itself still runs)."""
    from deploykit.stages import gate

    monkeypatch.setattr(gate, "load_engine", lambda artifact: session)


GATE_CONFIG = """
name: m
source: {onnx: model.onnx}
inputs: [{name: x, shape: [batch, 8]}]
dims: {batch: {min: 1, opt: 1, max: 4}}
parity: {samples: 1}
gate: {warmup: 3, warmup_s: 0.01, iterations: 20, trials: 3, targets: {default: {fps: 1}}}
"""


def gate_model(folder: Path) -> Path:
    """A one-MatMul ONNX model (input x [batch, 8]) and its deploykit.yaml in ``folder``; the config's path."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), folder / "model.onnx")
    (folder / "deploykit.yaml").write_text(GATE_CONFIG)
    return folder / "deploykit.yaml"


def gate(cfg: Path, **kw: object) -> object:
    """``deploykit.convert`` of ``cfg`` into the store beside it."""
    import deploykit

    return deploykit.convert(cfg, workdir=cfg.parent / "store", **kw)
