"""This machine's measured peaks, the roofline's ceilings: GEMM FLOP/s per precision and copy bandwidth.

Measured once per machine and toolchain, through the backend that runs the layers (a MatMul built and
timed like any engine: ONNX Runtime on the CPU, TensorRT on the GPU), and a memory copy (numpy, one
slice per core, on the CPU; ``cudaMemcpy`` device to device on the GPU) at a few working-set sizes:
a layer whose tensors fit in a cache moves them at that cache's speed, so each layer's memory ceiling
is the bandwidth measured at the smallest size that holds its bytes (a cache-aware roofline; one DRAM
roof would put every cache-resident layer "above the roof"). Cached as JSON
under the artifact store (``WORKDIR/peaks/``) keyed by the machine and toolchain; a precision not
yet measured is measured when a profile first needs it. Best-of-N timings: a peak is what the
machine can do, and on a shared machine the slowest runs only measure the neighbours.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.store.hashing import digest_value

CACHE_DIR = "peaks"
SCHEMA = "deploykit.peaks/1"
# Which measured ceiling stands in for a precision that has none (the report names the stand-in).
_FALLBACK = {
    "bf16": ("fp16", "fp32"),
    "fp16": ("fp32",),
    "fp8": ("int8", "fp16", "fp32"),
    "int8": ("fp32",),
    "int4": ("int8", "fp32"),
    "fp4": ("fp8", "int8", "fp16", "fp32"),
    "uint8": ("int8", "fp32"),
}
Measure = Callable[[set[str], bool], dict[str, Any]]  # (precisions, copy too) -> {"gemm_flops", "bandwidth", "method"}
CPU_COPY_SIZES = (256 << 10, 4 << 20, 64 << 20)  # L2-, L3- and DRAM-sized working sets


@dataclass(frozen=True)
class Peaks:
    device: str  # what was measured, for the report
    gemm_flops: dict[str, float]  # precision -> FLOP/s
    bandwidth: dict[int, float]  # working-set bytes -> copy bytes per second (read + write)
    method: dict[str, str] = field(default_factory=dict)  # how each number was measured

    @property
    def copy_bytes_per_s(self) -> float:
        """The bandwidth of the largest working set measured (DRAM / HBM): the classic roofline's roof."""
        return self.bandwidth[max(self.bandwidth)] if self.bandwidth else 0.0

    def bandwidth_for(self, nbytes: float) -> float:
        """The copy bandwidth measured at the smallest working set that holds ``nbytes``."""
        fitting = [size for size in self.bandwidth if size >= nbytes]
        return self.bandwidth[min(fitting)] if fitting else self.copy_bytes_per_s

    def compute(self, precision: str) -> tuple[float, str]:
        """(FLOP/s ceiling, the precision it was measured in) for a layer computing in ``precision``."""
        for candidate in (precision, *_FALLBACK.get(precision, ("fp32",))):
            if candidate in self.gemm_flops:
                return self.gemm_flops[candidate], candidate
        best = max(self.gemm_flops, key=self.gemm_flops.get) if self.gemm_flops else ""
        return (self.gemm_flops[best], best) if best else (0.0, "")

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "gemm_flops": dict(sorted(self.gemm_flops.items())),
            "bandwidth": {str(k): v for k, v in sorted(self.bandwidth.items())},
            "copy_bytes_per_s": self.copy_bytes_per_s,
            "method": dict(sorted(self.method.items())),
        }


def cached_peaks(
    cache_dir: Path, key: dict[str, Any], device: str, needed: set[str], measure: Measure, measurable: set[str]
) -> Peaks:
    """The cached peaks for ``key``, measuring (and caching) whatever ``needed`` precision is missing.

    Args:
        cache_dir: ``WORKDIR/peaks``.
        key: what the peaks depend on (machine, backend, versions, threads); its digest names the file.
        device: a human description for the report.
        needed: precisions the profiled layers compute in.
        measure: runs the measurements (see :func:`measure_cpu`, ``profiling.tensorrt.measure_gpu``).
        measurable: precisions ``measure`` can measure here; others fall back (see :meth:`Peaks.compute`).
    """
    path = cache_dir / f"peaks-{digest_value(key)[:16]}.json"
    data = _read(path)
    have = set(data.get("gemm_flops", {}))
    missing = ({"fp32"} | (needed & measurable)) - have
    if missing or not data.get("bandwidth"):
        fresh = measure(missing, not data.get("bandwidth"))
        data = {
            "schema": SCHEMA,
            "key": key,
            "device": device,
            "gemm_flops": {**data.get("gemm_flops", {}), **fresh.get("gemm_flops", {})},
            "bandwidth": {str(k): v for k, v in (fresh.get("bandwidth") or data.get("bandwidth", {})).items()},
            "method": {**data.get("method", {}), **fresh.get("method", {})},
        }
        _write(path, data)
    return Peaks(
        data.get("device", device),
        {k: float(v) for k, v in data["gemm_flops"].items()},
        {int(k): float(v) for k, v in data["bandwidth"].items()},
        dict(data.get("method", {})),
    )


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else {}


