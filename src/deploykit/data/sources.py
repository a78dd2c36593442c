"""Calibration and validation data: image folders with a declared preprocessing, .npy/.npz files,
or a Python iterable the user names as ``module:function``.

Samples stream one at a time (never all in memory), are checked against the model's inputs, and
the source has a fingerprint that enters recipe keys: changed data recalibrates, unchanged reuses.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from deploykit.data.imagemodes import Conversion
from deploykit.data.memory import InMemorySamples
from deploykit.errors import ConfigError, DataError
from deploykit.safety.limits import LimitsConfig
from deploykit.safety.smallfile import kind_of, open_regular
from deploykit.safety.usercode import importable_from
from deploykit.store.hashing import digest_file

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".webp")
ARRAY_SUFFIXES = (".npy", ".npz")


@dataclass(frozen=True)
class Preprocess:
    """Image -> tensor: resize (H, W), center crop (H, W), scale, mean/std per channel, layout, dtype."""

    resize: tuple[int, ...] = ()
    crop: tuple[int, ...] = ()
    scale: float = 1.0 / 255.0
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    color: Literal["rgb", "bgr"] = "rgb"
    dtype: Literal["float32", "float16", "uint8"] = "float32"

    def __post_init__(self) -> None:
        for name in ("resize", "crop"):
            if getattr(self, name) and len(getattr(self, name)) != 2:
                raise ValueError(f"{name} must be [height, width]")
        if any(s == 0 for s in self.std):
            raise ValueError("std must not contain 0")


@dataclass(frozen=True)
class DataConfig:
    """Exactly one of ``folder`` (images), ``files`` (a .npy/.npz file or a folder of them) or ``function``."""

    folder: str | None = None
    files: str | None = None
    function: str | None = None  # module:function returning an iterable of {input: array} (code you named)
    input: str | None = None  # which model input images feed; default: the model's only input
    preprocess: Preprocess = Preprocess()
    samples: int = 64
    seed: int = 0  # order in which files are drawn
    # samples passed to deploykit.convert as Python objects (never from a file)
    memory: InMemorySamples | None = field(default=None, metadata={"internal": True})

    def __post_init__(self) -> None:
        given = [k for k in ("folder", "files", "function", "memory") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("give exactly one of 'folder', 'files' or 'function'")
        if self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples}")


@dataclass(frozen=True)
class InputInfo:
    name: str
    shape: tuple[int | str, ...]  # str = dynamic
    dtype: str
    kind: str = "tensor"  # deploykit.config.InputSpec.kind
    batch_range: tuple[int, int] | None = None  # a dynamic first dim's configured (min, max)


class DataSource:
    """Streams validated samples (dicts of input name -> array with a leading batch dim)."""

    def __init__(
        self,
        cfg: DataConfig,
        base_dir: Path,
        inputs: list[InputInfo],
        what: str = "data",
        max_input_mib: float = LimitsConfig.max_input_mib,
    ) -> None:
        self.cfg, self.base_dir, self.inputs, self.what = cfg, base_dir, inputs, what
        self.max_input_bytes = max_input_mib * 2**20  # limits.max_input_mib, per input tensor of a sample

    def path(self, p: str) -> Path:
        q = Path(p)
        return q if q.is_absolute() else self.base_dir / q

    def fingerprint(self) -> dict[str, Any]:
        """Digests of every file the samples come from, plus the settings that shape them."""
        cfg = self.cfg
        if cfg.memory is not None:
            return {"memory": cfg.memory.digest, "samples": min(cfg.samples, cfg.memory.count), "input": cfg.input}
        if cfg.function:
            from deploykit.store.hashing import canonical

            origin = self._function_module_file()
            return {
                "function": cfg.function,
                "module": digest_file(origin) if origin else "",
                "samples": cfg.samples,
                "input": cfg.input,
                "preprocess": canonical(cfg.preprocess),
            }
        files = self._files()
        root = self.path(cfg.folder or cfg.files)  # type: ignore[arg-type]
        # Keyed by the path under the root: two sub-folders may both hold img_0001.jpg.
        return {
            "files": {_relative(f, root): digest_file(f) for f in files},
            "samples": cfg.samples,
            "seed": cfg.seed,
            "input": cfg.input,
            "preprocess": cfg.preprocess if cfg.folder else None,
        }

    def _function_module_file(self) -> Path | None:
        module = self.cfg.function.split(":")[0]  # type: ignore[union-attr]
        with importable_from(self.base_dir):
            try:
                spec = importlib.util.find_spec(module)
            except (ImportError, ValueError):
                spec = None
        origin = Path(spec.origin) if spec and spec.origin else None
        return origin if origin and origin.is_file() else None

    def _files(self) -> list[Path]:
        cfg = self.cfg
        root = self.path(cfg.folder or cfg.files)  # type: ignore[arg-type]
        suffixes = IMAGE_SUFFIXES if cfg.folder else ARRAY_SUFFIXES
        if root.is_file() and cfg.files:
            return [root]
        if (root.exists() or root.is_symlink()) and not root.is_dir():
            raise DataError(
                f"{root}: {self.what} is {kind_of(root.lstat().st_mode)}: neither a regular file nor a folder",
                hint="check the path in the config",
            )
        if not root.is_dir():
            raise DataError(f"{root}: {self.what} folder not found", hint="check the path in the config")
        named = sorted(p for p in root.rglob("*") if p.suffix.lower() in suffixes and not p.is_dir())
        files = [p for p in named if p.is_file()]
        skipped = [p for p in named if not p.is_file()]  # FIFOs, sockets, devices, dangling links: not opened
        if skipped and (self.what, str(skipped[0])) not in _SAID:  # said once per process, not per listing
            _SAID.add((self.what, str(skipped[0])))
            first = skipped[0]
            kind = kind_of(first.stat().st_mode) if first.exists() else "a dangling link"
            one = len(skipped) == 1
            warnings.warn(
                f"{self.what}: skipped {len(skipped)} entr{'y' if one else 'ies'} that "
                f"{'is' if one else 'are'} not a regular file: {first} ({kind})"
                + (f" and {len(skipped) - 1} more" if len(skipped) > 1 else ""),
                stacklevel=2,
            )
        if not files:
            raise DataError(
                f"{root}: {self.what} folder holds no {'/'.join(suffixes)} files",
                hint="add samples or point to another folder",
            )
        order = np.random.default_rng(self.cfg.seed).permutation(len(files))
        return [files[i] for i in order]

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        count = 0
        for where, sample in itertools.islice(self._raw(), self.cfg.samples):
            yield self._check(sample, where)
            count += 1
        if count == 0:
            raise DataError(f"{self.what}: the source yields no samples", hint="check the data source in the config")
        if count < self.cfg.samples:
            warnings.warn(
                f"{self.what}: {count} samples available, {self.cfg.samples} requested; using {count}", stacklevel=2
            )

    def _raw(self) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        cfg = self.cfg
        if cfg.memory is not None:
            yield from ((f"{self.what}[{i}]", s) for i, s in enumerate(cfg.memory.samples))
        elif cfg.function:
            yield from self._from_function()
        elif cfg.folder:
            name, seen = self._image_input(), set()
            for f in self._files():
                conversions: list[Conversion] = []
                sample = load_image(f, cfg.preprocess, conversions)[None]
                for c in set(conversions) - seen:  # once per kind of conversion, never silently
                    seen.add(c)
                    warnings.warn(
                        f"{self.what}: {c.mode} image(s), first {f}: {c.what}"
                        + ("; information was lost" if c.lossy else ""),
                        stacklevel=2,
                    )
                yield str(f), {name: sample}
        else:
            for f in self._files():  # .npz files keyed by input name need no 'input:'; a bare .npy does
                yield from _from_array_file(f, self._single_input, self.inputs, self.what)

    def _from_function(self) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        module_name, _, fn_name = self.cfg.function.partition(":")  # type: ignore[union-attr]
        try:
            with importable_from(self.base_dir):  # a module beside the config, like source.factory
                fn = getattr(importlib.import_module(module_name), fn_name)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"{self.what}.function: cannot load {self.cfg.function!r}: {e}") from e
        items = iter(_call(fn, self.cfg.function))
        for i in itertools.count():
            try:
                item = next(items)
            except StopIteration:
                return
            except Exception as e:  # the user's code failed: name it, do not look like a deploykit bug
                raise DataError(f"{self.cfg.function}: raised {type(e).__name__} at sample {i}: {e}") from e
            if not isinstance(item, dict):
                item = {self._single_input(): item}
            yield f"{self.cfg.function}[{i}]", {k: np.asarray(v) for k, v in item.items()}

    def _single_input(self) -> str:
        if self.cfg.input:
            return self.cfg.input
        if len(self.inputs) != 1:
            raise ConfigError(
                f"{self.what}.input: the model has inputs {', '.join(i.name for i in self.inputs)}; "
                "name the one this data feeds, or use .npz files keyed by input name"
            )
        return self.inputs[0].name

    _image_input = _single_input

    def _check(self, sample: dict[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
        expected = {i.name: i for i in self.inputs}
        missing = set(expected) - set(sample)
        if missing:
            raise DataError(f"{where}: sample lacks model input(s) {', '.join(sorted(missing))}")
        out = {}
        for name, info in expected.items():
            arr = sample[name]
            if arr.ndim == len(info.shape) - 1:
                arr = arr[None]  # a single sample without its batch dim
            if arr.nbytes > self.max_input_bytes:
                raise DataError(
                    f"{where}: input {info.name!r} of shape {list(arr.shape)} takes {arr.nbytes / 2**20:.1f} "
                    f"MiB, above limits.max_input_mib ({self.max_input_bytes / 2**20:g})",
                    hint="give smaller samples, or raise limits.max_input_mib",
                )
            _check_array(arr, info, where)
            out[name] = arr
        return out


def _check_array(arr: np.ndarray, info: InputInfo, where: str) -> None:
    if arr.dtype.name != info.dtype:
        raise DataError(
            f"{where}: input {info.name!r} has dtype {arr.dtype.name}, the model expects {info.dtype}",
            hint="convert the data or fix the preprocessing dtype",
        )
    if arr.ndim != len(info.shape) or any(
        isinstance(d, int) and d != a for d, a in zip(info.shape, arr.shape, strict=True)
    ):
        raise DataError(
            f"{where}: input {info.name!r} has shape {list(arr.shape)}, the model expects {list(info.shape)}",
            hint="fix the preprocessing (resize/crop/layout) or the data",
        )
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        raise DataError(f"{where}: input {info.name!r} contains NaN or Inf", hint="clean the data")
    if info.kind in ("mask", "padding_mask") and arr.size:
        valid = arr.astype(bool) if info.kind == "mask" else ~arr.astype(bool)
        empty = np.flatnonzero(~valid.reshape(-1, arr.shape[-1]).any(axis=1))
        if empty.size:
            marks = "True marks a valid element" if info.kind == "mask" else "True marks padding"
            raise DataError(
                f"{where}: input {info.name!r} ({info.kind}: {marks}) has {empty.size} row(s) with no "
                f"valid element, first row {int(empty[0])}",
                hint="a fully masked attention row is NaN in every runtime; keep one valid element per row",
            )


_SAID: set[tuple[str, str]] = set()  # (what, first skipped entry) already warned about


def _from_array_file(
    path: Path, default_input: Callable[[], str], inputs: list[InputInfo], what: str
) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """One file's samples: one, or several where the arrays are stacked on their first axis."""
    from deploykit.data.arrayfile import read_arrays
    from deploykit.data.stacking import unstack

    # Headers checked first: numeric, bounded; never unpickled. A .npy is memory-mapped, so a stack
    # of samples is read one sample at a time.
    arrays = dict(read_arrays(path, mmap=True))
    sample = {default_input(): arrays[""]} if "" in arrays else arrays
    yield from unstack(
        sample,
        {i.name: i.shape for i in inputs},
        str(path),
        what,
        {i.name: i.batch_range for i in inputs if i.batch_range},
    )


