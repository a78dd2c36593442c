"""Calibration images of every mode are converted on purpose, and the conversion is said once."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from PIL import Image

from deploykit.data.sources import DataConfig, DataSource, InputInfo, Preprocess, load_image
from deploykit.errors import DataError

RNG = np.random.default_rng(0)


def _save(folder, name, image):
    folder.mkdir(parents=True, exist_ok=True)
    image.save(folder / name)
    return folder / name


def test_16_bit_greyscale_keeps_its_values_instead_of_saturating(tmp_path):
    values = RNG.integers(0, 65536, (6, 5), dtype=np.uint16)
    path = _save(tmp_path, "deep.png", Image.fromarray(values))
    conversions = []
    arr = load_image(path, Preprocess(), conversions)  # scale 1/255: 16-bit data lands in [0, 1]
    assert arr.shape == (3, 6, 5)
    np.testing.assert_allclose(arr[0], values / 65535.0, atol=1e-6)  # PIL's convert("RGB") gives 1.0 everywhere
    np.testing.assert_array_equal(arr[0], arr[2])
    assert [c.mode for c in conversions] == ["I;16"] and not conversions[0].lossy


@pytest.mark.parametrize(
    "mode, lossy, words",
    [
        ("L", False, "greyscale"),
        ("RGBA", True, "alpha"),
        ("CMYK", True, "CMYK"),
        ("P", False, "palette"),
        ("LA", True, "alpha"),
    ],
)
def test_each_mode_is_named(tmp_path, mode, lossy, words):
    image = Image.fromarray(RNG.integers(0, 256, (4, 4, 3), dtype=np.uint8)).convert(mode)
    path = _save(tmp_path, "im.tiff" if mode == "CMYK" else "im.png", image)
    conversions = []
    arr = load_image(path, Preprocess(dtype="uint8", layout="NHWC"), conversions)
    assert arr.shape == (4, 4, 3) and arr.dtype == np.uint8
    assert len(conversions) == 1 and conversions[0].lossy is lossy and words in conversions[0].what
    np.testing.assert_array_equal(arr, np.asarray(image.convert("RGB")))  # the same pixels PIL would give


def test_rgb_images_convert_nothing(tmp_path):
    path = _save(tmp_path, "rgb.png", Image.fromarray(RNG.integers(0, 256, (4, 4, 3), dtype=np.uint8)))
    conversions = []
    load_image(path, Preprocess(), conversions)
    assert conversions == []


def test_a_float_image_is_refused(tmp_path):
    path = _save(tmp_path, "f.tiff", Image.fromarray(RNG.random((4, 4)).astype(np.float32)))
    with pytest.raises(DataError, match="floating-point image"):
        load_image(path, Preprocess())


def test_a_folder_warns_once_per_kind_of_conversion(tmp_path):
    folder = tmp_path / "images"
    for i in range(3):
        _save(folder, f"grey{i}.png", Image.fromarray(RNG.integers(0, 256, (8, 8), dtype=np.uint8)))
    _save(folder, "alpha.png", Image.fromarray(RNG.integers(0, 256, (8, 8, 4), dtype=np.uint8)))
    source = DataSource(
        DataConfig(folder="images", samples=4), tmp_path, [InputInfo("x", (1, 3, 8, 8), "float32")], "calibration"
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(list(source)) == 4
    messages = {str(w.message).split(":")[1].split()[0]: str(w.message) for w in caught}
    assert set(messages) == {"RGBA", "L"} and len(caught) == 2, [str(w.message) for w in caught]
    assert "information was lost" in messages["RGBA"] and "alpha" in messages["RGBA"]
    assert "information was lost" not in messages["L"] and "grey" in messages["L"]
