"""Synthetic inputs made in code for the real-model benchmark (nothing downloaded, nothing stored).

* ``text_page``: a paper-coloured page with lines of random words in Pillow's built-in FreeType
  font at several sizes and greys, a few rules and a smudge, plus scanner noise (text detectors,
  text-line crops for recognizers);
* ``layout_page``: a document page with a title, paragraphs, a figure (gradient + shapes) and a
  table (ruled grid with words) (layout detectors);
* ``scene``: gradients, filled shapes and noise, the example detector's scenes at any size
  (saliency and other photo models).

Each maker takes a numpy Generator and returns an RGB uint8 array; ``batch`` turns a list of
them into the model's float input with its normalisation.
"""

from __future__ import annotations

import string

import numpy as np
from PIL import Image, ImageDraw, ImageFont

_LETTERS = string.ascii_letters + string.digits + "  .,;:-"


def _words(rng: np.random.Generator, n: int) -> str:
    return " ".join("".join(rng.choice(list(_LETTERS), int(rng.integers(2, 10)))) for _ in range(n))


def _paper(rng: np.random.Generator, h: int, w: int) -> Image.Image:
    base = rng.integers(215, 256)
    tint = rng.integers(-12, 6, 3)
    t = np.linspace(0, 1, h)[:, None, None]
    page = np.clip(base + tint + t * rng.normal(0, 10), 0, 255).repeat(w, axis=1)
    return Image.fromarray(page.astype(np.uint8), "RGB")


def _noisy(image: Image.Image, rng: np.random.Generator, sigma: float = 5.0) -> np.ndarray:
    a = np.asarray(image, np.float32)
    return np.clip(a + rng.normal(0, sigma, a.shape), 0, 255).astype(np.uint8)


def text_page(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """Lines of words, sizes 12-40 px scaled to the page, some grey, some underlined."""
    page = _paper(rng, h, w)
    draw = ImageDraw.Draw(page)
    y = int(rng.integers(2, max(3, h // 12)))
    while y < h - 10:
        size = int(rng.integers(12, 41) * max(h, w) / 640) or 12
        font = ImageFont.load_default(size=max(8, size))
        ink = tuple(int(v) for v in rng.integers(0, 90, 3))
        x = int(rng.integers(2, max(3, w // 6)))
        draw.text((x, y), _words(rng, int(rng.integers(2, 12))), fill=ink, font=font)
        if rng.random() < 0.1:
            draw.line([(x, y + size + 2), (min(w - 2, x + int(rng.integers(40, w))), y + size + 2)], fill=ink)
        y += int(size * rng.uniform(1.3, 2.4))
    if rng.random() < 0.5:  # a smudge or stamp
        cx, cy, r = int(rng.integers(0, w)), int(rng.integers(0, h)), int(rng.integers(10, max(11, w // 8)))
        colour = tuple(int(v) for v in rng.integers(80, 220, 3))
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], outline=colour, width=3)
    return _noisy(page, rng)


def text_line(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """One line of words filling a crop of height ``h`` (what a recognizer reads)."""
    page = _paper(rng, h, w)
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default(size=int(h * rng.uniform(0.55, 0.8)))
    ink = tuple(int(v) for v in rng.integers(0, 80, 3))
    draw.text((int(rng.integers(1, 8)), int(h * 0.08)), _words(rng, int(rng.integers(2, 6))), fill=ink, font=font)
    return _noisy(page, rng, 4.0)


def layout_page(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A title, paragraphs in one or two columns, a figure and a table."""
    page = _paper(rng, h, w)
    draw = ImageDraw.Draw(page)
    margin = w // 12
    y = margin
    title = ImageFont.load_default(size=max(10, h // 28))
    draw.text((margin, y), _words(rng, int(rng.integers(2, 6))), fill=(10, 10, 10), font=title)
    y += h // 14
    body = ImageFont.load_default(size=max(8, h // 70))
    blocks = int(rng.integers(3, 7))
    for _ in range(blocks):
        kind = rng.choice(["text", "text", "figure", "table"])
        height = int(rng.integers(h // 12, h // 5))
        if y + height > h - margin:
            break
        x0, x1 = margin, w - margin
        if kind == "text":
            for ly in range(y, y + height, max(10, h // 55)):
                draw.text((x0, ly), _words(rng, int(rng.integers(6, 14))), fill=(30, 30, 30), font=body)
        elif kind == "figure":
            colours = rng.integers(0, 256, (2, 3))
            t = np.linspace(0, 1, x1 - x0)[None, :, None]
            grad = (colours[0] * (1 - t) + colours[1] * t).repeat(height, axis=0).astype(np.uint8)
            page.paste(Image.fromarray(grad, "RGB"), (x0, y))
            for _ in range(int(rng.integers(2, 6))):
                bx, by = int(rng.integers(x0, x1 - 20)), int(rng.integers(y, y + height - 20))
                draw.ellipse(
                    [bx, by, bx + int(rng.integers(10, 80)), by + int(rng.integers(10, 80))],
                    fill=tuple(int(v) for v in rng.integers(0, 256, 3)),
                )
        else:
            rows, cols = int(rng.integers(3, 8)), int(rng.integers(2, 6))
            for r in range(rows + 1):
                draw.line([(x0, y + r * height // rows), (x1, y + r * height // rows)], fill=(0, 0, 0), width=1)
            for c in range(cols + 1):
                draw.line([(x0 + c * (x1 - x0) // cols, y), (x0 + c * (x1 - x0) // cols, y + height)], fill=(0, 0, 0))
            for r in range(rows):
                for c in range(cols):
                    draw.text(
                        (x0 + c * (x1 - x0) // cols + 3, y + r * height // rows + 2),
                        _words(rng, 1),
                        fill=(20, 20, 20),
                        font=body,
                    )
        y += height + h // 40
    return _noisy(page, rng, 4.0)


def scene(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    """A two-colour gradient with filled rectangles, ellipses and triangles, and sensor noise."""
    top, bottom = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    t = np.linspace(0.0, 1.0, h)[:, None, None]
    image = Image.fromarray((top * (1 - t) + bottom * t).repeat(w, axis=1).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(2, 8))):
        x0, y0 = int(rng.integers(0, w - 16)), int(rng.integers(0, h - 16))
        bw, bh = int(rng.integers(8, w // 2)), int(rng.integers(8, h // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        shape = int(rng.integers(0, 3))
        box = [x0, y0, x0 + bw, y0 + bh]
        if shape == 0:
            draw.rectangle(box, fill=colour)
        elif shape == 1:
            draw.ellipse(box, fill=colour)
        else:
            draw.polygon([(x0, y0 + bh), (x0 + bw // 2, y0), (x0 + bw, y0 + bh)], fill=colour)
    return _noisy(image, rng, 6.0)


IMAGENET = (np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32))
HALF = (np.array([0.5, 0.5, 0.5], np.float32), np.array([0.5, 0.5, 0.5], np.float32))
UNIT = (np.zeros(3, np.float32), np.ones(3, np.float32))


def batch(images: list[np.ndarray], norm: tuple[np.ndarray, np.ndarray], layout: str = "NCHW") -> np.ndarray:
    """uint8 HWC images -> float32 ``(x / 255 - mean) / std``, stacked in ``layout``."""
    x = (np.stack(images).astype(np.float32) / 255.0 - norm[0]) / norm[1]
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2) if layout == "NCHW" else x)
