"""Gate benchmark: harness overhead and stability of the regression check on this machine.

1. Harness overhead: deploykit's timing loop (``time_iterations`` over the session's
   ``timed_runner``) against a bare ``session.run`` loop on a tiny ONNX model, interleaved over many
   rounds; per-iteration overhead in µs and as a share of one inference (target <= 5 µs or <= 2 %).
2. Stability: the gate runs ``RUNS`` times on the unchanged example detector; every run is
   compared with every other as a baseline, with a 10 % threshold, by deploykit's noise-aware rule
   and by a naive comparison of means. An unchanged model never regressed, so every failure is a
   flake.

Prints a table and writes bench/results/gate.json. Numbers come from one run on one machine.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from deploykit.metrics.latency import naive_regression, regression  # noqa: E402

DETECTOR = ROOT / "examples" / "detector" / "deploykit.yaml"
ROUNDS, ITERATIONS = 40, 2000
RUNS, THRESHOLD = 5, 0.10


def tiny_session() -> tuple[object, dict[str, np.ndarray]]:
    """A one-MatMul model: the inference is as short as ORT gets, so loop overhead shows."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from deploykit.graph.run import session_from_onnx

    w = numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [w],
    )
    path = Path(tempfile.mkdtemp()) / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return session_from_onnx(path, "onnxruntime", level="disabled", threads=1), {"x": np.ones((1, 8), np.float32)}


def harness_overhead() -> dict[str, float]:
    from deploykit.stages.gate import time_iterations

    session, feeds = tiny_session()
    raw, names = session._session, [o.name for o in session.outputs]  # the bare ORT session

    def bare(n: int) -> None:
        for _ in range(n):
            raw.run(names, feeds)

    def deploykit_loop(n: int) -> None:
        time_iterations(session.timed_runner(feeds), n)

    for fn in (bare, deploykit_loop):
        fn(500)  # warm both paths
    per_iter = {"bare": [], "deploykit": []}
    for _ in range(ROUNDS):  # interleaved: drift on a shared machine hits both alike
        for name, fn in (("bare", bare), ("deploykit", deploykit_loop)):
            t0 = time.perf_counter()
            fn(ITERATIONS)
            per_iter[name].append((time.perf_counter() - t0) / ITERATIONS * 1e6)
    diffs = [d - b for d, b in zip(per_iter["deploykit"], per_iter["bare"], strict=True)]
    bare_us = statistics.median(per_iter["bare"])
    overhead = statistics.median(diffs)
    return {
        "bare_us": bare_us,
        "deploykit_us": statistics.median(per_iter["deploykit"]),
        "overhead_us": overhead,
        "overhead_pct": 100 * overhead / bare_us,
        "rounds": ROUNDS,
        "iterations": ITERATIONS,
    }


def gate_runs(workdir: Path) -> list[dict]:
    import deploykit

    overrides = dict(
        gate__warmup=20, gate__warmup_s=0.5, gate__iterations=100, gate__trials=5, gate__allow_missing_target=True
    )
    deploykit.convert(DETECTOR, workdir=workdir, **overrides)  # export/build once
    reports = []
    for i in range(RUNS):
        print(f"gate run {i + 1}/{RUNS} …", file=sys.stderr, flush=True)
        reports.append(deploykit.convert(DETECTOR, workdir=workdir, rerun=("gate",), **overrides).gate)
    return reports


def flakes(reports: list[dict]) -> dict[str, object]:
    """Every ordered pair (baseline, current) of runs of the unchanged model."""
    pairs = list(itertools.permutations(range(len(reports)), 2))
    aware = naive_mean = naive_p99 = 0
    for b, c in pairs:
        old, new = reports[b], reports[c]
        checks = [
            regression("fps", "FPS", new["fps_trials"], old["fps_trials"], THRESHOLD, True),
            regression(
                "p99",
                "ms",
                [t["p99_ms"] for t in new["trials"]],
                [t["p99_ms"] for t in old["trials"]],
                THRESHOLD,
                False,
            ),
        ]
        aware += not all(ch["passed"] for ch in checks)
        naive_mean += naive_regression(new["latency_all_mean_ms"], old["latency_all_mean_ms"], THRESHOLD)
        naive_p99 += naive_regression(new["latency_all_p99_ms"], old["latency_all_p99_ms"], THRESHOLD)
    n = len(pairs)
    return {"pairs": n, "noise_aware": aware / n, "naive_mean": naive_mean / n, "naive_p99": naive_p99 / n}


def pooled(report: dict) -> dict:
    """Statistics over every iteration of a run, as a single long measurement would give them."""
    everything = np.concatenate([np.asarray(t) for t in report["trials_ms"]])
    return {
        **report,
        "latency_all_mean_ms": float(everything.mean()),
        "latency_all_p99_ms": float(np.percentile(everything, 99)),
    }


def main() -> None:
    print("harness overhead …", file=sys.stderr, flush=True)
    overhead = harness_overhead()
    with tempfile.TemporaryDirectory(prefix="deploykit-bench-gate-") as tmp:
        reports = [pooled(r) for r in gate_runs(Path(tmp))]
    stability = flakes(reports)
    runs = [
        {
            "fps": r["fps"],
            "fps_trials": r["fps_trials"],
            "p99_ms": r["latency"]["p99_ms"],
            "mean_ms": r["latency_all_mean_ms"],
            "p50_spread": r["spread"]["p50_ms"]["rel"],
        }
        for r in reports
    ]
    results = {
        "overhead": overhead,
        "overhead_target": "<= 5 us or <= 2 %",
        "stability": stability,
        "threshold": THRESHOLD,
        "runs": runs,
        "overhead_ok": overhead["overhead_us"] <= 5 or overhead["overhead_pct"] <= 2,
    }
    out = ROOT / "bench" / "results" / "gate.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print_table(results)
    print(f"wrote {out}")


def print_table(r: dict) -> None:
    o, s = r["overhead"], r["stability"]
    print(f"{'measurement':<58} {'value':>12} {'target':>10}")
    print(f"{'bare session.run per iteration (tiny model)':<58} {o['bare_us']:>10.2f}µs")
    print(f"{'deploykit timing loop per iteration':<58} {o['deploykit_us']:>10.2f}µs")
    print(f"{'overhead per iteration (median of paired rounds)':<58} {o['overhead_us']:>10.2f}µs {'<=5µs':>10}")
    print(f"{'overhead share of one inference':<58} {o['overhead_pct']:>11.1f}% {'<=2%':>10}")
    print(f"{'gate runs on the unchanged detector':<58} {len(r['runs']):>12}")
    fps = [x["fps"] for x in r["runs"]]
    print(f"{'FPS per run (median of 5 trials)':<58} {min(fps):>5.1f}–{max(fps):<6.1f}")
    label = f"flake rate, noise-aware ({s['pairs']} baseline pairs)"
    print(f"{label:<58} {100 * s['noise_aware']:>11.0f}% {'0%':>10}")
    print(f"{'flake rate, naive mean latency > +10%':<58} {100 * s['naive_mean']:>11.0f}%")
    print(f"{'flake rate, naive p99 latency > +10%':<58} {100 * s['naive_p99']:>11.0f}%")


if __name__ == "__main__":
    main()
