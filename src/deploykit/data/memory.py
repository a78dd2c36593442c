"""Models and samples handed to the Python API as objects, not files.

``deploykit.convert(module, ...)`` takes a ``torch.nn.Module`` or an ``onnx.ModelProto`` a notebook
holds, and calibration or validation samples as an iterable, a DataLoader or a stacked array. The
config then names them by content: an :class:`InMemoryModel` is identified by what was exported
(the ONNX bytes) and the weights' digest, an :class:`InMemorySamples` by the digest of its arrays,
so a rerun of the same objects in the next cell reuses every artifact, and a changed weight,
forward() or sample makes new ones. Only their digests are dataclass fields (what ``canonical``,
``config show`` and equality see); the objects themselves ride along as private attributes.
"""

from __future__ import annotations

import hashlib
import itertools
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from deploykit.errors import DataError, UsageError


@dataclass(frozen=True)
class InMemoryModel:
    """A ``torch.nn.Module`` or an ``onnx.ModelProto`` passed as an object (``source`` of a config
    built by :func:`deploykit.convert`; a YAML file cannot name one)."""

    kind: Literal["torch", "onnx"]
    label: str  # what the user knows it as: "Net (torch.nn.Module in memory)"
    weights: str  # sha256 of the state_dict (torch) or of the serialized model (onnx)

    @classmethod
    def of(cls, obj: Any) -> InMemoryModel:
        """Wrap a module or a ModelProto; a module's weights are hashed now (its digest is its identity)."""
        if _is_onnx(obj):
            data = serialized_onnx(obj)
            holder = cls(
                "onnx", f"{obj.graph.name or 'model'} (onnx.ModelProto in memory)", hashlib.sha256(data).hexdigest()
            )
            object.__setattr__(holder, "_object", obj)
            object.__setattr__(holder, "_bytes", data)
            return holder
        holder = cls("torch", f"{type(obj).__name__} (torch.nn.Module in memory)", state_digest(obj))
        object.__setattr__(holder, "_object", obj)
        object.__setattr__(holder, "_exports", {})
        return holder

    @property
    def object(self) -> Any:
        """The module or ModelProto itself."""
        try:
            return self._object  # type: ignore[attr-defined]
        except AttributeError:
            raise UsageError(
                f"source.memory {self.label}: the object is not in this process",
                hint="pass the model itself to deploykit.convert(model, ...)",
            ) from None

    @property
    def onnx_bytes(self) -> bytes:
        """The serialized ModelProto (``kind == "onnx"``)."""
        return self._bytes  # type: ignore[attr-defined]

    def exported(self, key: str, export: Callable[[], tuple[Any, str, str]]) -> tuple[Any, str, str, str]:
        """``export()``'s (ModelProto, exporter, fallback reason) for one export recipe ``key``, run once
        per recipe in this process, and the sha256 of the ONNX bytes it made."""
        cache = self._exports  # type: ignore[attr-defined]
        if key not in cache:
            model, exporter, reason = export()
            cache[key] = (model, exporter, reason, hashlib.sha256(model.SerializeToString()).hexdigest())
        return cache[key]


@dataclass(frozen=True)
class InMemorySamples:
    """Samples passed as Python objects (``calibration=`` / ``validation=``), read once into a list
    of ``{input: array}`` with the model's batch axis, identified by the digest of those arrays."""

    digest: str
    count: int

    @property
    def samples(self) -> list[dict[str, np.ndarray]]:
        return self._samples  # type: ignore[attr-defined]


def _is_onnx(obj: Any) -> bool:
    return type(obj).__name__ == "ModelProto" and hasattr(obj, "graph") and hasattr(obj, "SerializeToString")


def is_model_object(obj: Any) -> bool:
    """A torch.nn.Module or an onnx.ModelProto (checked without importing torch when it is neither)."""
    if _is_onnx(obj):
        return True
    import sys

    torch = sys.modules.get("torch")  # a module object exists only where torch was imported
    return torch is not None and isinstance(obj, torch.nn.Module)


def serialized_onnx(model: Any) -> bytes:
    """The bytes of an in-memory ModelProto; one that refers to external data files is refused (the
    files would be looked up beside nothing)."""
    from onnx.external_data_helper import uses_external_data

    for tensor in model.graph.initializer:
        if uses_external_data(tensor):
            raise UsageError(
                f"model: initializer {tensor.name!r} of the onnx.ModelProto refers to external data",
                hint="load it with onnx.load(path) (external data included), or pass the .onnx path",
            )
    try:
        return model.SerializeToString()
    except ValueError as e:  # protobuf's 2 GB limit
        raise UsageError(
            f"model: the onnx.ModelProto cannot be serialized ({e})",
            hint="save it with external data and pass the .onnx path",
        ) from e


