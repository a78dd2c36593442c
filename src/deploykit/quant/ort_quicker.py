"""Faster twins of helpers inside ONNX Runtime's quantizer, installed on deploykit's private import of it.

Each computes what ORT's own helper computes, to the byte (``tests/quant/test_onnxruntime_flavour.py``
compares both on models built in code; the four public models gave the same SHA-256 of the placed
graph), and leaves every case it does not cover to ORT's helper. They exist because the placer and
its pre-processing are Python loops over nodes and channels that took seconds on a real ViT-S:

* ``ONNXModel.replace_input_of_all_nodes`` calls a Python loop over each node's inputs for every
  node, once per quantized tensor: on ViT-S (654 nodes, 721 calls) 934,435 calls and 2.1 of the
  placer's 6.5 s.
* ``load_model_with_shape_infer`` runs ONNX shape inference on a saved copy of the file and reads the
  result back: 1.3 s on the 96 MB ViT-S where the same inference in memory takes 0.3 s (0.05 s without
  the weights' data, :func:`~deploykit.graph.proto.shapes_inferred`).
* Per-channel weight scales and the quantized weights are computed one channel at a time (42,833
  calls each on ViT-S): per-channel placement cost 1.8 s more than per-tensor there, 0.4 s on the
  1-s recognizer.
* ``quant_pre_process`` saves and reads the model five times (:func:`preprocess_in_memory`).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.graph.proto import shapes_inferred

if TYPE_CHECKING:
    import onnx

# ONNX's in-memory shape inference refuses a model of 2 GB or more; those keep ORT's file round trip.
IN_MEMORY_SHAPES = 1 << 30
_HANDED: dict[str, onnx.ModelProto] = {}  # path -> the model ORT's quantizer reads there instead (handed)


def install(package: ModuleType) -> None:
    """Put the faster helpers into ``package``, a private import of ``onnxruntime.quantization``."""
    model_class = package.onnx_model.ONNXModel
    namespace = package.quantize_static.__globals__  # the private onnxruntime.quantization.quantize module
    by_file = namespace["load_model_with_shape_infer"]
    metadata = by_file.__globals__["add_infer_metadata"]  # its quant_utils module

    def replace_input_of_all_nodes(self: Any, old: str, new: str) -> None:
        for node in self.model.graph.node:
            if old in node.input:
                for j, name in enumerate(node.input):
                    if name == old:
                        node.input[j] = new

    def load_model_with_shape_infer(path: Path) -> onnx.ModelProto:
        import onnx

        given = _HANDED.get(str(path))
        if given is None and Path(path).stat().st_size >= IN_MEMORY_SHAPES:
            return by_file(path)
        model = shapes_inferred(given if given is not None else onnx.load(str(path)))  # a new model either way
        metadata(model)
        return model

    model_class.replace_input_of_all_nodes = replace_input_of_all_nodes
    load_model_with_shape_infer.reads_handed = True  # type: ignore[attr-defined]
    namespace["load_model_with_shape_infer"] = load_model_with_shape_infer
    qdq = package.qdq_quantizer
    quantizer = qdq.QDQQuantizer
    quantizer._calc_initializer_quant_params = _per_channel_params(quantizer._calc_initializer_quant_params, qdq)
    qdq.quantize_onnx_initializer = _per_channel_weights(qdq.quantize_onnx_initializer, qdq)


@contextlib.contextmanager
def handed(path: Path, model: onnx.ModelProto, quantize_static: Callable[..., Any]) -> Iterator[None]:
    """Within this block ``quantize_static`` (of a private import with :func:`install`'s loader), given
    ``path``, reads ``model`` from memory: the file is never written (saving ViT-S's 96 MB for the
    quantizer to read back cost 0.4 s). A model too large to infer its shapes in memory, or a quantizer
    with ORT's own loader, gets the file."""
    import onnx

    from deploykit.graph.proto import initializer_bytes

    loader = quantize_static.__globals__["load_model_with_shape_infer"]
    if not getattr(loader, "reads_handed", False) or initializer_bytes(model) >= IN_MEMORY_SHAPES:
        onnx.save_model(model, str(path))
        yield
        return
    _HANDED[str(path)] = model
    try:
        yield
    finally:
        del _HANDED[str(path)]


def _integer_types() -> tuple[int, ...]:
    from onnx import TensorProto

    return (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16)


def _per_channel_params(original: Callable[[Any], dict[str, Any]], qdq: ModuleType) -> Callable[[Any], dict[str, Any]]:
    """``QDQQuantizer._calc_initializer_quant_params`` with per-channel integer weight scales computed
    for all channels at once; tensors with overrides, other types or a minimum range go to ORT's."""

    def calc(self: Any) -> dict[str, Any]:
        initializers: dict[str, Any] = {}
        for init in self.model.initializer():
            initializers.setdefault(init.name, init)  # ORT's find_by_name takes the first
        fast = {}
        for name, info in self.tensors_to_quantize.items():
            params = _channel_params(self, qdq, initializers.get(name), info)
            if params is not None:
                fast[name] = params
        if not fast:
            return original(self)
        every = self.tensors_to_quantize
        self.tensors_to_quantize = {k: v for k, v in every.items() if k not in fast}
        try:
            rest = original(self)
        finally:
            self.tensors_to_quantize = every
        return {k: fast[k] if k in fast else rest[k] for k in every if k in fast or k in rest}

    return calc


def _channel_params(self: Any, qdq: ModuleType, initializer: Any, info: Any) -> Any:
    """ORT's ``compute_data_quant_params`` per channel (symmetric, as ORT always quantizes per-channel
    weights), vectorized over the channels; None where this twin does not apply."""
    if (
        initializer is None
        or info.tensor_type is not qdq.QDQQuantTensorType.WEIGHT
        or info.axis is None
        or initializer.name in self.tensor_quant_overrides.overrides
        or self.weight_qType not in _integer_types()
        or self.min_real_range is not None
    ):
        return None
    data = qdq.tensor_proto_to_array(initializer)
    valid, axis = qdq.normalize_axis(info.axis, data.ndim)
    if not valid or data.dtype != np.float32 or data.size == 0:
        return None  # ORT's raises on a bad axis, and handles the rest
    qmin, qmax = qdq.get_qmin_qmax_for_qType(self.weight_qType, self.reduce_range, symmetric=True)
    per = np.moveaxis(data, axis, 0).reshape(data.shape[axis], -1)
    rmin = np.minimum(per.min(axis=1), np.float32(0))
    rmax = np.maximum(per.max(axis=1), np.float32(0))
    absmax = np.maximum(np.abs(rmin), np.abs(rmax))
    scale = (absmax - (-absmax)).astype(np.float64) / (np.float64(qmax) - np.float64(qmin))
    tiny = scale < np.finfo(np.float32).tiny
    middle = np.array(np.round((qmin + qmax) / np.array(2.0, dtype=np.float64)), dtype=qmin.dtype)
    zero_point = np.where(tiny, np.array(0, dtype=qmin.dtype), middle).astype(qmin.dtype)
    scale = np.where(tiny, np.float32(1.0), scale.astype(np.float32)).astype(np.float32)
    return qdq.QuantizationParams(zero_point=zero_point, scale=scale, quant_type=self.weight_qType, axis=axis)


def _per_channel_weights(original: Callable[..., Any], qdq: ModuleType) -> Callable[..., Any]:
    """``quantize_onnx_initializer`` with a per-channel integer weight quantized in one array operation
    (the same float32 division, rounding and clipping as ORT's ``quantize_nparray`` per channel)."""
    suffix = original.__globals__["TENSOR_NAME_QUANT_SUFFIX"]  # its quant_utils module

    def quantize(
        weight: Any,
        quant_type: int,
        zero_point: Any,
        scale: Any,
        axis: int | None = None,
        quant_weight_name: str | None = None,  # ORT's parameter names: its callers may pass keywords
        **newer: Any,  # parameters of newer ORT releases (block_size): theirs to handle
    ) -> Any:
        import onnx

        data = qdq.tensor_proto_to_array(weight) if axis is not None and quant_type in _integer_types() else None
        if newer or data is None or data.dtype != np.float32 or np.asarray(scale).dtype != np.float32:
            return original(weight, quant_type, zero_point, scale, axis, quant_weight_name, **newer)
        shape = [1] * data.ndim
        shape[axis] = data.shape[axis]
        qmin, qmax = qdq.get_qmin_qmax_for_qType(quant_type, reduce_range=False, symmetric=False)
        values = (data / np.asarray(scale).reshape(shape)).round() + np.asarray(zero_point).reshape(shape)
        np.clip(values, qmin, qmax, out=values)
        quantized = values.astype(qdq.ONNX_TYPE_TO_NP_TYPE[quant_type]).reshape(weight.dims)
        return onnx.numpy_helper.from_array(quantized, quant_weight_name or f"{weight.name}{suffix}")

    return quantize


def preprocess_in_memory(package: ModuleType, model: onnx.ModelProto) -> onnx.ModelProto | None:
    """What ``quant_pre_process`` computes with symbolic inference on, without its file round trips
    (ViT-S, 96 MB: 2.4 s against 1.5 s here); None where a step fails or the model takes another of its
    branches (opset 10 or lower, 1 GiB or more): the caller then runs ORT's function, which handles that."""
    import onnx

    from deploykit.graph.proto import initializer_bytes

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset <= 10 or initializer_bytes(model) >= IN_MEMORY_SHAPES:  # ByteSize serializes it all: 0.19 s on ViT-S
        return None
    namespace = package.quant_pre_process.__globals__  # its shape_inference module
    ort = namespace["onnxruntime"]
    with tempfile.TemporaryDirectory(prefix="deploykit-ortq-") as tmp, contextlib.chdir(tmp):
        try:  # a failing symbolic inference writes sym_shape_infer_temp.onnx into the working directory
            inferred = namespace["SymbolicShapeInference"].infer_shapes(model, 2**31 - 1, False, False, 0)
        except Exception:  # shapes it cannot complete: ORT's function retries without it, and says so
            return None
        optimized = Path(tmp) / "optimized.onnx"
        options = ort.SessionOptions()
        options.optimized_model_filepath = str(optimized)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        try:
            ort.InferenceSession(inferred.SerializeToString(), options, providers=["CPUExecutionProvider"])
        except Exception:  # ORT's function logs it and goes on without the optimizer
            return None
        out = shapes_inferred(onnx.load(str(optimized)))
    namespace["add_pre_process_metadata"](out)
    return out
