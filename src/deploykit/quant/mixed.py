"""Mixed precision for one quantize job: the configured patch, or the search, on the base graph.

:func:`plan` finds the base graph's layer groups and the precisions its flavour offers and checks
``quantize.layer_precisions`` against them; :func:`builder` turns a patch into a graph
(:func:`deploykit.quant.patch.apply_patch`); :func:`search` runs the sensitivity-driven search
(:mod:`deploykit.quant.sensitivity`) with the flavour's latency costs and the artifact cache.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from deploykit.quant.groups import Group, find_groups
from deploykit.quant.patch import apply_patch, check_patch, ladder

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from deploykit.config import QuantizeConfig
    from deploykit.quant.judge import Judge
    from deploykit.quant.latency_cost import Costs
    from deploykit.quant.search import Patch
    from deploykit.quant.sensitivity import SearchResult

CacheLookup = Callable[[str], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Plan:
    groups: dict[str, Group]
    ladder: tuple[str, ...]
    start: dict[str, str]  # the configured patch, base-precision entries dropped
    high_precision: str  # what the float rest runs in


def plan(base: onnx.ModelProto, cfg: QuantizeConfig, flavour: str, where: str) -> Plan:
    from deploykit.graph.proto import opset_version

    high = "fp32" if flavour == "onnxruntime" else cfg.high_precision
    steps = ladder(flavour, cfg.precision, high, opset_version(base))
    groups = {g.name: g for g in find_groups(base)}
    check_patch(cfg.layer_precisions, groups, steps, where)
    return Plan(groups, steps, {g: p for g, p in cfg.layer_precisions.items() if p != steps[0]}, high)


def builder(p: Plan, base: onnx.ModelProto, reference: onnx.ModelProto, precision: str
            ) -> Callable[[Patch], onnx.ModelProto]:
    return partial(apply_patch, base, reference, p.groups, base_precision=precision, high_precision=p.high_precision)


def search(p: Plan, base: onnx.ModelProto, reference: onnx.ModelProto, judge: Judge, cfg: QuantizeConfig,
           flavour: str, ort_level: str, sample: dict[str, np.ndarray], lookup: CacheLookup | None,
           progress: Callable[[], Any] | None = None) -> tuple[SearchResult, dict[str, Any]]:
    """The search's result and the cache payload to store in the artifact (``sensitivity.json``);
    ``progress`` is called after each candidate the search runs."""
    from deploykit.quant.latency_cost import Costs
    from deploykit.quant.sensitivity import CACHE_SCHEMA, Evaluations, cache_facts, cache_key, run_search

    build = builder(p, base, reference, cfg.precision)
    facts = {**cache_facts(judge, cfg.repair, base), "flavour": flavour,
             "ort_level": ort_level if flavour == "onnxruntime" else None, "ladder": list(p.ladder)}
    key = cache_key(facts)
    start, cpu = time.perf_counter(), time.process_time()
    previous = lookup(key) if lookup is not None else None
    if previous is not None and previous.get("schema") == CACHE_SCHEMA and previous.get("key") == key:
        ev = Evaluations(judge, build, dict(previous["measurements"]), progress=progress)
        costs = Costs.from_dict(previous["costs"])
    else:
        ev, costs = Evaluations(judge, build, progress=progress), _costs(p, base, reference, build, flavour, cfg, ort_level, sample)
    timer = _timer(build, base, reference, sample, ort_level) if flavour == "onnxruntime" else None
    result = run_search(ev, list(p.groups.values()), p.ladder, costs, cfg.repair, p.start, timer)
    result.wall_s, result.cpu_s = time.perf_counter() - start, time.process_time() - cpu
    payload = {"schema": CACHE_SCHEMA, "key": key, "facts": facts, "measurements": ev.cache, "costs": costs.to_dict(),
               "reused": previous is not None}
    return result, payload


def _costs(p: Plan, base: onnx.ModelProto, reference: onnx.ModelProto, build: Callable[[Patch], onnx.ModelProto],
           flavour: str, cfg: QuantizeConfig, ort_level: str, sample: dict[str, np.ndarray]) -> Costs:
    from deploykit.quant import latency_cost

    if flavour == "onnxruntime":
        return latency_cost.cpu_estimate(reference, base, p.groups, p.ladder)
    return latency_cost.roofline(reference, p.groups, p.ladder, cfg.precision, p.high_precision, base)


def _timer(build: Callable[[Patch], onnx.ModelProto], base: onnx.ModelProto, reference: onnx.ModelProto,
           sample: dict[str, np.ndarray], level: str) -> Callable[[dict[str, Patch]], dict[str, Any]]:
    """label -> patch to each state's speed against FP32 (and the base's), from one interleaved timing."""
    from deploykit.quant.speed import compare_all

    def timer(states: dict[str, Patch]) -> dict[str, Any]:
        return compare_all(reference, {"base": base, **{k: build(v) for k, v in states.items()}}, sample, level)

    return timer
