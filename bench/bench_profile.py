"""Profiling benchmark: what per-layer profiling costs against an unprofiled run, on this machine.

For each model (a conv net built in code always; real models from ``$DEPLOYKIT_MODELS``, default
/work/cache/models, when present), an ONNX Runtime CPU engine is built once, then:

1. overhead: the same engine in two sessions, one with ONNX Runtime's profiler on (what
   ``deploykit profile`` and ``gate.profile`` run) and one without (what the gate times), timed
   interleaved over ROUNDS rounds; the ratio is the median of the per-round ratios;
2. coverage: the sum of the per-layer times the profile reports against the unprofiled run (what the
   per-node view explains of the real latency; the rest is the executor between nodes);
3. cost of a profile: the wall time of ``profile_engine`` with the machine's peaks cached, and of the
   first one that measures them.

Prints a table and writes bench/results/profile.json. Ratios are measured in one run, interleaved:
on a shared machine absolute times drift between rounds, ratios much less.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from deploykit.backends.onnxruntime import OnnxRuntimeBackend  # noqa: E402
from deploykit.config import BuildConfig  # noqa: E402
from deploykit.profiling import ProfileOptions  # noqa: E402
from deploykit.profiling.run import engine_feeds, profile_engine  # noqa: E402

MODELS = Path(os.environ.get("DEPLOYKIT_MODELS", "/work/cache/models"))
# Many small nodes is where a per-node profiler costs most; u2netp (1,055 nodes) takes seconds per run on
# a loaded 2-core machine, so it runs only with BENCH_PROFILE_LARGE=1.
REAL = {
    "vit_s_saliency": ("transformer/vit_s_saliency.onnx", {"batch_size": 1}),
    "ppocrv6_det_tiny": (
        "ocr/ppocrv6_det_tiny.onnx",
        {"DynamicDimension.0": 1, "DynamicDimension.1": 320, "DynamicDimension.2": 320},
    ),
}
if os.environ.get("BENCH_PROFILE_LARGE"):
    REAL["u2netp"] = ("segmentation/u2netp.onnx", {})
ROUNDS, ROUND_SECONDS = 7, 0.6  # runs per round: as many as fit in ROUND_SECONDS (at least 1)


def conv_net(path: Path, blocks: int = 8, channels: int = 32, size: int = 32) -> Path:
    """A stack of conv + relu blocks with a residual add: many mid-sized nodes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    shape = (channels, 3, 3, 3)
    for i in range(blocks):
        inits.append(
            numpy_helper.from_array(
                (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), f"w{i}"
            )
        )
        nodes += [
            helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1] * 4),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
        ]
        if i:
            nodes.append(helper.make_node("Add", [f"r{i}", x], [f"a{i}"]))
        x, shape = (f"a{i}" if i else f"r{i}"), (channels, channels, 3, 3)
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["y"]))
    graph = helper.make_graph(
        nodes,
        "conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 1, 1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def per_run_ms(run, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        run()
    return (time.perf_counter() - start) / n * 1e3


def overhead(engine: Path, feeds: dict[str, np.ndarray], tmp: Path) -> dict[str, float]:
    backend = OnnxRuntimeBackend()
    plain = backend.load(engine).timed_runner(feeds)
    profiled_session = backend.load(engine, profile_prefix=str(tmp / "bench"))
    profiled = profiled_session.timed_runner(feeds)
    for run in (plain, profiled):
        per_run_ms(run, 2)
    runs = max(1, int(ROUND_SECONDS * 1e3 / per_run_ms(plain, 2)))
    rounds = []
    for _ in range(ROUNDS):  # interleaved: both see the same machine in each round
        a = per_run_ms(plain, runs)
        b = per_run_ms(profiled, runs)
        rounds.append((a, b))
    Path(profiled_session.end_profiling()).unlink(missing_ok=True)
    ratios = [b / a for a, b in rounds]
    return {
        "unprofiled_ms": statistics.median(a for a, _ in rounds),
        "profiled_ms": statistics.median(b for _, b in rounds),
        "overhead_ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "runs_per_round": runs,
    }


def bench_model(name: str, onnx_path: Path, dims: dict[str, int], peaks: Path) -> dict[str, object]:
    print(f"{name}: building and timing ...", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp:
        engine = Path(tmp) / "engine"
        engine.mkdir()
        OnnxRuntimeBackend().build(onnx_path, BuildConfig(), engine)
        feeds = engine_feeds(engine, dims)
        row: dict[str, object] = {"model": name, **overhead(engine, feeds, Path(tmp))}
        start = time.perf_counter()
        report = profile_engine(engine, feeds, ProfileOptions(iterations=10, warmup=2), peaks_dir=peaks, model=name)
        row["profile_s"] = time.perf_counter() - start
        row.update(
            layers=report["layers_count"],
            layer_sum_ms=report["total_ms"],
            coverage=report["total_ms"] / row["unprofiled_ms"],
            floor_ms=report.get("floor_ms"),
            top=report["top"][:3],
            compute_bound_share=report.get("compute_bound_share"),
        )
    return row


def main() -> int:
    out = ROOT / "bench" / "results" / "profile.json"
    peaks = Path(tempfile.mkdtemp(prefix="bench-peaks-"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        synthetic = conv_net(Path(tmp) / "conv_net.onnx")
        start = time.perf_counter()
        rows.append(bench_model("conv_net (in code)", synthetic, {}, peaks))
        rows[0]["first_profile_with_peak_measurement_s"] = time.perf_counter() - start
    for name, (relative, dims) in REAL.items():
        if (MODELS / relative).is_file():
            rows.append(bench_model(name, MODELS / relative, dims, peaks))
        else:
            print(f"skip {name}: {MODELS / relative} not found (set DEPLOYKIT_MODELS)")
    machine = json.loads(next(peaks.glob("peaks-*.json")).read_text())
    shutil.rmtree(peaks, ignore_errors=True)
    header = (
        f"{'model':22} {'layers':>6} {'run ms':>9} {'profiled':>9} {'ratio':>6} {'range':>11} {'coverage':>8} "
        f"{'floor ms':>9} {'profile s':>9}"
    )
    print(header)
    for r in rows:
        floor = f"{r['floor_ms']:9.3f}" if r["floor_ms"] is not None else f"{'-':>9}"
        print(
            f"{r['model']:22} {r['layers']:6d} {r['unprofiled_ms']:9.3f} {r['profiled_ms']:9.3f} "
            f"{r['overhead_ratio']:6.2f} {r['ratio_min']:5.2f}-{r['ratio_max']:<5.2f} {r['coverage']:8.0%} {floor} "
            f"{r['profile_s']:9.2f}"
        )
    print(
        f"peaks: {machine['gemm_flops']} FLOP/s, copy {machine['bandwidth']} B/s; first profile incl. peak "
        f"measurement {rows[0]['first_profile_with_peak_measurement_s']:.1f} s"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "rounds": ROUNDS,
                "round_seconds": ROUND_SECONDS,
                "cpus": os.cpu_count(),
                "load_average": os.getloadavg(),
                "peaks": machine,
                "models": rows,
            },
            indent=2,
            default=str,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
