"""TensorRT's per-layer profile -> layers, and the GPU's measured peaks.

Times come from ``IProfiler`` (``TensorRTSession.layer_times``); what each layer is comes from the
engine inspector for the same execution context (DETAILED verbosity, set at build): its LayerType and
ParameterType, input/output tensors with their resolved dimensions and formats (whose element type is
the precision the layer actually ran in: where INT8 did not take, it says FP16 or FP32), weights,
tactic and the ONNX nodes it fused (``Metadata``). A layer TensorRT timed but the inspector does not
list (a reformat inserted at run time) keeps its time with unknown cost.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.trt_inspect import dtype_word
from deploykit.errors import ArtifactCorrupt
from deploykit.profiling.layers import ITEMSIZE, Layer, Tensor, compute_precision
from deploykit.profiling.peaks import best_seconds, gemm_onnx, monotonic

_ONNX_NAMES = re.compile(r"\[ONNX Layer: ([^\]]+)\]")


def profile(
    engine_dir: Path, feeds: dict[str, np.ndarray], iterations: int, warmup: int
) -> tuple[list[Layer], dict[str, Any]]:
    """Profile a TensorRT engine folder on ``feeds``; (layers in engine order, facts for the report)."""
    from deploykit.backends.tensorrt import TensorRTBackend

    session = TensorRTBackend().load(Path(engine_dir))
    try:
        times = session.layer_times(feeds, iterations, warmup)
        information = session.layer_information()
        evaluator = session.evaluator
    finally:
        session.close()
    return layers_from_inspector(information, times), {
        "evaluator": evaluator,
        "timing": "GPU time per layer from TensorRT's IProfiler (plain enqueue, no CUDA "
        "graph); precision per layer from the engine inspector",
    }


def layers_from_inspector(text: str, times: dict[str, list[float]]) -> list[Layer]:
    """Join the inspector's layers (engine order) with the profiler's times by layer name."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ArtifactCorrupt(f"the engine inspector's JSON is not readable ({e})") from e
    items = data.get("Layers") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ArtifactCorrupt("the engine inspector's JSON has no 'Layers' list")
    # ``row``, not ``layer``: the TensorRT names checker reads a variable named layer as a TensorRT ILayer.
    layers = [_layer(item) for item in items]
    known = {row.name for row in layers}
    for row in layers:
        row.times_ms = list(times.get(row.name, []))
    layers += [
        Layer(name, "unknown", "", times_ms=list(t), extra={"note": "timed by TensorRT, not in the inspector"})
        for name, t in times.items()
        if name not in known
    ]
    return layers


def _tensors(entries: Any) -> list[Tensor]:
    out = []
    for t in entries if isinstance(entries, list) else []:
        if isinstance(t, dict):
            text = t.get("Datatype") or t.get("DataType") or t.get("Format/Datatype") or ""
            out.append(Tensor(dtype_word(str(text)), tuple(int(d) for d in t.get("Dimensions", []) or [])))
    return out


def _constant_bytes(entry: Any) -> float:
    if not isinstance(entry, dict):
        return 0.0
    return float(entry.get("Count", 0)) * ITEMSIZE.get(dtype_word(str(entry.get("Type", ""))), 4)


