"""The screening graph: every FP32 patch of a quantized graph in one graph, opened once.

The first-order ranking (:func:`deploykit.quant.sensitivity.first_order`) measures dozens of
patches on one sample each; built and opened one by one, each cost about 0.55 s on a 549-group
transformer (the patch, its bytes, ONNX Runtime's session) where its inference cost 0.08 s.
:func:`deploykit.quant.patch.switchable` writes one graph whose groups each read through a switch,
so a patch is a set of boolean feeds. It computes Q/DQ as fake-quantized FP32 (the switches keep
ONNX Runtime from fusing integer kernels): ranking uses it; every state the search keeps or
confirms is judged exactly, on its own graph (:class:`deploykit.quant.sensitivity.Evaluations`).
It runs about 1.6x the FP32 model's time (each switch an If whose false branch holds the Q/DQ pair),
so it is used only where that is the cheaper way (:func:`pays`: weight-heavy graphs such as
transformers; not convolutional nets at high resolution).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.quant.groups import Group

if TYPE_CHECKING:
    import onnx

    from deploykit.graph.segments import Part
    from deploykit.quant.judge import Judge, Runner

SCREENED = "fp32"  # the one precision the screening graph raises a group to (the float rest's)
# The screening graph ran about 2x the FP32 model's time when every Q/DQ pair and switch was computed
# (1.6x on ViT-S since the If branches); a patch's own graph costs its build and session (which grow
# with the weights) plus one INT8 run. Measured per evaluation then: ViT-S (24M weights, 91M
# activation values a sample) 0.17 s screened against 0.6 s on its own graph; YOLOv8n at 1024^2
# (3M, 149M) 0.30 against 0.16 s; a text detector (0.4M, 95M) 0.08 against 0.09 s. So the screen
# runs where weights are at least this share of a sample's activation values (ViT-S 0.26, a text
# recognizer 0.10; YOLOv8n 0.02, the detector 0.005).
SCREEN_WEIGHT_SHARE = 0.05
# Parts the screening graph is opened in (Screen): more start a patch nearer its first change, each
# costs a run call (ViT-S in 16: the whole chain 0.21 s against one graph's 0.20 s)
PARTS = 16


@dataclass
class Screen:
    """The screening graph, built and opened on first use (:meth:`covers`) and kept open; :meth:`runner`
    runs a patch through it (judged by :meth:`deploykit.quant.judge.Judge.measure_side_by_side`).

    The graph is opened in up to ``parts`` consecutive parts (:func:`deploykit.graph.segments.split`,
    cut only before If switches, so the parts compute the whole graph's outputs bit for bit). A patch
    computes, up to the first part that reads one of its quantized groups' switches, what the run with
    every group raised computed: it starts there, on that run's values (kept per sample). The ranking
    quantizes runs of consecutive groups, so a run starts on average halfway: ViT-S's ranking took 8.1 s
    where the whole graph took 10.9 s, with the same damages bit for bit (its last part, the head, is
    the heaviest)."""

    judge: Judge
    base: onnx.ModelProto
    reference: onnx.ModelProto
    groups: Mapping[str, Group]
    unavailable: str = ""  # why the screening graph could not be opened (the patches then run on their own)
    parts: int = PARTS  # how many parts at most
    _parts: list[tuple[Part, Any]] = field(default_factory=list, repr=False)  # each part and its session
    _switches: dict[str, str] = field(default_factory=dict, repr=False)
    _first: dict[str, int] = field(default_factory=dict, repr=False)  # switch -> the first part reading it
    _outputs: list[str] = field(default_factory=list, repr=False)
    _raised: dict[int, _Raised] = field(default_factory=dict, repr=False)  # id(sample) -> that sample's run
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def covers(self, patch: Mapping[str, str]) -> bool:
        return all(p == SCREENED for p in patch.values()) and self._open()

    def runner(self, patch: Mapping[str, str]) -> Runner:
        """What runs ``patch`` on one sample: the open screening graph with the patch's switches set,
        from the first part that reads a switch the patch leaves quantized."""
        feeds = {s: np.array(patch.get(g) == SCREENED) for g, s in self._switches.items()}
        start = min((self._first[s] for s, on in feeds.items() if not on), default=len(self._parts))
        return lambda sample: self._run(sample, feeds, start)

    def _run(self, sample: dict[str, np.ndarray], feeds: dict[str, np.ndarray], start: int) -> dict[str, Any]:
        raised = self._raised_run(sample)
        if start == len(self._parts):  # every group raised: that run itself
            return dict(raised.outputs)
        values = {**sample, **feeds, **raised.before[start]}
        for part, session in self._parts[start:]:
            values.update(session.infer({t: values[t] for t in part.reads}))
        return {o: values[o] for o in self._outputs}

    def _raised_run(self, sample: dict[str, np.ndarray]) -> _Raised:
        """The run with every group raised on ``sample``: the values each part starts from, and the outputs."""
        with self._lock:  # runs side by side wait for the one that makes it
            found = self._raised.get(id(sample))
            if found is None or found.sample is not sample:
                values: dict[str, Any] = {**sample, **dict.fromkeys(self._switches.values(), np.array(True))}
                before, made = [], {}
                for k, (part, session) in enumerate(self._parts):
                    needed = {t for p, _ in self._parts[k:] for t in p.reads} | set(self._outputs)
                    before.append({t: v for t, v in made.items() if t in needed})
                    made.update(session.infer({t: values[t] for t in part.reads}))
                    values.update(made)
                found = self._raised[id(sample)] = _Raised(sample, before, {o: values[o] for o in self._outputs})
            return found

    def _open(self) -> bool:
        """Build and open the screening graph once; a graph ONNX Runtime refuses is no reason to fail
        the search (each patch's own graph still runs), so it is noted and the screen is not used."""
        from deploykit.errors import ModelError
        from deploykit.graph.parallel import threads_per_run
        from deploykit.graph.segments import split
        from deploykit.quant.patch import switchable

        if not self._parts and not self.unavailable:
            try:
                model, self._switches = switchable(self.base, self.reference, self.groups)
                self._outputs = [o.name for o in model.graph.output]
                # the ranking runs patches side by side, each on its share of the cores
                self._parts = [
                    (part, self.judge.opener(part.model, threads=threads_per_run()))
                    for part in split(model, self.parts, lambda node: node.op_type == "If")
                ]
            except ModelError as e:
                self.unavailable, self._parts = e.message, []
            switches = set(self._switches.values())
            for k, (part, _) in reversed(list(enumerate(self._parts))):
                self._first.update({t: k for t in part.reads if t in switches})
        return bool(self._parts)


@dataclass
class _Raised:
    sample: dict[str, np.ndarray]  # kept: its id names it
    before: list[dict[str, Any]]  # per part, what earlier parts made that it or a later part reads
    outputs: dict[str, Any]


def pays(model: onnx.ModelProto) -> bool:
    """Whether the screening graph is the cheaper way to rank ``model``'s groups (the FP32 graph, its
    shapes inferred; a deterministic rule, so two runs rank the same way): :data:`SCREEN_WEIGHT_SHARE`."""
    from deploykit.graph.proto import float_tensors, static_shapes

    shapes = static_shapes(model)
    weights = sum(math.prod(t.dims) for t in model.graph.initializer)
    activations = sum(math.prod(shapes[t]) for t in float_tensors(model) if t in shapes)
    return weights >= SCREEN_WEIGHT_SHARE * activations
