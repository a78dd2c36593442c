"""The quantize flavour protocol: what a quantized graph is written for, asked rather than compared.

A flavour (:data:`deploykit.choices.Flavour`) is the runtime a quantized graph is written for, and
it decides the graph: who places the Q/DQ nodes and in which form, what the float rest runs in,
which precisions exist, how the check (and parity) compute the graph, what enters the recipe key,
how the search estimates latency and whether it times its answer on this CPU. Each flavour module
implements :class:`QuantFlavour`:

* ``tensorrt`` (:mod:`deploykit.quant.modelopt_flavour`): NVIDIA ModelOpt's symmetric Q/DQ, which
  TensorRT fuses; the rest in FP16 (``quantize.high_precision``); checked as written;
* ``onnxruntime`` (:mod:`deploykit.quant.ort_flavour`): ONNX Runtime's QDQ (asymmetric uint8
  activations) for its CPU kernels; the rest in FP32; checked as those kernels compute it.

Everything else asks :func:`flavour_for` (a registry keyed by ``Flavour``) and never compares a
flavour's name (``tests/tools/test_flavour_names.py`` checks it). To add a flavour: a module with
a class implementing this protocol, its instance as ``FLAVOUR``, and its name in ``choices.Flavour``
and :data:`REGISTRY`.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from deploykit.choices import Evaluator, Flavour, values

if TYPE_CHECKING:
    from collections.abc import Mapping

    import numpy as np
    import onnx

    from deploykit.config import QuantizeConfig
    from deploykit.quant.groups import Group
    from deploykit.quant.latency_cost import Costs
    from deploykit.quant.prepare import Preparation
    from deploykit.quant.ranges import TensorRange
    from deploykit.quant.reasons import Reason

REGISTRY: dict[str, str] = {
    "tensorrt": "deploykit.quant.modelopt_flavour:FLAVOUR",
    "onnxruntime": "deploykit.quant.ort_flavour:FLAVOUR",
}


class Placed(NamedTuple):
    """One Q/DQ graph a quantizer placed: the graph it was placed on, the result, the ranges used."""

    model: onnx.ModelProto
    qdq: onnx.ModelProto
    ranges: dict[str, TensorRange]


class QuantFlavour(Protocol):
    name: Flavour
    tool: str  # who places the Q/DQ nodes, as the reasons name it ("ModelOpt")
    evaluator: Evaluator  # how the check and parity compute its graphs on the CPU
    precisions: tuple[str, ...]  # the quantize precisions it writes
    measures_latency: bool  # the search's answer is timed on this CPU against FP32 (True), else only estimated
    calibration_cache: bool  # it writes TensorRT's legacy INT8 calibration cache beside an INT8 graph
    configurable_rest: bool  # quantize.high_precision sets its float rest (False: FP32 whatever it says)
    # the search's states refer to the FP32 weights they restore (graph.files.Held) rather than copy them: its
    # evaluator takes the arrays in place (the as-written one rewrites a graph's weights before its session)
    holds_weights: bool

    def check(self, precision: str) -> None:
        """Refuse (ConfigError) a precision this flavour does not write, saying what to use."""
        ...

    def needs_modelopt(self, precision: str) -> bool:
        """Whether quantizing to ``precision`` needs NVIDIA ModelOpt (the ``quant`` extra)."""
        ...

    def key(self, cfg: QuantizeConfig, level: str) -> dict[str, Any]:
        """What the quantized graph depends on beyond the config (this CPU's features, the ONNX Runtime
        level the check evaluates at): it enters the quantize stage's recipe key."""
        ...

    def level(self, level: str) -> str | None:
        """The ONNX Runtime optimization level its graphs are evaluated at (None: as written)."""
        ...

    def reduce_range(self, setting: str) -> bool:
        """``quantize.reduce_range`` resolved for this flavour (7-bit weights)."""
        ...

    def prepare(self, model: onnx.ModelProto, cfg: QuantizeConfig, where: str) -> tuple[onnx.ModelProto, Preparation]:
        """The graph prepared for the quantizer (:func:`deploykit.quant.prepare.prepare`) at its opset."""
        ...

    def preprocess(self, model: onnx.ModelProto, precision: str, notes: list[str]) -> onnx.ModelProto:
        """The quantizer's own pre-processing after the exclusions are resolved (may fuse nodes away)."""
        ...

    def exclusions(self, model: onnx.ModelProto, precision: str) -> dict[str, Reason]:
        """Nodes this flavour keeps in float before placing (node name -> why)."""
        ...

    def checks_kernels(self, precision: str) -> bool:
        """Whether the runtime's fused integer kernels are checked on this CPU (:mod:`~.kernel_check`)."""
        ...

    def place(
        self,
        model: onnx.ModelProto,
        ranges: dict[str, TensorRange],
        exclude: list[str],
        sample: dict[str, np.ndarray],
        cfg: QuantizeConfig,
        reduce_range: bool,
        placed: Placed | None,
    ) -> tuple[onnx.ModelProto, Placed | None]:
        """The Q/DQ graph (FP32 float rest) with ``ranges`` in its activation scales, ``exclude`` left out.

        ``placed`` is what an earlier call placed for the same graph and exclusions: the quantizer runs
        once, later range sets only rewrite its scales. Returns the graph and, when the quantizer ran,
        what to remember for the next call.
        """
        ...

    def high_precision(self, cfg: QuantizeConfig) -> str:
        """What the float rest runs in (and the precision a layer raised from the base takes first)."""
        ...

    def fp16_rest(self, cfg: QuantizeConfig) -> bool:
        """Whether its graph computes the unquantized nodes in FP16 (then they are checked for overflow)."""
        ...

    def finish(self, qdq: onnx.ModelProto, keep_fp32: list[str], cfg: QuantizeConfig) -> onnx.ModelProto:
        """The Q/DQ graph with its float rest in :meth:`high_precision` (``keep_fp32`` nodes in FP32)."""
        ...

    def ladder(self, precision: str, high_precision: str, opset: int) -> tuple[str, ...]:
        """The precisions a layer group may take in a precision patch, the base precision first."""
        ...

    def latency_costs(
        self,
        reference: onnx.ModelProto,
        base: onnx.ModelProto,
        groups: Mapping[str, Group],
        ladder: tuple[str, ...],
        precision: str,
        high_precision: str,
    ) -> Costs:
        """The search's latency cost per layer group and precision, with the precision boundaries a
        patch adds or removes: estimated from FLOPs and bytes for its runtime (load-independent, so
        two runs choose the same mix; :mod:`deploykit.quant.latency_cost`)."""
        ...

    def foreign(self, backend: str) -> bool:
        """Whether an engine that ``backend`` built computes (and times) this flavour's graph otherwise
        than its runtime will; then parity checks the graph with :attr:`evaluator` instead."""
        ...


@functools.cache
def flavour_for(name: Flavour | str) -> QuantFlavour:
    """The flavour called ``name`` (one of ``choices.Flavour``)."""
    from deploykit.errors import ConfigError

    if name not in REGISTRY:
        raise ConfigError(f"unknown quantize flavour {name!r}", hint=f"use one of {', '.join(values(Flavour))}")
    module, _, attribute = REGISTRY[name].partition(":")
    found: QuantFlavour = getattr(importlib.import_module(module), attribute)
    return found


__all__ = ["REGISTRY", "Placed", "QuantFlavour", "flavour_for"]
