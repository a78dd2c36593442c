"""The ``onnxruntime`` flavour: QDQ that ONNX Runtime's CPU kernels run fast (ORT's own quantizer).

INT8: unsigned asymmetric activations (measured about 10x more accurate than symmetric on a small
CNN), signed symmetric per-channel weights, ``reduce_range`` on CPUs without VNNI (their u8s8
kernels saturate otherwise: rel-L2 0.19 as computed vs 0.016 as written). The activation ranges
are deploykit's streamed ranges, handed over as ``TensorQuantOverrides`` (rmin/rmax), so ORT
derives scales, zero points and the int32 bias scales consistently from them; its own calibration
runs on one replayed sample only. ORT drops a Relu in front of an asymmetric uint8 QuantizeLinear,
which is exact there (the zero point clamps); for a symmetric FP8 type it would not be, which is
one reason FP8 exists only as the tensorrt flavour (the other: ORT's QLinearConv rejects float8).

ModelOpt patches ``onnxruntime.quantization`` process-wide (its registries and calibrators), and
code outside deploykit may call it without restoring anything; this flavour therefore runs on a
private import of the package (:func:`private_ort_quantization`) that no patch reaches, so its
result does not depend on what ran before it in the process.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.errors import ModelError
from deploykit.quant.ranges import TensorRange

if TYPE_CHECKING:
    import onnx


def resolve_reduce_range(setting: str) -> bool:
    """``on``/``off`` as given; ``auto``: on for x86 CPUs without VNNI (AVX2-only u8s8 saturates)."""
    if setting != "auto":
        return setting == "on"
    from deploykit.environment import cpu_info

    info = cpu_info()
    features = set(info["features"])  # type: ignore[arg-type]
    x86 = str(info["machine"]).lower() in ("x86_64", "amd64", "i686", "x86")
    return x86 and not features & {"avx512_vnni", "avx_vnni", "amx_int8"}


@functools.cache
def private_ort_quantization() -> ModuleType:
    """A fresh import of ``onnxruntime.quantization``, kept out of ``sys.modules`` (and so out of
    reach of ModelOpt's monkey patches); the public package is left exactly as it was."""
    import onnxruntime

    def ours(name: str) -> bool:
        return name == "onnxruntime.quantization" or name.startswith("onnxruntime.quantization.")

    public = {k: v for k, v in sys.modules.items() if ours(k)}
    attribute = getattr(onnxruntime, "quantization", None)
    for name in public:
        del sys.modules[name]
    try:
        fresh = importlib.import_module("onnxruntime.quantization")
    finally:
        for name in [k for k in sys.modules if ours(k)]:
            del sys.modules[name]
        sys.modules.update(public)
        if attribute is not None:
            onnxruntime.quantization = attribute
        elif hasattr(onnxruntime, "quantization"):
            del onnxruntime.quantization
    return fresh


@contextlib.contextmanager
def _working_dir(path: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def preprocess(model: onnx.ModelProto, notes: list[str]) -> onnx.ModelProto:
    """ORT's quant_pre_process (symbolic shapes, basic graph fusions); symbolic inference is
    skipped where it fails (dims it cannot merge), and the note says so."""
    import onnx

    quant_pre_process = private_ort_quantization().quant_pre_process
    with tempfile.TemporaryDirectory(prefix="deploykit-ortq-") as tmp, _working_dir(Path(tmp)):
        # ORT's symbolic shape inference writes sym_shape_infer_temp.onnx into the working directory.
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
        onnx.save_model(model, str(src))
        try:
            quant_pre_process(str(src), str(dst))
        except Exception as e:  # symbolic shape inference raises on shapes it cannot complete
            notes.append(f"symbolic shape inference failed ({str(e).strip().splitlines()[0][:120]}); "
                         "pre-processed without it")
            try:
                quant_pre_process(str(src), str(dst), skip_symbolic_shape=True)
            except Exception as e2:
                raise ModelError(f"ONNX Runtime cannot pre-process the model for quantization: "
                                 f"{str(e2).strip().splitlines()[0]}") from e2
        return onnx.load(str(dst))


def quantize(model: onnx.ModelProto, sample: dict[str, np.ndarray], ranges: dict[str, TensorRange], *,
             exclude: list[str], per_channel: bool, reduce_range: bool) -> onnx.ModelProto:
    """An INT8 QDQ graph from ``onnxruntime.quantization.quantize_static`` with deploykit's ranges.

    Args:
        model: the pre-processed FP32 graph the ranges were computed on.
        sample: one calibration sample (ORT insists on calibrating; the ranges override it).
        ranges: calibrated ranges by tensor name.
        exclude: node names left unquantized.
        per_channel: per-channel weight scales.
        reduce_range: 7-bit weights (see :func:`resolve_reduce_range`).
    """
    import onnx

    from deploykit.quant.reader import replay_reader

    ortq = private_ort_quantization()
    quantize_static, QuantType = ortq.quantize_static, ortq.QuantType  # noqa: N806 (ORT's enum)
    with tempfile.TemporaryDirectory(prefix="deploykit-ortq-") as tmp:
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
        onnx.save_model(model, str(src))
        try:
            quantize_static(str(src), str(dst), replay_reader([sample]), quant_format=ortq.QuantFormat.QDQ,
                            per_channel=per_channel, reduce_range=reduce_range, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8, nodes_to_exclude=list(exclude),
                            extra_options=overrides(ranges, model), calibrate_method=ortq.CalibrationMethod.MinMax,
                            calibration_providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT raises bare ValueError/RuntimeError
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"ONNX Runtime's quantizer failed: {first}",
                             hint="exclude the node it names (quantize.exclude_nodes) or try --target tensorrt") from e
        return onnx.load(str(dst))


def overrides(ranges: dict[str, TensorRange], model: onnx.ModelProto) -> dict[str, Any]:
    """ORT's extra_options: asymmetric activations whose ranges are deploykit's (rmin <= 0 <= rmax)."""
    inits = {i.name for i in model.graph.initializer}
    per_tensor = {name: [{"rmin": np.float32(min(r.lo, 0.0)), "rmax": np.float32(max(r.hi, 0.0))}]
                  for name, r in ranges.items() if name not in inits}
    return {"TensorQuantOverrides": per_tensor, "ActivationSymmetric": False, "WeightSymmetric": True}
