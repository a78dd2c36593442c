"""ONNX files: read and write them safely (external data stays inside the model's folder), check them.

A model below 2 GB is written as one self-contained file; above, its weights go to one ``.data``
file beside it, and a copy always takes that file along. External data that points outside the
model's folder (an absolute path, ``..``) is refused: an untrusted model stays data.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.errors import ModelError, first_line

if TYPE_CHECKING:
    import onnx

PROTO_LIMIT = 2**31 - 1  # protobuf cannot serialize a message this large; larger models go through a file
# Initializers this large reach an in-memory session as arrays beside the graph's bytes (session_source);
# the small ones (scales, shapes ONNX Runtime reads while it loads the graph) stay in the bytes.
APART_BYTES = 64 * 1024
_ARRAY_TYPES = {1: "<f4", 2: "u1", 3: "i1", 5: "<i2", 6: "<i4", 7: "<i8", 10: "<f2", 11: "<f8"}  # TensorProto codes


def load_model(path: Path, *, load_external: bool = True) -> onnx.ModelProto:
    """Parse an ONNX file; refuse what would crash native code (see :mod:`deploykit.safety.onnxguard`) and
    external data that points outside the model's folder or beyond its file."""
    import onnx
    from google.protobuf.message import DecodeError

    from deploykit.safety.onnxguard import check_structure

    if not path.is_file():
        raise ModelError(f"{path}: no such ONNX file", hint="check the path in the config or on the command line")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError, RecursionError) as e:
        raise ModelError(
            f"{path}: not a readable ONNX model ({first_line(e)})",
            hint="the file may be truncated or not ONNX; re-export it",
        ) from e
    except OSError as e:
        raise ModelError(f"{path}: cannot read the ONNX file ({e.strerror or type(e).__name__})") from e
    if not model.graph.node and not model.graph.output:
        raise ModelError(
            f"{path}: parsed as ONNX but holds no graph (truncated or not an ONNX file?)", hint="re-export the model"
        )
    check_structure(model, path)
    external_data_files(model, path)  # every reference checked before anything reads one
    if load_external:
        try:
            onnx.load_external_data_for_model(model, str(path.parent))
        except (onnx.checker.ValidationError, OSError, ValueError) as e:
            raise ModelError(
                f"{path}: cannot load its external data ({first_line(e)})",
                hint="copy the model together with its .data file",
            ) from e
    return model


def external_data_files(model: onnx.ModelProto, path: Path) -> list[Path]:
    """The external-data files a model refers to, each checked (inside the model's folder, not a
    link, offsets within the file)."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    from deploykit.safety.onnxguard import check_external_data

    folder = path.parent.resolve()
    files = {check_external_data(path, t, folder) for t in _get_all_tensors(model) if uses_external_data(t)}
    return sorted(files)


def check_model(model: onnx.ModelProto, path: Path, repairs: list[Any] | None = None) -> onnx.ModelProto:
    """Run the ONNX checker and strict shape inference; return the model with inferred shapes.

    With a ``repairs`` list, output declarations that inference contradicts are first repaired to the
    inferred ones (:mod:`deploykit.graph.declared`) and each repair is appended to the list.
    """
    import onnx

    from deploykit.graph.proto import graph_problems
    from deploykit.safety.nativeprobe import probe

    problems = graph_problems(model.graph)  # the checker's own message for these loses the node name
    if problems:
        raise ModelError(
            f"{path}: invalid ONNX graph: {problems[0]}",
            hint="fix the exporter or the graph; `deploykit inspect` shows the graph",
        )
    probe(model, path)  # a crash in onnx's C++ is refused here, not suffered
    if repairs is not None:
        from deploykit.graph import declared

        model, found = declared.repair(model)  # after the probe: inference is native code too
        repairs += found
    try:
        if model.ByteSize() < PROTO_LIMIT:
            onnx.checker.check_model(model, full_check=False)
            return onnx.shape_inference.infer_shapes(model, strict_mode=True)
        onnx.checker.check_model(str(path))
        return model
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ModelError(
            f"{path}: invalid ONNX model: {first_line(e)}",
            hint="fix the exporter or the graph; `deploykit inspect` shows the graph",
        ) from e


def save_model(model: onnx.ModelProto, path: Path) -> list[Path]:
    """Write one self-contained file, or file + ``.data`` beside it when over 2 GB; return what was written."""
    import onnx

    if model.ByteSize() < PROTO_LIMIT:
        onnx.save_model(model, str(path))
        return [path]
    data = path.with_suffix(".onnx.data")
    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data.name,
        size_threshold=1024,
    )
    return [path, data]


def copy_model_files(src: Path, dst: Path) -> None:
    """Copy a model with its external data files, keeping their relative names."""
    import onnx

    model = onnx.load(str(src), load_external_data=False)
    shutil.copyfile(src, dst)
    for f in external_data_files(model, src):
        target = dst.parent / f.relative_to(src.parent.resolve())
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, target)


def uses_file(model: onnx.ModelProto) -> bool:
    """Whether the model must go through a file: too large for protobuf, or marked for external data."""
    return proto_bytes(model) is None


def proto_bytes(model: onnx.ModelProto) -> bytes | None:
    """The model's serialized bytes, or None where it must go through a file (:func:`uses_file`).
    One serialization: ``ByteSize`` serializes the whole model too (upb), which doubled the cost of
    every session the mixed-precision search opened (17 of 144 s on a 549-group transformer)."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    if any(uses_external_data(t) for t in _get_all_tensors(model)):
        return None
    try:
        data = model.SerializeToString()
    except ValueError:  # over protobuf's 2 GB
        return None
    return data if len(data) < PROTO_LIMIT else None


