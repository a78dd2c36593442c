"""The TensorRT calibration cache: header, hex encoding (checked against hand-computed bits)."""

import pytest

from deploykit.errors import ArtifactCorrupt
from deploykit.quant import trt_cache


@pytest.mark.parametrize(
    "amax, bits",
    [
        (127.0, "3f800000"),  # scale 1.0: sign 0, exponent 127, mantissa 0
        (254.0, "40000000"),  # scale 2.0: exponent 128
        (63.5, "3f000000"),  # scale 0.5: exponent 126
        (1.0, "3c010204"),  # scale 1/127 = 2^-7 * 1.00787...: exponent 120 (0x78), mantissa 0x010204
    ],
)
def test_scale_is_big_endian_float32_bits_of_amax_over_127(amax, bits):
    text = trt_cache.render({"t": amax}, "10.3.0")
    assert text.splitlines()[1] == f"t: {bits}"


def test_header_uses_tensorrt_version_numbering():
    assert trt_cache.version_number("10.3.0") == 100300
    assert trt_cache.version_number("10.12.1") == 101201
    assert trt_cache.version_number("8.5.1") == 8501  # TensorRT 8 used major*1000
    assert trt_cache.render({}, "10.3.0").startswith("TRT-100300-EntropyCalibration2\n")


def test_round_trip_and_modelopt_reads_it(tmp_path):
    from modelopt.onnx.quantization.calib_utils import import_scales_from_calib_cache

    path = tmp_path / "calib.cache"
    amax = {"images": 1.0, "conv/out:0": 12.5, "zero": 0.0}
    trt_cache.write(path, amax, "10.12.0")
    header, scales = trt_cache.read(path)
    assert header == "TRT-101200-EntropyCalibration2"
    assert scales["conv/out:0"] == pytest.approx(12.5 / 127, rel=1e-7)
    assert scales["zero"] > 0  # TensorRT needs a positive scale
    theirs = import_scales_from_calib_cache(str(path))
    assert theirs["conv/out:0_scale"] == pytest.approx(scales["conv/out:0"], rel=1e-7)


def test_a_file_that_is_not_a_cache_is_refused(tmp_path):
    path = tmp_path / "x.cache"
    path.write_text("hello\n")
    with pytest.raises(ArtifactCorrupt, match="no 'TRT-' header"):
        trt_cache.read(path)
