"""Reading TensorRT's engine-inspector JSON (``engine_inspector.json``) in both of its layouts.

``IEngineInspector.get_engine_information(JSON)`` returns ``{"Layers": [...], <io>}`` where <io> is
``"Bindings": ["input_0", ...]`` in TensorRT 10.x and ``"I/O Tensors": [{"Name", "IOMode",
"DataType", "Dimensions", "Location", "IsShapeInferenceIO", "ProfileInfo": [{"MinShape",
"OptShape", "MaxShape", "Format"}]}]`` in 11.x. Layer tensors carry ``"Format/Datatype"`` in 10.x and
separate ``"Datatype"``/``"Format"`` keys in 11.x. Without DETAILED profiling verbosity the layers
are bare names. Pure functions, no TensorRT needed: tested from hand-written samples.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from deploykit.errors import ArtifactCorrupt

# Words TensorRT uses for element types, in format strings and DataType fields -> our names.
_DTYPE_WORDS = {
    "fp32": "fp32",
    "float": "fp32",
    "float32": "fp32",
    "fp16": "fp16",
    "half": "fp16",
    "bf16": "bf16",
    "int8": "int8",
    "fp8": "fp8",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
    "uint8": "uint8",
    "int4": "int4",
    "fp4": "fp4",
    "e8m0": "e8m0",
}


@dataclass(frozen=True)
class IOTensor:
    name: str
    mode: str = ""  # "input" / "output"; "" when the 10.x layout gives names only
    dtype: str = ""
    shape: tuple[int, ...] = ()
    profiles: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Layer:
    name: str
    kind: str = ""  # LayerType, e.g. "CaskConvolution"
    output_dtypes: tuple[str, ...] = ()
    tactic: str = ""


@dataclass(frozen=True)
class Inspection:
    layout: str  # "10.x" (Bindings) or "11.x" (I/O Tensors)
    detailed: bool  # layers are objects, not bare names
    layers: list[Layer] = field(default_factory=list)
    io: list[IOTensor] = field(default_factory=list)


def parse_inspector(text: str, where: str = "engine inspector JSON") -> Inspection:
    """Parse the engine-inspector JSON of either layout.

    Raises:
        ArtifactCorrupt: the text is not JSON or lacks the ``Layers`` list.
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ArtifactCorrupt(f"{where}: not valid JSON ({e})") from e
    if not isinstance(data, dict) or not isinstance(data.get("Layers"), list):
        raise ArtifactCorrupt(f"{where}: no 'Layers' list; not TensorRT engine-inspector output")
    layers = [_layer(item) for item in data["Layers"]]
    detailed = bool(data["Layers"]) and all(isinstance(item, dict) for item in data["Layers"])
    if "I/O Tensors" in data:
        return Inspection("11.x", detailed, layers, [_io_tensor(t) for t in data["I/O Tensors"]])
    return Inspection("10.x", detailed, layers, [IOTensor(str(n)) for n in data.get("Bindings", [])])


def _layer(item: Any) -> Layer:
    if not isinstance(item, dict):  # profiling verbosity below DETAILED: names only
        return Layer(str(item))
    dtypes = tuple(_tensor_dtype(t) for t in item.get("Outputs", []) if isinstance(t, dict))
    tactic = item.get("TacticName") or item.get("TacticValue") or ""
    return Layer(str(item.get("Name", "")), str(item.get("LayerType", "")), dtypes, str(tactic))


def _tensor_dtype(tensor: dict[str, Any]) -> str:
    text = tensor.get("Datatype") or tensor.get("DataType") or tensor.get("Format/Datatype") or ""
    return dtype_word(str(text))


def dtype_word(text: str) -> str:
    """The element type named in a TensorRT format/datatype string ("Row major linear FP16 format")."""
    for word in re.split(r"[^A-Za-z0-9]+", text):
        if word.lower() in _DTYPE_WORDS:
            return _DTYPE_WORDS[word.lower()]
    return text.strip().lower() or "unknown"


def _io_tensor(item: dict[str, Any]) -> IOTensor:
    profiles = tuple(
        {
            "min": list(p.get("MinShape", [])),
            "opt": list(p.get("OptShape", [])),
            "max": list(p.get("MaxShape", [])),
            "format": p.get("Format", ""),
        }
        for p in item.get("ProfileInfo", []) or []
    )
    return IOTensor(
        name=str(item.get("Name", "")),
        mode=str(item.get("IOMode", "")).lower(),
        dtype=dtype_word(str(item.get("DataType", ""))),
        shape=tuple(int(d) for d in item.get("Dimensions", []) or []),
        profiles=profiles,
    )


def summarize(inspection: Inspection) -> dict[str, Any]:
    """A small, JSON-ready digest of an inspection for the build summary and reports."""
    kinds = Counter(entry.kind for entry in inspection.layers if entry.kind)
    dtypes = Counter(d for entry in inspection.layers for d in entry.output_dtypes)
    return {
        "layout": inspection.layout,
        "detailed": inspection.detailed,
        "layers": len(inspection.layers),
        "layer_kinds": dict(sorted(kinds.items())),
        "output_dtypes": dict(sorted(dtypes.items())),
        "io": [t.name for t in inspection.io],
    }