def session_source(model: onnx.ModelProto) -> tuple[bytes | None, dict[str, Any]]:
    """What an in-memory session opens ``model`` from: the graph's bytes with its large weights left
    out (each an external-data reference), and those weights as arrays by name, which ONNX Runtime
    puts back before it optimizes (``SessionOptions.add_external_initializers``; the same graph, the
    same outputs). Serializing every weight and parsing it again cost 0.2 of the 0.4 s of each session
    the mixed-precision search opened on a 549-group transformer. A reference to a :class:`Held`
    weight is handed over as its array. None where the model must go through a file (:func:`uses_file`)."""
    import onnx
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    from deploykit.graph.proto import without_initializers

    weights = {}
    for tensor in _get_all_tensors(model):
        if uses_external_data(tensor):
            held = _held(tensor)
            if held is None:
                return None, {}
            weights[tensor.name] = held

    stub, heavy = without_initializers(model, _apart)
    for tensor in heavy:
        weights[tensor.name] = _as_array(tensor)
        reference = stub.graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
        reference.data_location = onnx.TensorProto.EXTERNAL
        reference.external_data.add(key="location", value="deploykit-in-memory")
    try:
        data = stub.SerializeToString()
    except ValueError:  # over protobuf's 2 GB
        return None, {}
    return (data, weights) if len(data) < PROTO_LIMIT else (None, {})


def _apart(tensor: onnx.TensorProto) -> bool:
    """Whether a session takes ``tensor`` as an array beside the graph's bytes: raw data of a type numpy
    reads, :data:`APART_BYTES` or more (sized from the shape: reading raw_data copies the bytes)."""
    import numpy as np

    dtype = _ARRAY_TYPES.get(tensor.data_type)
    return (
        dtype is not None
        and tensor.HasField("raw_data")
        and math.prod(tensor.dims) * np.dtype(dtype).itemsize >= APART_BYTES
    )


def _as_array(tensor: onnx.TensorProto) -> Any:
    """An :func:`_apart` tensor's values as an array over (a copy of) its raw bytes."""
    import numpy as np

    return np.frombuffer(tensor.raw_data, _ARRAY_TYPES[tensor.data_type]).reshape(tensor.dims)


class Held:
    """Large weights that many graphs built from one source share (the mixed-precision search's states
    each restore hundreds of FP32 weights): a graph holds a reference to each (an external-data entry
    whose location names this set) instead of a copy, and a session takes its array in place
    (:func:`session_source`). Copying ViT-S's FP32 weights into each state's graph and out again for
    its session cost 60 ms a state. :func:`fill_held` makes such a graph self-contained; the references
    resolve only while this set is alive."""

    def __init__(self, source: onnx.ModelProto) -> None:
        self.location = f"{_HELD_PREFIX}{next(_HELD_IDS)}"
        self._tensors = {t.name: t for t in source.graph.initializer}
        self._arrays: dict[str, Any] = {}
        _HELD[self.location] = self

    def refer(self, target: onnx.TensorProto, name: str, source: str) -> bool:
        """Make the empty ``target`` (named ``name``) a reference to the source's initializer ``source``;
        False (``target`` untouched) where that is not one of the large raw weights a session takes apart."""
        import onnx

        tensor = self._tensors.get(source)
        if tensor is None or not _apart(tensor):
            return False
        target.name, target.data_type = name, tensor.data_type
        target.dims.extend(tensor.dims)
        target.data_location = onnx.TensorProto.EXTERNAL
        target.external_data.add(key="location", value=self.location)
        target.external_data.add(key="source", value=source)
        return True

    def array(self, source: str) -> Any:
        if source not in self._arrays:  # one copy of the bytes for every graph that refers to them
            self._arrays[source] = _as_array(self._tensors[source])
        return self._arrays[source]

    def tensor(self, source: str) -> onnx.TensorProto:
        return self._tensors[source]


def fill_held(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each reference to a live :class:`Held` set replaced by a copy of its weight, in
    place: the self-contained graph, byte for byte what copying the weights in would have built."""
    for tensor in model.graph.initializer:
        found = _reference(tensor)
        if found is not None:
            name = tensor.name
            tensor.CopyFrom(found[0].tensor(found[1]))
            tensor.name = name
    return model


def _held(tensor: onnx.TensorProto) -> Any:
    """The array a :class:`Held` reference stands for, or None where ``tensor`` is not one (a live set's)."""
    found = _reference(tensor)
    return found[0].array(found[1]) if found is not None else None


def _reference(tensor: onnx.TensorProto) -> tuple[Held, str] | None:
    """The live :class:`Held` set and source weight ``tensor`` refers to, if it is such a reference."""
    entries = {e.key: e.value for e in tensor.external_data}
    held = _HELD.get(entries.get("location", ""))
    return (held, entries["source"]) if held is not None and "source" in entries else None


_HELD_PREFIX = "deploykit-held-"
_HELD_IDS = itertools.count()
_HELD: weakref.WeakValueDictionary[str, Held] = weakref.WeakValueDictionary()


@contextlib.contextmanager
def as_file(model: onnx.ModelProto) -> Iterator[Path]:
    """The model written to a temporary folder (weights over 1 KiB beside it when it must)."""
    import onnx

    with tempfile.TemporaryDirectory(prefix="deploykit-surgery-") as tmp:
        path = Path(tmp) / "model.onnx"
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        fill_held(copy)  # a file holds every weight it needs
        external = copy.ByteSize() >= PROTO_LIMIT
        onnx.save_model(
            copy,
            str(path),
            save_as_external_data=external,
            all_tensors_to_one_file=True,
            location="model.onnx.data",
            size_threshold=1024,
        )
        yield path
