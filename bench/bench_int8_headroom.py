"""How much better could INT8 itself get on the real models? Two measures of what per-layer weight
rounding and per-layer activation ranges could buy, before anyone builds a search for them.

* **Weights exact:** deploykit's default INT8 graph with every DequantizeLinear of a quantized
  constant (weights, and the constants ORT quantizes like activations: LayerNorm biases, position
  embeddings) replaced by the FP32 graph's value; activations stay quantized. It measures what the
  weights' own rounding costs, which a better rounding or clipping choice (AdaRound-style, MSE
  clipping) could win back. (A rounding fitted to quantized inputs can also offset some of the
  activations' error; that is not measured here.) The int32 biases stay as shipped: their own error
  is below 0.3 % on the text detector, and with their float values in place ONNX Runtime's graph
  optimizer computes that graph differently (rel-L2 0.16 with optimizations off, 0.51 at "extended").
* **Ranges chosen per tensor by the task:** the method race (``method: auto``) picks one method's
  ranges for the whole graph. Here each block of about sqrt(N) activation tensors (graph order) takes
  the range of whichever method raises the task metric on the 16 validation samples, greedily, two
  rounds; the result is scored on the 48 hold-out samples nothing chose on. It says whether a
  task-judged per-layer range choice generalizes or fits the validation samples.

Models, data and task metrics are ``bench_real_models.py``'s (the same seeds): the validation samples
judge, the hold-out set does not. Runs take minutes (the greedy choice evaluates each block and method
on every validation sample).

    python bench/bench_int8_headroom.py [--families ppocrv6_det_tiny,vit_s_saliency] [--rounds 2]

Prints a table and writes bench/results/int8_headroom.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_real_models as real  # also puts src/ on the path
import numpy as np

RESULTS = real.ROOT / "bench" / "results" / "int8_headroom.json"
QUANTIZED_TYPES = (2, 3)  # uint8 and int8 weights (int32 biases stay as shipped)


def exact_weights(model: Any, reference: Any) -> tuple[Any, int]:
    """``model`` with each weight DequantizeLinear replaced by the reference's float values
    (ORT names a quantized initializer ``<float name>_quantized``); how many were replaced."""
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto.FromString(model.SerializeToString())
    inits = {t.name: t for t in out.graph.initializer}
    floats = {t.name: t for t in reference.graph.initializer}
    keep, replaced = [], 0
    for node in out.graph.node:
        source = node.input[0] if node.op_type == "DequantizeLinear" and node.input else ""
        original = floats.get(source.removesuffix("_quantized"))
        if source in inits and inits[source].data_type in QUANTIZED_TYPES and original is not None:
            value = numpy_helper.to_array(original).astype(np.float32)
            out.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
            replaced += 1
            continue
        keep.append(node)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    return out, replaced


def greedy_ranges(score: Any, build: Any, sets: dict[str, dict], chosen: dict, rounds: int) -> tuple[dict, int]:
    """Blocks of the tensors whose range differs between methods, each set to the method whose ranges
    raise ``score`` (higher is better), greedily; the ranges and how many candidates were scored."""
    differ = [t for t in chosen if any(t in s and s[t] != chosen[t] for s in sets.values())]
    size = max(1, math.ceil(len(differ) / max(1, math.ceil(math.sqrt(len(differ))))))
    blocks = [differ[i : i + size] for i in range(0, len(differ), size)]
    current, best, scored = dict(chosen), score(build(chosen)), 0
    for _ in range(rounds):
        for block in blocks:
            for ranges in sets.values():
                trial = {**current, **{t: ranges[t] for t in block if t in ranges}}
                if trial == current:
                    continue
                found = score(build(trial))
                scored += 1
                if found > best:
                    current, best = trial, found
    return current, scored


def bench_family(family: real.Family, rounds: int) -> dict[str, Any]:
    import onnx

    import deploykit.quant.quantize as q
    from deploykit.config import RepairConfig
    from deploykit.graph.run import session_from_onnx
    from deploykit.quant.candidates import finished, qdq

    tmp = Path(tempfile.mkdtemp(prefix="deploykit-headroom-"))
    path = real.prepared(family, tmp)
    calib = real.samples(family, real.CALIB, seed=0)
    valid = real.samples(family, real.VALID, seed=1000)
    holdout = real.samples(family, real.HOLDOUT, seed=2000)
    fp32 = session_from_onnx(onnx.load(str(path)), evaluator="onnxruntime")
    refs = {"valid": [fp32.infer(s) for s in valid], "holdout": [fp32.infer(s) for s in holdout]}
    data = {"valid": valid, "holdout": holdout}

    def task(model: Any, which: str) -> float:
        return float(real.evaluate(family, refs[which], model, "onnxruntime", data[which])["task"])

    seen: dict[str, Any] = {}
    quantize, choose = q.quantize_model, q.choose_ranges

    def keep_result(job: Any) -> Any:
        seen["result"] = quantize(job)
        return seen["result"]

    def keep_race(*args: Any, **kwargs: Any) -> Any:
        seen["race"] = args
        return choose(*args, **kwargs)

    q.quantize_model, q.choose_ranges = keep_result, keep_race
    try:
        model = real.deploykit_run(
            path, calib, "int8", "onnxruntime", real.judging(family, valid), repair=RepairConfig(auto=False)
        )()
    finally:
        q.quantize_model, q.choose_ranges = quantize, choose
    result = seen["result"]
    job, graph, sets, excluded, fp32_nodes, sample = seen["race"][:6]
    exact, replaced = exact_weights(model, result.reference)

    def build(ranges: dict) -> Any:
        return finished(job, qdq(job, graph, ranges, sorted(excluded), sample), fp32_nodes)

    start = time.perf_counter()
    ranges, scored = greedy_ranges(lambda m: task(m, "valid"), build, sets, result.ranges, rounds)
    greedy_s = time.perf_counter() - start
    mixed = build(ranges)
    kind, metric = family.metric
    return {
        "metric": f"{kind} {metric}",
        "target": next((v for k, v in family.target.items() if k.startswith("min_") and v > 0), None),
        "method": result.settings.method,
        "default": {"valid": task(model, "valid"), "holdout": task(model, "holdout")},
        "weights_exact": {"valid": task(exact, "valid"), "holdout": task(exact, "holdout"), "replaced": replaced},
        "ranges_per_tensor": {
            "valid": task(mixed, "valid"),
            "holdout": task(mixed, "holdout"),
            "changed": sum(1 for t in ranges if ranges[t] != result.ranges[t]),
            "candidates": scored,
            "seconds": round(greedy_s, 1),
        },
    }


def table(results: dict[str, Any]) -> str:
    lines = [
        "| model (target) | default INT8: validation / hold-out | weights exact | ranges per tensor by the task "
        "| tensors changed, candidates, time |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, r in results.items():
        d, w, g = r["default"], r["weights_exact"], r["ranges_per_tensor"]
        lines.append(
            f"| {name} ({r['metric']} >= {r['target']}) | {d['valid']:.3f} / {d['holdout']:.3f} ({r['method']}) "
            f"| {w['valid']:.3f} / {w['holdout']:.3f} | {g['valid']:.3f} / {g['holdout']:.3f} "
            f"| {g['changed']}, {g['candidates']}, {g['seconds']:.0f} s |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(f.name for f in real.FAMILIES))
    parser.add_argument("--rounds", type=int, default=2, help="greedy rounds over the blocks")
    args = parser.parse_args()
    wanted = [f for f in real.FAMILIES if f.name in args.families.split(",")]
    missing = [f for f in wanted if not (real.MODELS / f.file).is_file()]
    if missing:
        raise SystemExit(f"missing {', '.join(str(real.MODELS / f.file) for f in missing)}: run fetch.sh")
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"families": {}}
    for family in wanted:
        results["families"][family.name] = bench_family(family, args.rounds)
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(results, indent=1))
    results["load_average"] = os.getloadavg()
    RESULTS.write_text(json.dumps(results, indent=1))
    print(table({f.name: results["families"][f.name] for f in wanted}))
    print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