def _write(path: Path, data: dict[str, Any]) -> None:
    """Atomically: a concurrent profile reads the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def best_seconds(run: Callable[[], Any], repeats: int, warmup: int = 2) -> float:
    """The fastest of ``repeats`` timed calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def cpu_copy_bandwidth(nbytes: int, repeats: int = 15, workers: int | None = None) -> float:
    """Bytes per second of copying ``nbytes`` (read + write), one slice per core; numpy releases the GIL.

    Small working sets are copied several times per timed call so that one call takes long enough to time.
    """
    workers = workers or os.cpu_count() or 1
    src = np.ones(max(nbytes // 4, workers), np.float32)
    dst = np.empty_like(src)
    rounds = max(1, (64 << 20) // max(src.nbytes, 1))
    slices = [slice(i * len(src) // workers, (i + 1) * len(src) // workers) for i in range(workers)]
    with ThreadPoolExecutor(workers) as pool:

        def work(part: slice) -> None:
            for _ in range(rounds):
                np.copyto(dst[part], src[part])

        seconds = best_seconds(lambda: list(pool.map(work, slices)), repeats)
    return 2.0 * src.nbytes * rounds / seconds


def gemm_onnx(path: Path, n: int, precision: str) -> Path:
    """``y = x @ W`` (n x n) in ``precision``: fp32, fp16 (casts around it) or int8 (Q/DQ on both operands)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
    nodes, inits, x, w = [], [], "x", "w"
    if precision == "fp16":
        inits.append(numpy_helper.from_array(weight.astype(np.float16), "w"))
        nodes += [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16)]
        nodes += [
            helper.make_node("MatMul", ["x16", "w"], ["y16"]),
            helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT),
        ]
    elif precision in ("int8", "fp8"):
        qtype, zero = (TensorProto.INT8, 0) if precision == "int8" else (TensorProto.FLOAT8E4M3FN, 0)
        inits += [
            numpy_helper.from_array(np.array(0.05, np.float32), "s"),
            helper.make_tensor("z", qtype, [], [zero]),
            numpy_helper.from_array(weight, "w"),
        ]
        for name in ("x", "w"):
            nodes += [
                helper.make_node("QuantizeLinear", [name, "s", "z"], [f"{name}_q"]),
                helper.make_node("DequantizeLinear", [f"{name}_q", "s", "z"], [f"{name}_dq"]),
            ]
        x, w = "x_dq", "w_dq"
        nodes.append(helper.make_node("MatMul", [x, w], ["y"]))
    else:
        inits.append(numpy_helper.from_array(weight, "w"))
        nodes.append(helper.make_node("MatMul", [x, w], ["y"]))
    graph = helper.make_graph(
        nodes,
        f"gemm_{precision}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19 if precision == "fp8" else 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def measure_cpu(precisions: set[str], copy: bool, threads: int = 0, n: int = 512) -> dict[str, Any]:
    """GEMM FLOP/s through the ONNX Runtime backend (fp32 MatMul; int8 as u8 x s8 MatMulInteger) and copy bandwidth."""
    from deploykit.backends.onnxruntime import OnnxRuntimeBackend
    from deploykit.config import BuildConfig

    out: dict[str, Any] = {"gemm_flops": {}, "method": {}}
    backend, options = OnnxRuntimeBackend(), BuildConfig(optimization_level="basic", intra_op_threads=threads)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory(prefix="deploykit-peaks-") as tmp:
        for precision in sorted(precisions & {"fp32", "int8"}):
            folder = Path(tmp) / precision
            folder.mkdir()
            model = _cpu_gemm(folder / "gemm.onnx", n, precision)
            backend.build(model, options, folder)
            session = backend.load(folder)
            feed = {
                s.name: (
                    rng.standard_normal((n, n)).astype(np.float32)
                    if s.dtype == "float32"
                    else rng.integers(0, 255, (n, n), dtype=np.uint8)
                )
                for s in session.inputs
            }
            seconds = best_seconds(session.timed_runner(feed), repeats=30)
            out["gemm_flops"][precision] = 2.0 * n**3 / seconds
            out["method"][f"gemm_{precision}"] = (
                f"{n}x{n}x{n} {'MatMulInteger u8s8' if precision == 'int8' else 'MatMul'}"
                " through the onnxruntime backend, best of 30"
            )
    if copy:
        # One thread and one per core, the faster counts: small copies in threads only contend for the GIL.
        out["bandwidth"] = monotonic(
            {size: max(cpu_copy_bandwidth(size, workers=1), cpu_copy_bandwidth(size)) for size in CPU_COPY_SIZES}
        )
        out["method"]["copy"] = (
            f"numpy copy on 1 and {os.cpu_count()} threads at working sets of "
            f"{', '.join(_size(s) for s in CPU_COPY_SIZES)}, best of 15 (read + write)"
        )
    return out


def monotonic(bandwidth: dict[int, float]) -> dict[int, float]:
    """A smaller working set is never slower than a larger one (a cache is not slower than DRAM): a noisy
    measurement below a larger size's is raised to it."""
    out, floor = {}, 0.0
    for size in sorted(bandwidth, reverse=True):
        floor = max(floor, bandwidth[size])
        out[size] = floor
    return dict(sorted(out.items()))


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def _cpu_gemm(path: Path, n: int, precision: str) -> Path:
    if precision != "int8":
        return gemm_onnx(path, n, precision)
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).integers(-127, 127, (n, n), dtype=np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["x", "w"], ["y"])],
        "gemm_int8",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [n, n])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [n, n])],
        [numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path
