"""Profile an engine folder (either backend) or a config (built first, reusing the store).

``deploykit profile CONFIG|ENGINE`` and ``gate.profile: true`` both end in :func:`profile_engine`.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import ConfigError, ModelError, UsageError
from deploykit.profiling.layers import Layer
from deploykit.profiling.peaks import Peaks, cached_peaks, measure_cpu
from deploykit.profiling.summary import summarize

ENGINE_JSON = "engine.json"  # both backends write one; its "backend" says which


@dataclass(frozen=True)
class ProfileOptions:
    iterations: int = 50  # profiled runs (each layer's time is its median over them)
    warmup: int = 10  # runs before profiling starts (allocations, caches, clocks)
    top: int = 10  # slowest layers listed in the summary
    roofline: bool = True  # measure (once per machine, cached) and add the roofline columns

    def __post_init__(self) -> None:
        if self.iterations < 1 or self.warmup < 0 or self.top < 1:
            raise ConfigError(
                f"profile: iterations must be >= 1, warmup >= 0 and top >= 1 (got {self.iterations}, "
                f"{self.warmup}, {self.top})"
            )


def engine_record(engine_dir: Path) -> dict[str, Any]:
    """``engine.json`` of an engine folder; ModelError when the folder is not one."""
    path = Path(engine_dir) / ENGINE_JSON
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ModelError(
            f"{engine_dir}: not an engine folder (no readable {ENGINE_JSON})",
            hint="pass the folder `deploykit build -o DIR` wrote, or a deploykit.yaml",
        ) from e
    if record.get("backend") not in ("onnxruntime", "tensorrt"):
        raise ModelError(f"{path}: unknown backend {record.get('backend')!r}", hint="rebuild the engine")
    return record


def profile_engine(
    engine_dir: Path,
    feeds: dict[str, np.ndarray],
    options: ProfileOptions = ProfileOptions(),
    *,
    peaks_dir: Path | None = None,
    **facts: Any,
) -> dict[str, Any]:
    """Profile an engine folder on ``feeds``; the report of :func:`deploykit.profiling.summary.summarize`.

    Args:
        engine_dir: a folder written by either backend's build.
        feeds: one array per input.
        options: iterations, warm-up, top-N, roofline.
        peaks_dir: where this machine's peaks are cached (``WORKDIR/peaks``); None measures them afresh.
        **facts: copied into the report (model, batch, ...).
    """
    record = engine_record(engine_dir)
    backend = record["backend"]
    if backend == "tensorrt":
        from deploykit.profiling import tensorrt as runner
    else:
        from deploykit.profiling import ort as runner  # type: ignore[no-redef]
    layers, meta = runner.profile(Path(engine_dir), feeds, options.iterations, options.warmup)
    peaks, note = machine_peaks(record, layers, peaks_dir) if options.roofline else (None, "turned off (--no-roofline)")
    return summarize(
        layers,
        peaks,
        top=options.top,
        backend=backend,
        iterations=options.iterations,
        warmup=options.warmup,
        **meta,
        **facts,
        **({"roofline_note": note} if note else {}),
    )


def machine_peaks(record: dict[str, Any], layers: list[Layer], peaks_dir: Path | None) -> tuple[Peaks | None, str]:
    """This machine's ceilings for the engine's backend (cached), or (None, why there are none)."""
    from deploykit.store.environment import device_fingerprint, onnxruntime_version

    needed = {layer.precision for layer in layers if layer.precision}
    if record["backend"] == "tensorrt":
        from deploykit.backends.trt_compat import parse_compute_capability
        from deploykit.profiling.tensorrt import gpu_peaks_key, measure_gpu

        measurable = {"fp32", "fp16", "int8"} | (
            {"fp8"} if parse_compute_capability(record.get("compute_capability", "0.0")) >= (8, 9) else set()
        )
        key, device = gpu_peaks_key(record), f"{record.get('gpu', 'GPU')} (TensorRT {record.get('tensorrt', '?')})"
        measure = measure_gpu
    else:
        if record.get("provider", "cpu") != "cpu":
            return None, (
                "ONNX Runtime's CUDA provider times nodes on the host, and GPU peaks are measured "
                "through TensorRT: profile a tensorrt engine for the GPU roofline"
            )
        threads = int(record.get("intra_op_threads", 0))
        fingerprint = device_fingerprint()
        key = {
            "backend": "onnxruntime",
            "device": fingerprint,
            "cores": os.cpu_count(),
            "threads": threads,
            "onnxruntime": onnxruntime_version(),
            "measured_with": "deploykit.peaks/1",
        }
        device = f"{fingerprint['model']} ({os.cpu_count()} cores, onnxruntime threads {threads or 'default'})"
        measurable = {"fp32", "int8"}

        def measure(precisions: set[str], copy: bool) -> dict[str, Any]:
            return measure_cpu(precisions, copy, threads)

    if peaks_dir is None:
        with tempfile.TemporaryDirectory(prefix="deploykit-peaks-") as tmp:
            return cached_peaks(Path(tmp), key, device, needed, measure, measurable), ""
    return cached_peaks(Path(peaks_dir), key, device, needed, measure, measurable), ""


MAX_FEED_BYTES = 1 << 30  # an engine folder has no config (limits.max_input_mib): the same default bound


def engine_feeds(
    engine_dir: Path, dims: dict[str, int], seed: int = 0, batch: int | None = None
) -> dict[str, np.ndarray]:
    """Random inputs for an engine folder alone: fixed dims as built, named dims from ``dims`` (else the
    TensorRT profile's opt, else 1); ``batch`` sets every input's leading dim, and is refused (UsageError)
    where the engine cannot take it: a fixed leading dim of another size, past a TensorRT profile's
    range, or an input larger than 1 GiB."""
    from deploykit.graph.feeds import NP_DTYPES

    record, rng = engine_record(engine_dir), np.random.default_rng(seed)
    specs = _tensorrt_inputs(record) if record["backend"] == "tensorrt" else _onnx_inputs(Path(engine_dir))
    feeds = {}
    for name, dtype, shape, opt in specs:
        sizes = [
            d if isinstance(d, int) and d > 0 else dims.get(str(d), opt[i] if opt else 1) for i, d in enumerate(shape)
        ]
        np_dtype = np.dtype(NP_DTYPES.get(dtype, dtype))
        if batch is not None and shape:
            sizes[0] = _engine_batch(engine_dir, name, shape[0], batch, _profile_range(record, name))
            if int(np.prod(sizes)) * np_dtype.itemsize > MAX_FEED_BYTES:
                raise UsageError(
                    f"--batch {batch}: input {name!r} would be {sizes} ({np_dtype.name}), "
                    f"more than {MAX_FEED_BYTES >> 20} MiB",
                    hint="profile at a smaller batch",
                )
        feeds[name] = (
            rng.standard_normal(sizes).astype(np_dtype)
            if np.issubdtype(np_dtype, np.floating)
            else rng.integers(0, 16, sizes).astype(np_dtype)
        )
    return feeds


def _engine_batch(engine_dir: Path, name: str, lead: Any, batch: int, span: tuple[int, int] | None) -> int:
    """``batch`` for input ``name`` whose leading dim is ``lead``, or UsageError saying why not."""
    if batch < 1:
        raise UsageError(f"--batch {batch}: a batch is at least 1")
    if isinstance(lead, int) and lead > 0 and lead != batch:
        raise UsageError(
            f"--batch {batch}: input {name!r} of {engine_dir} has a fixed batch of {lead}",
            hint=f"profile at --batch {lead}, or build the engine with a dynamic batch (--dim)",
        )
    if span is not None and not span[0] <= batch <= span[1]:
        raise UsageError(
            f"--batch {batch}: outside input {name!r}'s optimization profile [{span[0]}, {span[1]}]",
            hint="profile within it, or rebuild with a wider profile",
        )
    return batch


def _profile_range(record: dict[str, Any], name: str) -> tuple[int, int] | None:
    """The leading dim's [min, max] in a TensorRT engine's optimization profile (None: no profile)."""
    for io in record.get("io", []):
        profile = io.get("profile") or {}
        if io.get("name") == name and profile.get("min") and profile.get("max"):
            return int(profile["min"][0]), int(profile["max"][0])
    return None


def _tensorrt_inputs(record: dict[str, Any]) -> list[tuple[str, str, list[Any], list[int]]]:
    names = record.get("onnx_dims", {})
    out = []
    for io in record.get("io", []):
        if io.get("mode") == "input":
            symbolic = names.get(io["name"], io["shape"])
            shape = [d if d >= 0 else (symbolic[i] if i < len(symbolic) else -1) for i, d in enumerate(io["shape"])]
            out.append((io["name"], io["dtype"], shape, (io.get("profile") or {}).get("opt", [])))
    return out


def _onnx_inputs(engine_dir: Path) -> list[tuple[str, str, list[Any], list[int]]]:
    from onnx import helper

    from deploykit.backends.onnxruntime import ENGINE_MODEL
    from deploykit.graph.files import load_model
    from deploykit.graph.proto import graph_input_shapes

    model = load_model(engine_dir / ENGINE_MODEL, load_external=False)
    types = {vi.name: helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name for vi in model.graph.input}
    return [(name, types[name], list(shape), []) for name, shape in graph_input_shapes(model).items()]