def load_image(path: Path, p: Preprocess, conversions: list[Conversion] | None = None) -> np.ndarray:
    """Decode and preprocess one image into a (C, H, W) or (H, W, C) array; a mode other than RGB is
    converted explicitly and the conversion appended to ``conversions``."""
    from PIL import Image, UnidentifiedImageError

    from deploykit.data.imagemodes import decode_rgb

    try:
        with open_regular(path, DataError, "image") as f, Image.open(f) as im:
            size = (p.resize[1], p.resize[0]) if p.resize else None
            arr, conversion = decode_rgb(im, str(path), size)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        if isinstance(e, DataError):
            raise
        raise DataError(f"{path}: cannot decode image ({e})", hint="remove or replace the file") from e
    if conversion is not None and conversions is not None:
        conversions.append(conversion)
    if p.crop:
        h, w = arr.shape[:2]
        ch, cw = p.crop
        if ch > h or cw > w:
            raise DataError(f"{path}: crop {list(p.crop)} is larger than the image {h}x{w} after resize")
        top, left = (h - ch) // 2, (w - cw) // 2
        arr = arr[top : top + ch, left : left + cw]
    if p.color == "bgr":
        arr = arr[..., ::-1]
    if p.dtype != "uint8":
        arr = (arr.astype(np.float32) * p.scale - np.asarray(p.mean, np.float32)) / np.asarray(p.std, np.float32)
    else:
        arr = np.clip(np.rint(arr), 0, 255)
    arr = arr.astype(p.dtype)
    return np.ascontiguousarray(arr.transpose(2, 0, 1) if p.layout == "NCHW" else arr)


def inputs_from_config(config: Any) -> list[InputInfo]:
    """The model's inputs as the config declares them (dynamic dims by name)."""

    def batch_range(spec: Any) -> tuple[int, int] | None:
        d = config.dims.get(spec.shape[0]) if spec.shape and isinstance(spec.shape[0], str) else None
        return (d.min, d.max) if d is not None else None

    return [InputInfo(s.name, tuple(s.shape), s.dtype, s.kind, batch_range(s)) for s in config.inputs]


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _call(fn: Any, name: str) -> Any:
    try:
        return fn()
    except Exception as e:  # the user's code failed: name it
        raise DataError(f"{name}: raised {type(e).__name__}: {e}") from e
