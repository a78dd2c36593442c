"""The same job with plain tools, as a user would script it: torch.onnx.export (dynamo), an ONNX
Runtime session at the same optimization level, and the same timing loop. Used by bench_pipeline.py."""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "detector"))
from model import build  # noqa: E402

WARMUP, ITERATIONS = 10, 100

model = build()
x = torch.randn(2, 3, 128, 128)
batch = torch.export.Dim("batch", min=1, max=4)
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "model.onnx"
    torch.onnx.export(model, (x,), path, dynamo=True, input_names=["images"], output_names=["boxes", "scores"],
                      opset_version=18, dynamic_shapes=({0: batch},), external_data=False)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feeds = {"images": np.random.default_rng(0).standard_normal((1, 3, 128, 128)).astype(np.float32)}
    for _ in range(WARMUP):
        session.run(None, feeds)
    times = []
    for _ in range(ITERATIONS):
        t0 = time.perf_counter_ns()
        session.run(None, feeds)
        times.append((time.perf_counter_ns() - t0) / 1e6)
print(f"p50 {np.percentile(times, 50):.3f} ms")
