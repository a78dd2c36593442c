"""Per-layer profiling of a built engine, with a roofline column.

Each backend's own profiler gives the per-layer time: ONNX Runtime's profiling JSON (CPU and CUDA
execution providers), TensorRT's ``IProfiler`` (per-layer GPU time, one report per enqueue) joined
with the engine inspector, which says the precision each layer ran in. The rest is backend-neutral::

    layers     what one profiled layer is (name, op type, precision, I/O tensors, times)
    cost       FLOPs and bytes moved of a layer, from its shapes and dtypes
    peaks      this machine's measured GEMM FLOP/s and copy bandwidth, measured once, cached in the store
    summary    aggregate by node, op type and precision; roofline columns; top-N; the model's floor latency
    ort        ONNX Runtime's profile -> layers
    tensorrt   TensorRT's IProfiler + inspector -> layers
    run        profile an engine folder, or a config (built first), for ``deploykit profile`` and the gate

``import deploykit.profiling`` imports neither ONNX Runtime nor TensorRT.
"""

from __future__ import annotations

__all__ = ["ProfileOptions"]

from deploykit.profiling.run import ProfileOptions  # noqa: E402
