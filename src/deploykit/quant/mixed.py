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
from deploykit.quant.patch import apply_patch, check_patch

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from deploykit.config import QuantizeConfig
    from deploykit.graph.files import Held
    from deploykit.quant.flavours import QuantFlavour
    from deploykit.quant.judge import Judge
    from deploykit.quant.search import Patch
    from deploykit.quant.sensitivity import SearchResult

CacheLookup = Callable[[str], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Plan:
    groups: dict[str, Group]
    ladder: tuple[str, ...]
    start: dict[str, str]  # the configured patch, base-precision entries dropped
    high_precision: str  # what the float rest runs in


def plan(base: onnx.ModelProto, cfg: QuantizeConfig, flavour: QuantFlavour, where: str) -> Plan:
    from deploykit.graph.proto import opset_version

    high = flavour.high_precision(cfg)
    steps = flavour.ladder(cfg.precision, high, opset_version(base))
    groups = {g.name: g for g in find_groups(base)}
    check_patch(cfg.layer_precisions, groups, steps, where)
    return Plan(groups, steps, {g: p for g, p in cfg.layer_precisions.items() if p != steps[0]}, high)


def builder(
    p: Plan, base: onnx.ModelProto, reference: onnx.ModelProto, precision: str, held: Held | None = None
) -> Callable[[Patch], onnx.ModelProto]:
    """Patch -> its graph; with ``held`` (sessions only) the restored weights refer to ``reference``'s."""
    return partial(
        apply_patch, base, reference, p.groups, base_precision=precision, high_precision=p.high_precision, held=held
    )


def search(
    p: Plan,
    base: onnx.ModelProto,
    reference: onnx.ModelProto,
    judge: Judge,
    cfg: QuantizeConfig,
    flavour: QuantFlavour,
    ort_level: str,
    sample: dict[str, np.ndarray],
    lookup: CacheLookup | None,
    progress: Callable[[], Any] | None = None,
    task: Callable[[str, int], Any] | None = None,
    start_key: str | None = None,
) -> tuple[SearchResult, dict[str, Any]]:
    """The search's result and the cache payload to store in the artifact (``sensitivity.json``);
    ``progress`` is called after each candidate the search runs; ``task`` (a Reporter's) names the
    timing of its answer on this CPU; ``start_key``: the judge's key of the start graph judged in full,
    whose misses order the samples confirmations run (:meth:`Judge.hardest_first`)."""
    from deploykit.graph.files import Held
    from deploykit.quant.latency_cost import Costs
    from deploykit.quant.screen import SCREENED, Screen, pays
    from deploykit.quant.sensitivity import CACHE_SCHEMA, Evaluations, cache_facts, cache_key, run_search, state_of

    # the states are built for sessions, the answer made self-contained (run_search)
    held = Held(reference) if flavour.holds_weights else None
    build = builder(p, base, reference, cfg.precision, held)
    facts = {
        **cache_facts(judge, cfg.repair, base),
        "flavour": flavour.name,
        "ort_level": flavour.level(ort_level),
        "ladder": list(p.ladder),
    }
    key = cache_key(facts)
    if start_key is not None:  # after the key: it names the samples in their given order, whatever the limits
        # (which the order depends on); every count below all of them keeps its samples, so a cached
        # measurement on them is on the same samples in a rerun
        judge.hardest_first(start_key, max(cfg.repair.samples, cfg.repair.screen_samples))
    start, cpu = time.perf_counter(), time.process_time()
    previous = lookup(key) if lookup is not None else None
    screen = Screen(judge, base, reference, p.groups) if p.high_precision == SCREENED and pays(reference) else None
    keys = {state_of(p.start): start_key} if start_key is not None else {}  # the start: judged in full already
    if previous is not None and previous.get("schema") == CACHE_SCHEMA and previous.get("key") == key:
        ev = Evaluations(judge, build, dict(previous["measurements"]), progress=progress, screen=screen, keys=keys)
        costs = Costs.from_dict(previous["costs"])
    else:
        ev = Evaluations(judge, build, progress=progress, screen=screen, keys=keys)
        costs = flavour.latency_costs(reference, base, p.groups, p.ladder, cfg.precision, p.high_precision)
    timer = _timer(build, base, reference, sample, ort_level, task) if flavour.measures_latency else None
    result = run_search(ev, list(p.groups.values()), p.ladder, costs, cfg.repair, p.start, timer)
    result.wall_s, result.cpu_s = time.perf_counter() - start, time.process_time() - cpu
    payload = {
        "schema": CACHE_SCHEMA,
        "key": key,
        "facts": facts,
        "measurements": ev.cache,
        "costs": costs.to_dict(),
        "reused": previous is not None,
    }
    return result, payload


def _timer(
    build: Callable[[Patch], onnx.ModelProto],
    base: onnx.ModelProto,
    reference: onnx.ModelProto,
    sample: dict[str, np.ndarray],
    level: str,
    task: Callable[[str, int], Any] | None,
) -> Callable[[dict[str, Patch]], dict[str, Any]]:
    """label -> patch (empty: the base graph) to each state's speed against FP32, from one interleaved timing."""
    import contextlib

    from deploykit.quant.sensitivity import TIMED_EDGES
    from deploykit.quant.speed import TIMING_TASK, compare_all

    def timer(states: dict[str, Patch]) -> dict[str, Any]:
        graphs = {k: base if not v else build(v) for k, v in states.items()}
        with task(TIMING_TASK, 1) if task else contextlib.nullcontext(lambda: None) as advance:
            found = compare_all(reference, graphs, sample, level, decide=TIMED_EDGES)
            advance()
        return found

    return timer
