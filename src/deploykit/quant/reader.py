"""Calibration samples for deploykit's own calibrator and for the quantizers it drives.

Both ORT's ``quantize_static`` and ModelOpt hold every calibration sample in memory (1024 x
3x224x224 = 617 MB measured), so deploykit never hands them the data set: it computes ranges
itself, streaming one sample at a time (:mod:`deploykit.quant.ranges`), and gives the quantizers
the ranges plus a one-sample :class:`ReplayReader` that only lets them place Q/DQ nodes.

Both readers offer what ModelOpt's ONNX PTQ calls on a reader, beyond ORT's ``get_next``: its own
providers (``modelopt.onnx.quantization.calib_utils.CalibrationDataProvider``) also have
``get_first`` (the first sample, without advancing: ModelOpt runs one inference with it to read
MatMul/Gemm shapes for its GEMV and MHA exclusions) and ``rewind``. A reader without ``get_first``
crashed every graph with a MatMul or Gemm in the tensorrt flavour.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from deploykit.errors import DataError


class SampleStream:
    """A re-iterable, counted view of a sample source (a DataSource, a list, a generator factory).

    Iterating twice reads the source twice (histogram calibration makes two passes); nothing is
    cached. ``seen`` is the number of samples the last full pass produced.
    """

    def __init__(
        self,
        source: Iterable[dict[str, np.ndarray]] | Callable[[], Iterable[dict[str, np.ndarray]]],
        limit: int | None = None,
        what: str = "calibration data",
    ) -> None:
        if not callable(source) and iter(source) is source:
            raise TypeError(
                "SampleStream needs a re-iterable source (a DataSource, a list, or a factory), not a one-shot iterator"
            )
        self._source, self.limit, self.what, self.seen = source, limit, what, 0

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        items = self._source() if callable(self._source) else self._source
        count = 0
        for sample in itertools.islice(items, self.limit):
            count += 1
            yield sample
        if count == 0:
            raise DataError(f"{self.what}: no samples", hint="point the calibration section at a non-empty source")
        self.seen = count

    def first(self) -> dict[str, np.ndarray]:
        for sample in self:
            return sample
        raise DataError(f"{self.what}: no samples")  # unreachable: __iter__ raises first


def _reader_base() -> type:
    from onnxruntime.quantization import CalibrationDataReader

    return CalibrationDataReader


def replay_reader(samples: list[dict[str, np.ndarray]], inputs: list[str] | None = None) -> Any:
    """An ORT ``CalibrationDataReader`` (with ModelOpt's ``get_first``) over a few samples that rewinds
    itself after each pass.

    ModelOpt reads its reader several times (GEMV and MHA detection, then calibration); a reader
    that stays exhausted after the first pass would calibrate nothing.
    """

    if not samples:
        raise ValueError("replay_reader needs at least one sample")

    class ReplayReader(_reader_base()):  # type: ignore[misc]
        def __init__(self) -> None:
            self._items = [{k: v for k, v in s.items() if inputs is None or k in inputs} for s in samples]
            self._pos = 0

        def get_next(self) -> dict[str, np.ndarray] | None:
            if self._pos >= len(self._items):
                self._pos = 0  # the next consumer starts from the beginning
                return None
            self._pos += 1
            return self._items[self._pos - 1]

        def get_first(self) -> dict[str, np.ndarray]:
            return self._items[0]

        def rewind(self) -> None:
            self._pos = 0

        def __len__(self) -> int:
            return len(self._items)

    return ReplayReader()


def streaming_reader(stream: SampleStream) -> Any:
    """An ORT ``CalibrationDataReader`` (with ModelOpt's ``get_first``) that pulls samples lazily
    from ``stream`` (never a list)."""

    class StreamingReader(_reader_base()):  # type: ignore[misc]
        def __init__(self) -> None:
            self._it: Iterator[dict[str, np.ndarray]] | None = None

        def get_next(self) -> dict[str, np.ndarray] | None:
            if self._it is None:
                self._it = iter(stream)
            item = next(self._it, None)
            if item is None:
                self._it = None
            return item

        def get_first(self) -> dict[str, np.ndarray]:
            return stream.first()

        def rewind(self) -> None:
            self._it = None

    return StreamingReader()
