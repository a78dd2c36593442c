"""Numbers that judge a build: elementwise and task-aware parity metrics, latency statistics.

``elementwise`` compares one output tensor with its reference; ``detection`` and ``dense`` hold the
task metrics (boxes; segmentation, depth, trajectories, probability maps, top-k); ``tasks`` wires
the configured checks to them; ``latency`` summarises timings and compares against a baseline.
"""

from deploykit.metrics.elementwise import ErrorAccumulator, compare, vacuity, violations
from deploykit.metrics.latency import summarize

__all__ = ["ErrorAccumulator", "compare", "summarize", "vacuity", "violations"]