def state_digest(module: Any) -> str:
    """sha256 over the module's state_dict: every name, dtype, shape and byte, in name order."""
    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        if not isinstance(tensor, torch.Tensor):
            h.update(f"{name}={tensor!r};".encode())
            continue
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{list(t.shape)};".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


# -- samples ----------------------------------------------------------------------------------------


def samples_from(data: Any, inputs: list[Any], what: str, limit: int) -> InMemorySamples:
    """Read ``data`` (an iterable of arrays/tensors/tuples/dicts, a DataLoader, or one array stacked on
    its first axis) into at most ``limit`` samples for the model ``inputs`` (``data.InputInfo``).

    An item is a dict keyed by input name, one array for a one-input model, or a tuple/list whose first
    items feed the inputs in order (a DataLoader's ``(images, labels)``: the labels are ignored). An
    array whose first axis is not the model's batch (a DataLoader's batch of 32 for a batch-1 model, a
    stacked ``[64, 3, H, W]``) is split into samples along it.
    """
    from deploykit.data.stacking import unstack

    shapes = {i.name: i.shape for i in inputs}
    batches = {i.name: i.batch_range for i in inputs if i.batch_range}
    out: list[dict[str, np.ndarray]] = []
    h = hashlib.sha256()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # splitting a DataLoader's batches into samples is what is asked
        for i, item in enumerate(_items(data, what)):
            sample = _as_sample(item, inputs, f"{what}[{i}]")
            for _, s in unstack(sample, shapes, f"{what}[{i}]", what, batches):
                out.append(s)
                for name in sorted(s):
                    arr = np.ascontiguousarray(s[name])
                    h.update(f"{name}:{arr.dtype.str}:{list(arr.shape)};".encode())
                    h.update(arr.tobytes())
                if len(out) >= limit:
                    break
            if len(out) >= limit:
                break
    if not out:
        raise DataError(f"{what}=: the iterable yields no samples", hint=f"pass at least one sample as {what}=")
    holder = InMemorySamples(h.hexdigest(), len(out))
    object.__setattr__(holder, "_samples", out)
    return holder


def _items(data: Any, what: str) -> Iterator[Any]:
    if isinstance(data, (np.ndarray, Mapping)) or _is_tensor(data):
        yield data  # one array (a stack of samples) or one sample keyed by input name
        return
    if isinstance(data, (str, bytes)) or not isinstance(data, Iterable):
        raise UsageError(
            f"{what}=: expected an iterable of samples (arrays, tensors, tuples or dicts), a "
            f"DataLoader, or one stacked array; got {type(data).__name__}",
            hint=f"a folder or file goes in as {what}={{'folder': 'images/'}} or {{'files': 'data.npz'}}",
        )
    items = iter(data)
    for i in itertools.count():
        try:
            item = next(items)
        except StopIteration:
            return
        except Exception as e:  # the user's iterable failed: name it, not a deploykit bug
            raise DataError(f"{what}=: the iterable raised {type(e).__name__} at item {i}: {e}") from e
        yield item


def _as_sample(item: Any, inputs: list[Any], where: str) -> dict[str, np.ndarray]:
    names = [i.name for i in inputs]
    if isinstance(item, Mapping):
        unknown = sorted(set(map(str, item)) - set(names))
        if unknown:
            raise DataError(f"{where}: no model input named {unknown[0]!r}; the inputs are {', '.join(names)}")
        return {str(k): _array(v, f"{where}[{k!r}]") for k, v in item.items()}
    if isinstance(item, (tuple, list)):
        if len(item) < len(names):
            raise DataError(
                f"{where}: {len(item)} value(s) for {len(names)} inputs ({', '.join(names)})",
                hint="give one value per input, in order, or a dict keyed by input name",
            )
        return {n: _array(v, f"{where}[{k}]") for k, (n, v) in enumerate(zip(names, item, strict=False))}
    if len(names) != 1:
        raise DataError(
            f"{where}: one array for a model with inputs {', '.join(names)}",
            hint="give a tuple (one value per input, in order) or a dict keyed by input name",
        )
    return {names[0]: _array(item, where)}


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach") and hasattr(value, "numpy")


def _array(value: Any, where: str) -> np.ndarray:
    if _is_tensor(value):
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            raise DataError(f"{where}: a bfloat16 tensor", hint="convert it with .float() (numpy has no bfloat16)")
        return value.numpy()
    arr = np.asarray(value)
    if arr.dtype == object:
        raise DataError(
            f"{where}: not a numeric array ({type(value).__name__})", hint="give numpy arrays or torch tensors"
        )
    return arr


__all__ = ["InMemoryModel", "InMemorySamples", "is_model_object", "samples_from", "state_digest"]
