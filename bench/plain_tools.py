"""The same job with plain tools, as a user would script it: torch.onnx.export (dynamo), an ONNX
Runtime session at the same optimization level, and the same timing loop as the example's gate
(10 warm-up runs and at least 0.25 s, then 5 trials of 100 iterations). Used by bench_pipeline.py;
with --json it prints the CPU time of each phase (time.process_time: every thread) as one JSON object."""

import time

START = time.process_time()
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "detector"
sys.path.insert(0, str(EXAMPLE))
from model import build  # noqa: E402

WARMUP, WARMUP_S, TRIALS, ITERATIONS = 10, 0.25, 5, 100  # examples/detector's gate settings
phases = {"imports": time.process_time() - START}
mark = time.process_time()


def phase(name: str) -> None:
    global mark
    now = time.process_time()
    phases[name] = now - mark
    mark = now


model = build()
model.load_state_dict(torch.load(EXAMPLE / "weights.pt", weights_only=True))  # as deploykit.yaml's source.weights
phase("build the torch model")
x = torch.randn(2, 3, 128, 128)
batch = torch.export.Dim("batch", min=1, max=4)
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "model.onnx"
    torch.onnx.export(
        model,
        (x,),
        path,
        dynamo=True,
        input_names=["images"],
        output_names=["boxes", "scores"],
        opset_version=18,
        dynamic_shapes=({0: batch},),
        external_data=False,
    )
    phase("torch.onnx.export")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    phase("ONNX Runtime session")
    feeds = {"images": np.random.default_rng(0).standard_normal((1, 3, 128, 128)).astype(np.float32)}
    start, runs = time.perf_counter(), 0
    while runs < WARMUP or time.perf_counter() - start < WARMUP_S:
        session.run(None, feeds)
        runs += 1
    p50s = []
    for _ in range(TRIALS):
        times = []
        for _ in range(ITERATIONS):
            t0 = time.perf_counter_ns()
            session.run(None, feeds)
            times.append((time.perf_counter_ns() - t0) / 1e6)
        p50s.append(float(np.percentile(times, 50)))
    phase("timing loop")
if "--json" in sys.argv:
    print(json.dumps({"phases": phases, "total_s": time.process_time() - START, "p50_ms": float(np.median(p50s))}))
else:
    print(f"p50 {np.median(p50s):.3f} ms (median of {TRIALS} trials)")
