"""Turn a path given on the command line (``--calib-data``) into a ``calibration`` config section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deploykit.data.sources import ARRAY_SUFFIXES, IMAGE_SUFFIXES

MAX_SAMPLES = 1024  # a folder's files are all used, up to this many


def calibration_section(path: Path, config: Any) -> dict[str, Any]:
    """A calibration section for ``path``: a folder of images or arrays, or one .npy/.npz file.

    Images are resized to the model input's height and width when the input is a fixed NCHW (or
    NHWC) image; a section already in the config keeps its preprocessing and sample count.
    """
    path = path.resolve()
    existing = config.calibration
    if path.is_file():
        section: dict[str, Any] = {"files": str(path)}
    else:
        files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else []
        images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
        arrays = [p for p in files if p.suffix.lower() in ARRAY_SUFFIXES]
        section = {"files": str(path)} if arrays and not images else {"folder": str(path)}
        if existing is None:
            section["samples"] = max(1, min(len(images or arrays), MAX_SAMPLES))
            image = _image_input(config)
            if "folder" in section and image:
                (height, width), layout = image
                section["preprocess"] = {"resize": [height, width], "layout": layout}
    if existing is not None:
        for key in ("samples", "seed", "input"):
            section[key] = getattr(existing, key)
        section["preprocess"] = _as_dict(existing.preprocess)
    return section


def _image_input(config: Any) -> tuple[tuple[int, int], str] | None:
    """((H, W), layout) of the model's only 4-D float input with 3 channels and a fixed size."""
    specs = [s for s in config.inputs if len(s.shape) == 4 and s.dtype == "float32"]
    if len(specs) != 1:
        return None
    shape = specs[0].shape
    if shape[1] == 3 and all(isinstance(d, int) for d in shape[2:]):
        return (shape[2], shape[3]), "NCHW"
    if shape[3] == 3 and all(isinstance(d, int) for d in shape[1:3]):
        return (shape[1], shape[2]), "NHWC"
    return None


def _as_dict(preprocess: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(preprocess).items()}
