"""The TensorRT calibration cache (text), for users still on TensorRT <= 10 implicit INT8.

Format: a header ``TRT-<version>-EntropyCalibration2``, then one ``<tensor>: <hex>`` line per
tensor, the hex being the big-endian IEEE-754 bits of the float32 scale ``amax / 127``.
The version number is NV_TENSORRT_VERSION: major*10000 + minor*100 + patch from TensorRT 10
(10.3.0 -> 100300), major*1000 + minor*100 + patch before (8.5.1 -> 8501).
"""

from __future__ import annotations

import struct
from pathlib import Path

from deploykit.errors import ArtifactCorrupt

ALGORITHM = "EntropyCalibration2"
INT8_MAX = 127.0


def version_number(version: str) -> int:
    """``"10.3.0"`` -> 100300, ``"8.5.1"`` -> 8501 (TensorRT's NV_TENSORRT_VERSION)."""
    parts = [int(p) for p in version.split(".")[:3]]
    major, minor, patch = (parts + [0, 0])[:3]
    return major * (10000 if major >= 10 else 1000) + minor * 100 + patch


def scale_hex(scale: float) -> str:
    """The big-endian float32 bits of ``scale`` as 8 lowercase hex digits (1.0 -> 3f800000)."""
    return struct.pack(">f", scale).hex()


def hex_scale(text: str) -> float:
    return struct.unpack(">f", bytes.fromhex(text))[0]


def render(amax: dict[str, float], trt_version: str) -> str:
    """The cache text for per-tensor thresholds ``amax`` (scale = amax / 127, floored above zero)."""
    lines = [f"TRT-{version_number(trt_version)}-{ALGORITHM}"]
    for name in sorted(amax):
        scale = max(amax[name], 1e-30) / INT8_MAX  # TensorRT requires a positive scale
        lines.append(f"{name}: {scale_hex(scale)}")
    return "\n".join(lines) + "\n"


def write(path: Path, amax: dict[str, float], trt_version: str) -> None:
    path.write_text(render(amax, trt_version))


def read(path: Path) -> tuple[str, dict[str, float]]:
    """(header, tensor -> scale) of a cache file."""
    lines = path.read_text().splitlines()
    if not lines or not lines[0].startswith("TRT-"):
        raise ArtifactCorrupt(f"{path}: not a TensorRT calibration cache (no 'TRT-' header)")
    scales = {}
    for line in lines[1:]:
        name, sep, value = line.rpartition(": ")
        if not sep:
            raise ArtifactCorrupt(f"{path}: malformed line {line!r}")
        scales[name] = hex_scale(value)
    return lines[0], scales
