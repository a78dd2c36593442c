"""Plugin ops on the CPU: the ONNX-function path on ONNX Runtime vs the torch op vs the C++ kernel.

BEVPoolV2 at BEVDet's size: B=1, N=6 cameras, D=59 depth bins (1..59 m), H=16, W=44 (a 256 x 704
image at stride 16), C=80, into a 128 x 128 grid of 0.8 m cells. The points are those a real
six-camera rig (70-degree lenses, 60-degree spacing) puts inside the grid and between 2 m below
and 4 m above ground (examples/bev/model.py's frustum_ranks); the depth distribution is a softmax
over random logits. PillarScatter at PointPillars' size: 12,000 pillars, C=64, a 496 x 432 canvas.

Paths, all on the same inputs and checked against each other before timing:
  cpp         libdeploykit_plugins_cpu.so through ctypes (single-threaded; the TensorRT-less reference)
  torch       torch.ops.deploykit.* (vectorized torch, torch's intra-op threads)
  onnx        one plugin node with its model-local body on ONNX Runtime's CPU provider, the rank and
              interval tensors fed as inputs (nothing precomputed)
  onnx-const  the same with them as initializers, at ORT_ENABLE_EXTENDED: what a model with fixed
              geometry (the examples) runs, as ORT folds the index arithmetic at load time

Timing: `trials` rounds, each timing every path for `iterations` calls, interleaved so that the
shared VM's drift (up to 3x between rounds here) hits all paths alike; the table gives the median
of the per-round medians, the spread (min..max of them) and the ratio to the C++ kernel. Runs on a
GPU are not covered here: plugins/tools/gpu_check.sh times the CUDA kernels against their
memory-bandwidth floor. Prints a table and writes bench/results/plugins.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "bev"))
RESULTS = ROOT / "bench" / "results" / "plugins.json"


def bev_workload(rng: np.random.Generator) -> dict:
    from model import frustum_ranks  # examples/bev/model.py

    b, n, d, h, w, c, bev = 1, 6, 59, 16, 44, 80, (1, 128, 128)
    ranks = frustum_ranks(
        cameras=n, image=(256, 704), stride=16, depths=np.arange(1.0, 60.0), bev=bev, cell=0.8, fov_degrees=70.0
    )
    logits = rng.standard_normal((b, n, d, h, w)).astype(np.float32) * 3
    depth = np.exp(logits - logits.max(axis=2, keepdims=True))
    depth /= depth.sum(axis=2, keepdims=True)
    feat = rng.standard_normal((b, n, h, w, c)).astype(np.float32)
    inputs = {"depth": depth, "feat": feat, **ranks}
    return {
        "op": "BEVPoolV2",
        "attrs": {"bev_shape": list(bev)},
        "inputs": inputs,
        "size": {
            "B": b,
            "N": n,
            "D": d,
            "H": h,
            "W": w,
            "C": c,
            "bev": list(bev),
            "points": int(ranks["ranks_depth"].size),
            "frustum_points": b * n * d * h * w,
            "intervals": int(ranks["interval_starts"].size),
        },
    }


def pillar_workload(rng: np.random.Generator) -> dict:
    b, p, c, grid = 1, 12000, 64, (496, 432)
    cells = rng.choice(grid[0] * grid[1], p, replace=False)
    coords = np.zeros((b, p, 4), np.int32)
    coords[0, :, 2], coords[0, :, 3] = np.divmod(cells, grid[1])
    inputs = {
        "features": rng.standard_normal((b, p, c)).astype(np.float32),
        "coords": coords,
        "num_pillars": np.array([p], np.int32),
    }
    return {
        "op": "PillarScatter",
        "attrs": {"grid": list(grid)},
        "inputs": inputs,
        "size": {"B": b, "P": p, "C": c, "grid": list(grid)},
    }


def onnx_session(workload: dict, constant_indices: bool):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from deploykit.plugins.onnx_functions import attach_bodies

    inputs = workload["inputs"]
    names = list(inputs)
    indices = [k for k in names if inputs[k].dtype == np.int32] if constant_indices else []
    value_infos = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(inputs[k].dtype), inputs[k].shape)
        for k in names
        if k not in indices
    ]
    node = helper.make_node(
        workload["op"],
        names,
        ["out"],
        domain="deploykit",
        plugin_version="1",
        plugin_namespace="deploykit",
        **workload["attrs"],
    )
    graph = helper.make_graph(
        [node],
        "bench",
        value_infos,
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(inputs[k], k) for k in indices],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("deploykit", 1)])
    opts = ort.SessionOptions()
    opts.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        if constant_indices
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    session = ort.InferenceSession(
        attach_bodies(model)[0].SerializeToString(), opts, providers=["CPUExecutionProvider"]
    )
    feeds = {k: inputs[k] for k in names if k not in indices}
    return lambda: session.run(None, feeds)[0]


def paths(workload: dict, cpu: object) -> dict[str, Callable[[], np.ndarray]]:
    import torch

    from deploykit.plugins import torch_ops

    inputs, attrs = workload["inputs"], workload["attrs"]
    tensors = [torch.from_numpy(a) for a in inputs.values()]
    attr = next(iter(attrs.values()))
    if workload["op"] == "BEVPoolV2":
        cpp = lambda: cpu.bev_pool_v2(*inputs.values(), tuple(attr))  # noqa: E731
        torch_op = lambda: torch_ops.bev_pool_v2(*tensors, attr).numpy()  # noqa: E731
    else:
        cpp = lambda: cpu.pillar_scatter(*inputs.values(), tuple(attr))  # noqa: E731
        torch_op = lambda: torch_ops.pillar_scatter(*tensors, attr).numpy()  # noqa: E731
    return {
        "cpp": cpp,
        "torch": torch_op,
        "onnx": onnx_session(workload, False),
        "onnx-const": onnx_session(workload, True),
    }


def time_interleaved(runs: dict[str, Callable[[], np.ndarray]], trials: int, iterations: int) -> dict[str, list[float]]:
    for run in runs.values():  # warm-up: allocators, ORT's first-run setup, torch's thread pool
        run()
    medians: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(trials):
        for name, run in runs.items():
            times = []
            for _ in range(iterations):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
            medians[name].append(statistics.median(times) * 1e3)
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()

    import onnxruntime
    import torch

    from deploykit.plugins.build import BuildOptions, build_plugins
    from deploykit.plugins.native import CpuKernels

    # A CPU-only build of its own, so the regular build/plugins keeps its CUDA/TensorRT configuration.
    built = build_plugins(ROOT / "build" / "plugins-cpu", BuildOptions(cuda=False, targets=("deploykit_plugins_cpu",)))
    cpu = CpuKernels(Path(built.outputs["cpu"]))
    rng = np.random.default_rng(0)
    rows, results = [], []
    for workload in (bev_workload(rng), pillar_workload(rng)):
        runs = paths(workload, cpu)
        outputs = {name: run() for name, run in runs.items()}
        agreement = {name: float(np.max(np.abs(out - outputs["cpp"]))) for name, out in outputs.items()}
        medians = time_interleaved(runs, args.trials, args.iterations)
        cpp_ms = statistics.median(medians["cpp"])
        for name, ms in medians.items():
            med = statistics.median(ms)
            row = {
                "op": workload["op"],
                "path": name,
                "median_ms": round(med, 3),
                "min_ms": round(min(ms), 3),
                "max_ms": round(max(ms), 3),
                "vs_cpp": round(med / cpp_ms, 2),
                "max_abs_vs_cpp": agreement[name],
                "trial_medians_ms": [round(m, 3) for m in ms],
            }
            rows.append(row)
        results.append({"op": workload["op"], "size": workload["size"]})
    print(f"{'op':14} {'path':11} {'median ms':>10} {'spread ms':>16} {'x cpp':>7} {'max|d| vs cpp':>14}")
    for r in rows:
        print(
            f"{r['op']:14} {r['path']:11} {r['median_ms']:10.2f} {r['min_ms']:7.2f} .. {r['max_ms']:<6.2f} "
            f"{r['vs_cpp']:7.2f} {r['max_abs_vs_cpp']:14.2e}"
        )
    for w in results:
        print(f"{w['op']}: {w['size']}")
    report = {
        "workloads": results,
        "rows": rows,
        "trials": args.trials,
        "iterations": args.iterations,
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "torch_threads": torch.get_num_threads(),
        },
        "tools": {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__},
        "gpu": "not measured here: plugins/tools/gpu_check.sh times the CUDA kernels vs their bandwidth floor",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2))
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
