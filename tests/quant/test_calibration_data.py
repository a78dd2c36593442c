"""Calibration data sources (deploykit.data.sources): the fixes the quantize stage relies on."""

import textwrap

import numpy as np
import pytest

from deploykit.data.sources import DataConfig, DataSource, InputInfo
from deploykit.errors import DataError

INPUTS = [InputInfo("x", ("N", 3, 4, 4), "float32")]


def source(tmp_path, **cfg):
    return DataSource(DataConfig(**cfg), tmp_path, INPUTS, what="calibration")


def test_a_function_module_beside_the_config_is_importable(tmp_path):
    (tmp_path / "calib_fn_local.py").write_text(
        textwrap.dedent("""
        import numpy as np
        def samples():
            for i in range(3):
                yield {"x": np.full((1, 3, 4, 4), i, np.float32)}
    """)
    )
    src = source(tmp_path, function="calib_fn_local:samples", samples=3)
    assert [float(s["x"].max()) for s in src] == [0.0, 1.0, 2.0]
    assert src.fingerprint()["module"]  # the module's digest enters the recipe key


def test_a_function_that_yields_nothing_or_raises_is_a_data_error(tmp_path):
    (tmp_path / "calib_fn_bad.py").write_text(
        textwrap.dedent("""
        def empty():
            return []
        def broken():
            yield from ()
            raise RuntimeError("camera offline")
        def boom():
            raise OSError("no such dataset")
    """)
    )
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


def test_a_stacked_npy_is_split_into_samples_and_said(tmp_path):
    """[10, 3, 4, 4] for a batch-1 input: 10 samples, in order, read one at a time."""
    stack = np.random.default_rng(0).standard_normal((10, 3, 4, 4)).astype(np.float32)
    np.save(tmp_path / "calib.npy", stack)
    src = DataSource(
        DataConfig(files="calib.npy", samples=64),
        tmp_path,
        [InputInfo("x", (1, 3, 4, 4), "float32")],
        what="calibration",
    )
    with pytest.warns(
        UserWarning,
        match=r"calib.npy holds 10 samples stacked on the first axis of x "
        r"\(the model's batch is 1\): read as 10 samples",
    ):
        samples = list(src)
    assert len(samples) == 10 and all(s["x"].shape == (1, 3, 4, 4) for s in samples)
    np.testing.assert_array_equal(np.concatenate([s["x"] for s in samples]), stack)
    limited = DataSource(DataConfig(files="calib.npy", samples=4), tmp_path, [InputInfo("x", (1, 3, 4, 4), "float32")])
    with pytest.warns(UserWarning):
        assert len(list(limited)) == 4


def test_stacks_with_their_own_batch_axis_and_a_batch_that_divides_them(tmp_path):
    rng = np.random.default_rng(1)
    np.save(tmp_path / "own.npy", rng.standard_normal((6, 1, 3, 4, 4)).astype(np.float32))
    with pytest.warns(UserWarning, match="holds 6 samples"):
        assert [s["x"].shape for s in source(tmp_path, files="own.npy")] == [(1, 3, 4, 4)] * 6  # dynamic batch
    np.save(tmp_path / "pairs.npy", rng.standard_normal((8, 3, 4, 4)).astype(np.float32))
    pairs = DataSource(DataConfig(files="pairs.npy"), tmp_path, [InputInfo("x", (2, 3, 4, 4), "float32")])
    with pytest.warns(UserWarning, match="holds 4 samples .* batch is 2"):
        assert [s["x"].shape for s in pairs] == [(2, 3, 4, 4)] * 4
    np.save(tmp_path / "one.npy", rng.standard_normal((2, 3, 4, 4)).astype(np.float32))
    one = DataSource(DataConfig(files="one.npy"), tmp_path, [InputInfo("x", (2, 3, 4, 4), "float32")])
    assert [s["x"].shape for s in one] == [(2, 3, 4, 4)]  # matches the batch: one sample, nothing said


