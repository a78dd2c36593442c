"""Calibration data sources (deploykit.data): the fixes the quantize stage relies on."""

import textwrap

import numpy as np
import pytest

from deploykit.data import DataConfig, DataSource, InputInfo
from deploykit.errors import DataError

INPUTS = [InputInfo("x", ("N", 3, 4, 4), "float32")]


def source(tmp_path, **cfg):
    return DataSource(DataConfig(**cfg), tmp_path, INPUTS, what="calibration")


def test_a_function_module_beside_the_config_is_importable(tmp_path):
    (tmp_path / "calib_fn_local.py").write_text(textwrap.dedent("""
        import numpy as np
        def samples():
            for i in range(3):
                yield {"x": np.full((1, 3, 4, 4), i, np.float32)}
    """))
    src = source(tmp_path, function="calib_fn_local:samples", samples=3)
    assert [float(s["x"].max()) for s in src] == [0.0, 1.0, 2.0]
    assert src.fingerprint()["module"]  # the module's digest enters the recipe key


def test_a_function_that_yields_nothing_or_raises_is_a_data_error(tmp_path):
    (tmp_path / "calib_fn_bad.py").write_text(textwrap.dedent("""
        def empty():
            return []
        def broken():
            yield from ()
            raise RuntimeError("camera offline")
        def boom():
            raise OSError("no such dataset")
    """))
    with pytest.raises(DataError, match="yields no samples"):
        list(source(tmp_path, function="calib_fn_bad:empty"))
    with pytest.raises(DataError, match="calib_fn_bad:boom: raised OSError: no such dataset"):
        list(source(tmp_path, function="calib_fn_bad:boom"))


def test_fingerprint_keys_files_by_their_path_under_the_root(tmp_path):
    for sub in ("a", "b"):
        (tmp_path / "d" / sub).mkdir(parents=True)
        np.save(tmp_path / "d" / sub / "s.npy", np.full((1, 3, 4, 4), ord(sub), np.float32))
    files = source(tmp_path, files="d").fingerprint()["files"]
    assert set(files) == {"a/s.npy", "b/s.npy"}  # two files named s.npy, both counted


def test_a_broken_npz_is_a_data_error(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "bad.npz").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(DataError, match="bad.npz: not a readable"):
        list(source(tmp_path, files="d"))
