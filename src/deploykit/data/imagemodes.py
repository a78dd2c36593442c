"""Decoding an image of any mode into the three colour channels preprocessing declares.

Pillow's ``convert("RGB")`` is silent and sometimes destructive: a 16-bit greyscale image
saturates to white (40000 -> 255), alpha is dropped, CMYK goes through a naive formula. Here every
mode is converted on purpose and the conversion is named, with whether it lost information, so a
data source can say so once. Values come out as float32 on the 0-255 scale the preprocessing's
``scale`` expects (16-bit data keeps its precision: 0-65535 maps to 0-255).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from deploykit.errors import DataError


@dataclass(frozen=True)
class Conversion:
    mode: str  # the image's own mode (Pillow's name)
    what: str  # what was done
    lossy: bool


def decode_rgb(im: Any, where: str, size: tuple[int, int] | None = None) -> tuple[np.ndarray, Conversion | None]:
    """(H, W, 3) float32 on a 0-255 scale, resized to ``size`` (W, H) when given, and the conversion made."""
    from PIL import Image

    mode = im.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        arr = np.asarray(im, dtype=np.float64)
        if mode == "I" and (arr.min() < 0 or arr.max() > 65535):
            raise DataError(
                f"{where}: 32-bit integer image with values outside 0-65535; its range is unknown",
                hint="save the image as 8- or 16-bit, or feed it as .npy with your own scaling",
            )
        channel = Image.fromarray((arr / 257.0).astype(np.float32), mode="F")
        if size:
            channel = channel.resize(size, Image.BILINEAR)
        grey = np.asarray(channel, dtype=np.float32)
        return np.repeat(grey[..., None], 3, axis=2), Conversion(
            mode, "16-bit greyscale scaled to 0-255 and replicated to 3 channels", False
        )
    if mode == "F":
        raise DataError(
            f"{where}: floating-point image; its value range is unknown", hint="feed it as .npy with your own scaling"
        )
    conversion = _conversion(im)
    rgb = im if mode == "RGB" else im.convert("RGB")
    if size:
        rgb = rgb.resize(size, Image.BILINEAR)
    return np.asarray(rgb, dtype=np.float32), conversion


def _conversion(im: Any) -> Conversion | None:
    mode = im.mode
    if mode == "RGB":
        tile = getattr(im, "tile", None) or []
        if any(";16" in str(getattr(t, "args", t[-1] if isinstance(t, tuple) else "")) for t in tile):
            return Conversion(mode, "16-bit RGB decoded by Pillow to 8 bits per channel", True)
        return None
    if mode in ("L", "1"):
        return Conversion(mode, "greyscale replicated to 3 channels", False)
    if mode in ("RGBA", "LA", "RGBa", "La", "PA") or (mode == "P" and "transparency" in im.info):
        return Conversion(mode, "alpha channel dropped (not composited)", True)
    if mode == "P":
        return Conversion(mode, "palette expanded to RGB", False)
    if mode == "CMYK":
        return Conversion(mode, "CMYK converted to RGB without a colour profile (approximate)", True)
    return Conversion(mode, f"{mode} converted to RGB by Pillow", True)


__all__ = ["Conversion", "decode_rgb"]