def test_a_stacked_npz_with_unequal_inputs_names_them(tmp_path):
    rng = np.random.default_rng(2)
    np.savez(
        tmp_path / "two.npz",
        a=rng.standard_normal((4, 3)).astype(np.float32),
        b=rng.standard_normal((5, 3)).astype(np.float32),
    )
    two = DataSource(
        DataConfig(files="two.npz"), tmp_path, [InputInfo("a", (1, 3), "float32"), InputInfo("b", (1, 3), "float32")]
    )
    with pytest.raises(DataError, match=r"two.npz: inputs hold different numbers of stacked samples \(a 4, b 5\)"):
        list(two)


def test_a_first_axis_within_the_dynamic_batch_range_is_one_sample_and_beyond_it_a_stack(tmp_path):
    info = [InputInfo("x", ("batch", 8), "float32", batch_range=(1, 4))]
    rng = np.random.default_rng(3)
    np.save(tmp_path / "four.npy", rng.standard_normal((4, 8)).astype(np.float32))
    assert [s["x"].shape for s in DataSource(DataConfig(files="four.npy", samples=1), tmp_path, info)] == [(4, 8)]
    stack = rng.standard_normal((6, 8)).astype(np.float32)
    np.save(tmp_path / "six.npy", stack)
    with pytest.warns(UserWarning, match=r"holds 6 samples .* batch is batch, dynamic \[1, 4\]: 1 per sample"):
        samples = list(DataSource(DataConfig(files="six.npy", samples=6), tmp_path, info))
    np.testing.assert_array_equal(np.concatenate([s["x"] for s in samples]), stack)


def test_a_stacked_npy_is_memory_mapped_and_each_sample_is_an_array_of_its_own(tmp_path, monkeypatch):
    """A stack is read a sample at a time: the samples are writable in-memory copies, never views
    of the mapped file (which is read-only and would stay open)."""
    stack = np.random.default_rng(4).standard_normal((5, 3, 4, 4)).astype(np.float32)
    np.save(tmp_path / "calib.npy", stack)
    loads = []
    real = np.load
    monkeypatch.setattr(np, "load", lambda *a, **k: loads.append(k.get("mmap_mode")) or real(*a, **k))
    info = [InputInfo("x", (1, 3, 4, 4), "float32")]
    with pytest.warns(UserWarning, match="holds 5 samples"):
        samples = list(DataSource(DataConfig(files="calib.npy", samples=5), tmp_path, info))
    assert loads == ["r"]
    assert all(type(s["x"]) is np.ndarray and s["x"].flags.writeable and s["x"].base is None for s in samples)
    np.testing.assert_array_equal(np.concatenate([s["x"] for s in samples]), stack)


def test_stacked_files_keep_the_readers_limits(tmp_path):
    """Object arrays in an .npz are refused before any read, a truncated .npy before it is mapped,
    and each sample of a stack is held to limits.max_input_mib."""
    info = [InputInfo("x", (1, 3, 4, 4), "float32")]
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}] * 4, dtype=object))
    with pytest.raises(DataError, match=r"objects.npz: member 'x': holds object values"):
        list(DataSource(DataConfig(files="objects.npz"), tmp_path, info))
    np.save(tmp_path / "cut.npy", np.ones((64, 3, 4, 4), np.float32))
    data = (tmp_path / "cut.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="cut.npy: truncated or unreadable array"):
        list(DataSource(DataConfig(files="cut.npy"), tmp_path, info))
    np.save(tmp_path / "big.npy", np.ones((3, 1, 3, 64, 64), np.float32))  # 3 samples of 48 KiB
    big = [InputInfo("x", (1, 3, 64, 64), "float32")]
    with (
        pytest.warns(UserWarning, match="holds 3 samples"),
        pytest.raises(DataError, match=r"big.npy\[0\]: input 'x' .* above limits.max_input_mib \(0.03\)"),
    ):
        list(DataSource(DataConfig(files="big.npy"), tmp_path, big, max_input_mib=0.03))
    assert len(list(DataSource(DataConfig(files="big.npy", samples=3), tmp_path, big, max_input_mib=0.05))) == 3
