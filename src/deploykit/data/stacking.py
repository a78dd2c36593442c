"""Arrays that hold several samples stacked on their first axis: one ``.npy``/``.npz`` file of a
whole calibration set (``[64, 3, H, W]`` for a batch-1 input) is split into samples, and a
warning says so, where it used to be refused as one sample of the wrong shape.

An array whose first axis fits the model's batch (the fixed batch, or within a dynamic batch's
configured ``dims`` range) is one sample, as before; only a first axis the model cannot take as
its batch is read as a stack."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping

import numpy as np

from deploykit.errors import DataError

Shape = tuple[int | str, ...]  # a model input's shape, str for a dynamic dim
Range = tuple[int, int]  # a dynamic dim's (min, max)


def unstack(
    sample: dict[str, np.ndarray],
    shapes: Mapping[str, Shape],
    where: str,
    what: str = "data",
    batches: Mapping[str, Range] | None = None,
) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """One file's arrays -> samples. An array stacked on a first axis that is not the model's batch
    is split along it, and a warning says so: ``[64, 3, H, W]`` for a batch-1 input is 64 samples,
    as is ``[64, 1, 3, H, W]`` for any batch. ``batches``: the (min, max) of each input's dynamic
    batch; a first axis outside it is a stack of batch-1 samples (a calibration sample is one input;
    the statistics are the same either way, and samples can then be held out). Without a range a
    dynamic batch counts as 1."""
    batches = batches or {}
    steps = {
        name: step
        for name, arr in sample.items()
        if name in shapes and (step := _stack_step(arr, shapes[name], batches.get(name))) is not None
    }
    if not steps:
        yield where, {k: _own(v) for k, v in sample.items()}
        return
    counts = {name: _stack_count(sample[name], step) for name, step in steps.items()}
    unstacked = sorted(set(sample) & set(shapes) - set(steps))
    if len(set(counts.values())) > 1 or unstacked:
        listed = ", ".join(f"{n} {counts[n]}" for n in sorted(counts)) + "".join(f", {n} 1" for n in unstacked)
        raise DataError(
            f"{where}: inputs hold different numbers of stacked samples ({listed})",
            hint="stack every input's samples on its first axis, the same number for each",
        )
    count = next(iter(counts.values()))
    batch = sorted(
        {
            str(d) if isinstance(d := shapes[n][0], int) else f"{d}, dynamic{_range(batches.get(n))}: 1 per sample"
            for n in steps
        }
    )
    warnings.warn(
        f"{what}: {where} holds {count} samples stacked on the first axis of {', '.join(sorted(steps))} "
        f"(the model's batch is {'/'.join(batch)}): read as {count} samples",
        stacklevel=3,
    )
    for i in range(count):
        yield (
            f"{where}[{i}]",
            {k: (np.array(_take(v, i, steps[k])) if k in steps else _own(v)) for k, v in sample.items()},
        )


def _own(arr: np.ndarray) -> np.ndarray:
    """An array in memory: a memory-mapped one is copied (it is read-only and holds the file open)."""
    return np.array(arr) if isinstance(arr, np.memmap) else np.asarray(arr)


def _range(r: Range | None) -> str:
    return f" [{r[0]}, {r[1]}]" if r else ""


def _stack_step(arr: np.ndarray, shape: Shape, batch_range: Range | None) -> int | None:
    """The rows one sample takes on the first axis of a stacked ``arr`` (0: a sample per index,
    with its own batch axis), or None when ``arr`` is one sample."""
    rank = len(shape)
    if rank == 0:
        return None
    if arr.ndim == rank + 1:
        return 0
    if arr.ndim != rank:
        return None
    first, fixed = arr.shape[0], isinstance(shape[0], int) and shape[0] > 0
    lo, hi = (shape[0], shape[0]) if fixed else batch_range or (1, 1)
    if lo <= first <= hi:
        return None  # a batch the model takes: one sample
    batch = shape[0] if fixed else 1
    return batch if first % batch == 0 else None


def _stack_count(arr: np.ndarray, step: int) -> int:
    return arr.shape[0] if step == 0 else arr.shape[0] // step


def _take(arr: np.ndarray, i: int, step: int) -> np.ndarray:
    return arr[i] if step == 0 else arr[i * step : (i + 1) * step]