def _layer(item: Any) -> Layer:
    if not isinstance(item, dict):  # verbosity below DETAILED: a bare name
        return Layer(str(item), "unknown", "")
    op = str(item.get("ParameterType") or item.get("LayerType") or "unknown")
    if op == "Convolution" and item.get("LayerType") == "CaskDeconvolutionV2":
        op = "Deconvolution"
    inputs, outputs = _tensors(item.get("Inputs")), _tensors(item.get("Outputs"))
    attributes: dict[str, Any] = {}
    if op in ("Convolution", "Deconvolution") and item.get("Kernel") and inputs and len(inputs[0].shape) > 1:
        groups, kernel = int(item.get("Groups", 1) or 1), [int(k) for k in item["Kernel"]]
        attributes["weight_shape"] = (int(item.get("OutMaps", 0)), inputs[0].shape[1] // groups, *kernel)
    if op == "Pooling" and item.get("WindowSize"):
        attributes["kernel_shape"] = [int(k) for k in item["WindowSize"]]
    metadata = str(item.get("Metadata", "")).replace("\x1e", "+").replace("\x1f", "+")
    return Layer(
        str(item.get("Name", "")),
        op,
        compute_precision(op, inputs),
        inputs,
        outputs,
        attributes=attributes,
        weights_bytes=_constant_bytes(item.get("Weights")) + _constant_bytes(item.get("Bias")),
        extra={
            "layer_type": str(item.get("LayerType", "")),
            "tactic": str(item.get("TacticName") or item.get("TacticValue") or ""),
            "onnx_nodes": _ONNX_NAMES.findall(metadata),
        },
    )


# -- peaks -------------------------------------------------------------------------------------------


def measure_gpu(precisions: set[str], copy: bool, n: int = 4096) -> dict[str, Any]:
    """GEMM FLOP/s per precision through the TensorRT backend (a MatMul engine each) and device copy bandwidth."""
    from deploykit.backends.tensorrt import TensorRTBackend
    from deploykit.config import BuildConfig, TensorRTOptions

    out: dict[str, Any] = {"gemm_flops": {}, "method": {}}
    backend = TensorRTBackend()
    options = BuildConfig(backend="tensorrt", tensorrt=TensorRTOptions(timing_cache=False, cuda_graphs=True))
    feed = {"x": np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)}
    with tempfile.TemporaryDirectory(prefix="deploykit-gpu-peaks-") as tmp:
        for precision in sorted(precisions & {"fp32", "fp16", "int8", "fp8"}):
            folder = Path(tmp) / precision
            backend.build(gemm_onnx(Path(tmp) / f"{precision}.onnx", n, precision), options, folder, profiles={})
            session = backend.load(folder)
            try:
                seconds = best_seconds(session.engine_timed_runner(feed), repeats=20, warmup=5)
            finally:
                session.close()
            out["gemm_flops"][precision] = 2.0 * n**3 / seconds
            out["method"][f"gemm_{precision}"] = (
                f"{n}x{n}x{n} MatMul ({precision}) built by the tensorrt backend, engine-only time, best of 20"
            )
    if copy:
        out["bandwidth"] = monotonic({size: device_copy_bandwidth(size) for size in GPU_COPY_SIZES})
        out["method"]["copy"] = (
            "cudaMemcpyAsync device to device at working sets of 8 MiB (L2) and 1 GiB (HBM), best of 10 (read + write)"
        )
    return out


GPU_COPY_SIZES = (8 << 20, 1 << 30)  # an L2-sized working set and an HBM-sized one


def device_copy_bandwidth(nbytes: int, repeats: int = 10) -> float:
    """Bytes per second of a device-to-device copy (read + write), through cuda-python."""
    from deploykit.backends.trt_cuda import call, require_cudart

    cudart = require_cudart()
    src = int(call(cudart, cudart.cudaMalloc(nbytes), "cudaMalloc"))
    dst = int(call(cudart, cudart.cudaMalloc(nbytes), "cudaMalloc"))
    stream = call(cudart, cudart.cudaStreamCreate(), "cudaStreamCreate")
    kind = cudart.cudaMemcpyKind.cudaMemcpyDeviceToDevice
    try:

        def copy() -> None:
            call(cudart, cudart.cudaMemcpyAsync(dst, src, nbytes, kind, stream), "cudaMemcpyAsync D2D")
            call(cudart, cudart.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

        seconds = best_seconds(copy, repeats, warmup=3)
    finally:
        cudart.cudaStreamDestroy(stream)
        cudart.cudaFree(src)
        cudart.cudaFree(dst)
    return 2.0 * nbytes / seconds


def gpu_peaks_key(meta: dict[str, Any]) -> dict[str, Any]:
    """What GPU peaks depend on: the GPU and the TensorRT that builds the GEMMs."""
    return {
        "backend": "tensorrt",
        "gpu": meta.get("gpu", ""),
        "compute_capability": meta.get("compute_capability", ""),
        "tensorrt": meta.get("tensorrt", ""),
        "measured_with": "deploykit.peaks/1",
    }


__all__ = ["device_copy_bandwidth", "gpu_peaks_key", "layers_from_inspector", "measure_gpu", "profile"]
