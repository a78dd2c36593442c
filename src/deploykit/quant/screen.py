"""The screening graph: every FP32 patch of a quantized graph in one open session.

The first-order ranking (:func:`deploykit.quant.sensitivity.first_order`) measures dozens of
patches on one sample each; built and opened one by one, each cost about 0.55 s on a 549-group
transformer (the patch, its bytes, ONNX Runtime's session) where its inference cost 0.08 s.
:func:`deploykit.quant.patch.switchable` writes one graph whose groups each read through a switch,
so a patch is a set of boolean feeds. It computes Q/DQ as fake-quantized FP32 (the switches keep
ONNX Runtime from fusing integer kernels): ranking uses it; every state the search keeps or
confirms is judged exactly, on its own graph (:class:`deploykit.quant.sensitivity.Evaluations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.quant.groups import Group

if TYPE_CHECKING:
    import onnx

    from deploykit.quant.judge import Judge, Measurement

SCREENED = "fp32"  # the one precision the screening graph raises a group to (the float rest's)


@dataclass
class Screen:
    """``screen(patch, n, key)``: the patch's measurement on the first ``n`` judging samples, from the
    screening graph (built and opened on first use, kept open)."""

    judge: Judge
    base: onnx.ModelProto
    reference: onnx.ModelProto
    groups: Mapping[str, Group]
    _session: Any = field(default=None, repr=False)
    _switches: dict[str, str] = field(default_factory=dict, repr=False)

    def covers(self, patch: Mapping[str, str]) -> bool:
        return all(p == SCREENED for p in patch.values())

    def __call__(self, patch: Mapping[str, str], n: int, key: str) -> Measurement:
        from deploykit.quant.patch import switchable

        if self._session is None:
            model, self._switches = switchable(self.base, self.reference, self.groups)
            self._session = self.judge.opener(model)
        feeds = {s: np.array(patch.get(g) == SCREENED) for g, s in self._switches.items()}
        session = self._session
        return self.judge.measure_run(lambda sample: session.infer({**sample, **feeds}), n, key)
