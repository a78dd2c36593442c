"""The screening graph: every FP32 patch of a quantized graph in one open session.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.quant.groups import Group

if TYPE_CHECKING:
    import onnx

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


@dataclass
class Screen:
    """The screening graph, built and opened on first use (:meth:`covers`) and kept open; :meth:`runner`
    runs a patch through it (judged by :meth:`deploykit.quant.judge.Judge.measure_side_by_side`)."""

    judge: Judge
    base: onnx.ModelProto
    reference: onnx.ModelProto
    groups: Mapping[str, Group]
    unavailable: str = ""  # why the screening graph could not be opened (the patches then run on their own)
    _session: Any = field(default=None, repr=False)
    _switches: dict[str, str] = field(default_factory=dict, repr=False)

    def covers(self, patch: Mapping[str, str]) -> bool:
        return all(p == SCREENED for p in patch.values()) and self._open()

    def runner(self, patch: Mapping[str, str]) -> Runner:
        """What runs ``patch`` on one sample: the open screening graph with the patch's switches set."""
        feeds = {s: np.array(patch.get(g) == SCREENED) for g, s in self._switches.items()}
        session = self._session
        return lambda sample: session.infer({**sample, **feeds})

    def _open(self) -> bool:
        """Build and open the screening graph once; a graph ONNX Runtime refuses is no reason to fail
        the search (each patch's own graph still runs), so it is noted and the screen is not used."""
        from deploykit.errors import ModelError
        from deploykit.graph.parallel import threads_per_run
        from deploykit.quant.patch import switchable

        if self._session is None and not self.unavailable:
            try:
                model, self._switches = switchable(self.base, self.reference, self.groups)
                # the ranking runs patches side by side, each on its share of the cores
                self._session = self.judge.opener(model, threads=threads_per_run())
            except ModelError as e:
                self.unavailable = e.message
        return self._session is not None


def pays(model: onnx.ModelProto) -> bool:
    """Whether the screening graph is the cheaper way to rank ``model``'s groups (the FP32 graph, its
    shapes inferred; a deterministic rule, so two runs rank the same way): :data:`SCREEN_WEIGHT_SHARE`."""
    from deploykit.graph.proto import float_tensors, static_shapes

    shapes = static_shapes(model)
    weights = sum(math.prod(t.dims) for t in model.graph.initializer)
    activations = sum(math.prod(shapes[t]) for t in float_tensors(model) if t in shapes)
    return weights >= SCREEN_WEIGHT_SHARE * activations
