"""Inputs and outputs saved for another tool or a later run (``--save-inputs``, ``--load-inputs``,
``--save-outputs``), as ``polygraphy run`` saves them, but as data only, never a pickle:

* ``.npz``: one numeric array per tensor, named ``inputs/<sample>/<input>`` for inputs and
  ``<runner>/<sample>/<output>`` for outputs (``candidate``, ``onnx``, ``torch``); read back with
  every header checked before an array is read (:mod:`deploykit.data.arrayfile`).
* ``.json``: ``{"format": "deploykit.tensors/1", "inputs": [sample, ...]}`` or ``"runs": {runner:
  [sample, ...]}``, a sample mapping each tensor's name to ``{"dtype", "shape", "values"}`` (values flat,
  in C order; ``"nan"``, ``"inf"`` and ``"-inf"`` as strings, which JSON has no numbers for).

A file read back is untrusted: sizes are bounded, dtypes must be numeric, shapes must hold their values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import DataError, UsageError

FORMAT = "deploykit.tensors/1"
SUFFIXES = (".npz", ".json")
MAX_JSON_BYTES = 512 << 20
NUMERIC = "biuf"  # numpy dtype kinds a tensor may have
Sample = dict[str, np.ndarray]


def save_inputs(path: Path, samples: list[Sample]) -> Path:
    """Write the samples an engine was fed; return ``path``."""
    return _save(path, {"inputs": samples})


def save_runs(path: Path, runs: Mapping[str, list[Sample]]) -> Path:
    """Write each runner's outputs, sample by sample; return ``path``."""
    if "inputs" in runs:
        raise ValueError("'inputs' is not a runner name")
    return _save(path, dict(runs))


def load_inputs(path: Path) -> list[Sample]:
    """Samples written by :func:`save_inputs` (or by another tool in the same layout)."""
    groups = _load(path)
    if "inputs" not in groups:
        raise DataError(
            f"{path}: holds no inputs (members inputs/<sample>/<input>)",
            hint="write it with --save-inputs, or give a .npz keyed by input name as calibration/validation files",
        )
    return groups["inputs"]


def is_tensor_file(path: Path) -> bool:
    """Whether ``path`` is in this module's layout (a .json file, or an .npz with ``inputs/`` members)."""
    if path.suffix == ".json":
        return True
    if path.suffix != ".npz" or not path.is_file():
        return False
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return any(n.startswith("inputs/") for n in archive.namelist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return False


def _check_suffix(path: Path, flag: str) -> None:
    if path.suffix not in SUFFIXES:
        raise UsageError(f"{flag} {path}: write .npz or .json", hint="the suffix picks the format")


def _save(path: Path, groups: dict[str, list[Sample]]) -> Path:
    from deploykit.errors import os_error

    _check_suffix(path, "save")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.partial")
        if path.suffix == ".npz":
            with open(tmp, "wb") as f:
                np.savez(
                    f,
                    **{
                        f"{g}/{i}/{name}": np.asarray(a)
                        for g, samples in groups.items()
                        for i, s in enumerate(samples)
                        for name, a in s.items()
                    },
                )
        else:
            body = {
                "format": FORMAT,
                **(
                    {"inputs": [_json_sample(s) for s in groups["inputs"]]}
                    if "inputs" in groups
                    else {"runs": {g: [_json_sample(s) for s in v] for g, v in groups.items()}}
                ),
            }
            tmp.write_text(json.dumps(body, separators=(",", ":")), encoding="utf-8")
        tmp.replace(path)  # whole or not at all
    except OSError as e:
        raise os_error(e, path, "write the tensors") from e
    return path


def _json_sample(sample: Sample) -> dict[str, Any]:
    return {
        name: {
            "dtype": np.asarray(a).dtype.name,
            "shape": list(np.shape(a)),
            "values": [_json_number(v) for v in np.asarray(a).ravel().tolist()],
        }
        for name, a in sample.items()
    }


def _json_number(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _load(path: Path) -> dict[str, list[Sample]]:
    if path.suffix not in SUFFIXES:
        raise UsageError(f"{path}: read .npz or .json tensors", hint="--save-inputs writes either")
    if not path.is_file():
        raise DataError(f"{path}: no such file", hint="check the path")
    return _load_npz(path) if path.suffix == ".npz" else _load_json(path)


def _load_npz(path: Path) -> dict[str, list[Sample]]:
    from deploykit.data.arrayfile import read_arrays

    found: dict[str, dict[int, Sample]] = {}
    for member, array in read_arrays(path):
        group, _, rest = member.partition("/")
        index, _, name = rest.partition("/")
        if not (group and index.isdigit() and name):
            raise DataError(f"{path}: member {member!r} is not <group>/<sample>/<tensor>")
        found.setdefault(group, {}).setdefault(int(index), {})[name] = array
    return {g: _in_order(path, g, by_index) for g, by_index in found.items()}


def _in_order(path: Path, group: str, by_index: dict[int, Sample]) -> list[Sample]:
    if sorted(by_index) != list(range(len(by_index))):
        raise DataError(f"{path}: the {group} samples are not numbered 0..{len(by_index) - 1}")
    return [by_index[i] for i in range(len(by_index))]


def _load_json(path: Path) -> dict[str, list[Sample]]:
    from deploykit.safety.smallfile import read_small

    try:
        data = json.loads(read_small(path, MAX_JSON_BYTES, DataError, "tensor file"))
    except (ValueError, RecursionError) as e:
        raise DataError(f"{path}: not JSON ({str(e)[:200]})") from e
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise DataError(f"{path}: not a {FORMAT} file", hint="write it with --save-inputs or --save-outputs")
    groups = {"inputs": data["inputs"]} if "inputs" in data else data.get("runs")
    if not isinstance(groups, dict):
        raise DataError(f"{path}: holds neither 'inputs' nor 'runs'")
    out = {}
    for group, samples in groups.items():
        if not isinstance(samples, list):
            raise DataError(f"{path}: {group} is not a list of samples")
        out[str(group)] = [_json_tensors(path, f"{group}[{i}]", s) for i, s in enumerate(samples)]
    return out


def _json_tensors(path: Path, where: str, sample: Any) -> Sample:
    if not isinstance(sample, dict):
        raise DataError(f"{path}: {where} is not a mapping of tensor name -> tensor")
    out = {}
    for name, t in sample.items():
        at = f"{path}: {where}[{name!r}]"
        if not isinstance(t, dict) or not isinstance(t.get("values"), list) or not isinstance(t.get("shape"), list):
            raise DataError(f"{at}: expected {{dtype, shape, values}}")
        try:
            dtype = np.dtype(str(t.get("dtype")))
        except TypeError as e:
            raise DataError(f"{at}: unknown dtype {t.get('dtype')!r}") from e
        shape = t["shape"]
        if dtype.kind not in NUMERIC or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise DataError(f"{at}: a tensor is numeric with a shape of sizes (got {dtype}, {shape!r})")
        if math.prod(shape) != len(t["values"]):
            raise DataError(f"{at}: shape {shape} holds {math.prod(shape)} values, the file has {len(t['values'])}")
        try:
            values = [float(v) if isinstance(v, str) else v for v in t["values"]]
            out[str(name)] = np.asarray(values, dtype=dtype).reshape(shape)
        except (TypeError, ValueError, OverflowError) as e:
            raise DataError(f"{at}: values do not fit {dtype} ({str(e)[:120]})") from e
    return out


__all__ = ["FORMAT", "is_tensor_file", "load_inputs", "save_inputs", "save_runs"]
