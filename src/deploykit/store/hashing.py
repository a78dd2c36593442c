"""Canonical hashing: the same logical value gives the same digest in every process."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx

_CHUNK = 1 << 20


def canonical(value: Any) -> Any:
    """Turn dataclasses, tuples, sets and paths into plain JSON values with a fixed order."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (set, frozenset)):
        # Python's string hash changes per process: sort, never iterate a set into a key.
        return sorted(canonical(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, Path):
        return value.as_posix()
    if isinstance(value, float) and value.is_integer():
        return int(value)  # 1.0 and 1 must hash alike: YAML writes either
    return value


def canonical_json(value: Any) -> str:
    return json.dumps(canonical(value), sort_keys=True, separators=(",", ":"))


def digest_value(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def digest_model(model: onnx.ModelProto) -> str:
    """A digest of an in-memory ONNX model's content: its bytes without the raw weights, then each
    weight's header and bytes where they lie. Serializing a 95 MB transformer only to hash it cost
    0.19 s beside the hash's 0.08 s, once per graph a quantize judges or files statistics under."""
    from deploykit.graph.proto import without_initializers

    light, raw = without_initializers(model, lambda t: t.HasField("raw_data"))
    graph = light.SerializeToString()
    h = hashlib.sha256(len(graph).to_bytes(8, "little") + graph)
    for t in raw:
        data = t.raw_data
        h.update(canonical_json([t.name, t.data_type, list(t.dims), t.data_location, t.doc_string, len(data)]).encode())
        h.update(data)
    return h.hexdigest()


def digest_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()
