"""ONNX Runtime's own profiler -> layers: one per node of the engine's (already optimized) graph.

ONNX Runtime writes a Chrome-trace JSON: a ``Session``/``model_run`` event per run and a
``Node``/``<name>_kernel_time`` event per node execution with ``args.op_name``, ``args.provider`` and
the input/output types and shapes it ran on. Node events are assigned to the run whose interval holds
them, so warm-up runs are dropped by count; a node executed more than once in a run (inside a loop)
is summed per run. On the CUDA execution provider a node's time is its host-side time (kernels run
asynchronously) unless ONNX Runtime was built with CUDA profiling, whose ``Kernel`` events are then
used instead, summed per parent node.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import ArtifactCorrupt
from deploykit.profiling.layers import Layer, Tensor, compute_precision, dtype_name

_SUFFIX = "_kernel_time"


def profile(
    engine_dir: Path, feeds: dict[str, np.ndarray], iterations: int, warmup: int
) -> tuple[list[Layer], dict[str, Any]]:
    """Run the engine ``warmup + iterations`` times under ONNX Runtime's profiler; return its layers.

    Returns:
        (layers in graph order, facts for the report: evaluator, provider, run_ms, timing).
    """
    from deploykit.backends.onnxruntime import ENGINE_MODEL, OnnxRuntimeBackend

    with tempfile.TemporaryDirectory(prefix="deploykit-ort-profile-") as tmp:
        session = OnnxRuntimeBackend().load(Path(engine_dir), profile_prefix=str(Path(tmp) / "ort"))
        run = session.timed_runner(feeds)
        for _ in range(warmup + iterations):
            run()
        events = read_events(Path(session.end_profiling()))
    # timed_runner runs once itself (a failing feed is a clean error there): one more run to drop
    layers, runs = layers_from_events(events, warmup + 1, node_attributes(Path(engine_dir) / ENGINE_MODEL))
    providers = sorted({layer.extra.get("provider", "") for layer in layers} - {""})
    gpu = [p for p in providers if p != "CPUExecutionProvider"]
    kernels = any(e.get("cat") == "Kernel" for e in events)
    timing = (
        "per-node kernel time from ONNX Runtime's profiler"
        if not gpu
        else "GPU kernel time per node from ONNX Runtime's CUDA profiling"
        if kernels
        else "host-side time per node from ONNX Runtime's profiler (the CUDA provider launches asynchronously; "
        "GPU kernel times need an ONNX Runtime built with CUDA profiling)"
    )
    return layers, {"evaluator": session.evaluator, "providers": providers, "run_ms": runs, "timing": timing}


def read_events(path: Path) -> list[dict[str, Any]]:
    try:
        events = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ArtifactCorrupt(f"{path}: ONNX Runtime's profile is not readable JSON ({e})") from e
    if not isinstance(events, list):
        raise ArtifactCorrupt(f"{path}: ONNX Runtime's profile is not a list of trace events")
    return events


def node_attributes(model_path: Path) -> dict[str, dict[str, Any]]:
    """What the cost model needs from the graph, by node name (kernel_shape of pools, transA of Gemm)."""
    import onnx
    from onnx import helper

    if not model_path.is_file():
        return {}
    model = onnx.load(str(model_path), load_external_data=False)
    out = {}
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name in ("kernel_shape", "transA")}
        if attrs:
            out[node.name] = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in attrs.items()}
    return out


def _tensors(entries: list[Any]) -> list[Tensor]:
    out = []
    for entry in entries or []:
        if isinstance(entry, dict) and entry:
            dtype, shape = next(iter(entry.items()))
            out.append(Tensor(dtype_name(dtype), tuple(int(d) for d in shape)))
    return out


def layers_from_events(
    events: list[dict[str, Any]], warmup: int, attributes: dict[str, dict[str, Any]] | None = None
) -> tuple[list[Layer], float]:
    """Layers (graph order) with one time per kept run, and the median run time in ms.

    Args:
        events: ONNX Runtime's profile.
        warmup: how many of the first runs to drop.
        attributes: :func:`node_attributes` of the engine's graph.
    """
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"), key=lambda e: e["ts"]
    )[warmup:]
    if not runs:
        raise ArtifactCorrupt("ONNX Runtime's profile holds no model_run after the warm-up runs")
    kernels = [e for e in events if e.get("cat") == "Kernel"]
    per_run: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    layers: dict[str, Layer] = {}
    for event in sorted(
        (e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith(_SUFFIX)),
        key=lambda e: e["ts"],
    ):
        index = _run_of(event, runs)
        if index is None:
            continue
        name, args = event["name"][: -len(_SUFFIX)], event.get("args", {})
        if name not in layers:
            inputs = _tensors(args.get("input_type_shape"))
            op = str(args.get("op_name", ""))
            layers[name] = Layer(
                name,
                op,
                compute_precision(op, inputs),
                inputs,
                _tensors(args.get("output_type_shape")),
                attributes=dict((attributes or {}).get(name, {})),
                extra={"provider": str(args.get("provider", ""))},
            )
        per_run[name][index] += float(event.get("dur", 0)) / 1000.0
    if kernels:
        per_run = _kernel_times(kernels, runs) or per_run
    for name, layer in layers.items():
        layer.times_ms = [per_run[name].get(i, 0.0) for i in range(len(runs))]
    run_ms = statistics.median(float(r.get("dur", 0)) / 1000.0 for r in runs)
    return list(layers.values()), run_ms


def _run_of(event: dict[str, Any], runs: list[dict[str, Any]]) -> int | None:
    ts = event["ts"]
    for i, run in enumerate(runs):
        if run["ts"] <= ts <= run["ts"] + run.get("dur", 0):
            return i
    return None


def _kernel_times(kernels: list[dict[str, Any]], runs: list[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """GPU kernel events (CUDA-profiling builds) summed per parent node and run."""
    out: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for event in kernels:
        parent, index = event.get("args", {}).get("parent_name"), _run_of(event, runs)
        if parent and index is not None:
            out[str(parent)][index] += float(event.get("dur", 0)) / 1000.0
    return out
