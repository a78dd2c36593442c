"""Polygraphy's habits for parity: ``deploykit parity A B`` on two models or engine folders, --atol/--rtol
(and per output), --save-inputs/--load-inputs and --save-outputs as .npz or .json, never a pickle."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import deploykit
from deploykit.data import feedfile
from deploykit.errors import DataError
from tests.conftest import run_cli


def _model(path, offset: float, scale: float = 2.0):
    """y = x * scale + offset and z = x - offset, on a dynamic batch."""
    import onnx

    inits = [
        numpy_helper.from_array(np.array(scale, np.float32), "s"),
        numpy_helper.from_array(np.array(offset, np.float32), "o"),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "s"], ["m"]),
        helper.make_node("Add", ["m", "o"], ["y"]),
        helper.make_node("Sub", ["x", "o"], ["z"]),
    ]
    io = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])]
    out = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 16]) for n in ("y", "z")]
    graph = helper.make_graph(nodes, "affine", io, out, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_two_models_compare_on_the_same_inputs_with_polygraphys_tolerances(tmp_path):
    a, b = _model(tmp_path / "a.onnx", 0.0), _model(tmp_path / "b.onnx", 0.01)
    strict = deploykit.compare(a, b, dims={"batch": 3}, count=2)
    assert not strict.passed  # 0.01 off everywhere: past FP32's max_abs 1e-3
    # what each side computed, checked against numpy on the very samples it used
    x = strict.samples[0]["x"]
    assert x.shape == (3, 16)
    np.testing.assert_allclose(strict.runs["candidate"][0]["y"], x * 2 + 0.01, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(strict.runs["reference"][0]["y"], x * 2, rtol=1e-6, atol=1e-6)
    loose = deploykit.compare(a, b, dims={"batch": 3}, count=2, parity__default__atol=0.011)
    assert loose.passed  # atol replaces the preset: every element within 0.011
    per_output = deploykit.compare(a, b, dims={"batch": 3}, count=2, overrides={"parity.outputs.y.atol": 0.011})
    failed = {c.name for c in per_output.record.failed_checks}
    assert failed == {"z vs a.onnx"}  # y passes by its own atol, z keeps the strict preset
    rel = deploykit.compare(a, b, dims={"batch": 3}, count=2, parity__default__rtol=1e-9)
    [check] = [c for c in rel.record.checks if c.name == "y vs a.onnx"]
    assert "96 of 96 elements outside rtol 1e-09" in check.message  # 2 samples x 3 x 16


def test_parity_a_b_on_the_command_line_saves_and_loads_the_tensors(tmp_path):
    a, b = _model(tmp_path / "a.onnx", 0.0), _model(tmp_path / "b.onnx", 0.01)
    saved_in, saved_out = tmp_path / "inputs.json", tmp_path / "outputs.npz"
    code, out, err = run_cli(
        "parity",
        str(a),
        str(b),
        "--dim",
        "batch=2",
        "--atol",
        "0.011",
        "--save-inputs",
        str(saved_in),
        "--save-outputs",
        str(saved_out),
    )
    assert code == 0, err
    assert "result: PASS (exit 0)" in out
    inputs = feedfile.load_inputs(saved_in)
    assert len(inputs) == 4 and inputs[0]["x"].shape == (2, 16)
    from deploykit.data.arrayfile import read_arrays

    outputs = dict(read_arrays(saved_out))
    np.testing.assert_allclose(outputs["candidate/0/y"], inputs[0]["x"] * 2 + 0.01, rtol=1e-6, atol=1e-6)
    code, out, err = run_cli("parity", str(a), str(b), "--load-inputs", str(saved_in), "--atol", "y:0.011")
    assert code == 1 and "z vs a.onnx" in out and "error: " in err and "differs from" in err
    code, _, err = run_cli("parity", str(a), str(b), "--atol", "loose")
    assert code == 2 and "--atol 'loose': expected a number >= 0" in err


def test_tensor_files_round_trip_and_stay_data(tmp_path):
    samples = [
        {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "m": np.array([True, False])},
        {"x": np.array([[np.nan, np.inf, -np.inf]], np.float32), "m": np.array([False, True])},
    ]
    for suffix in (".npz", ".json"):
        back = feedfile.load_inputs(feedfile.save_inputs(tmp_path / f"s{suffix}", samples))
        for got, want in zip(back, samples, strict=True):
            for k in want:
                np.testing.assert_array_equal(got[k], want[k])
                assert got[k].dtype == want[k].dtype
    (tmp_path / "bad.json").write_text(
        json.dumps(
            {"format": feedfile.FORMAT, "inputs": [{"x": {"dtype": "object", "shape": [1], "values": ["os.system"]}}]}
        )
    )
    with pytest.raises(DataError, match="a tensor is numeric"):
        feedfile.load_inputs(tmp_path / "bad.json")
    (tmp_path / "short.json").write_text(
        json.dumps(
            {
                "format": feedfile.FORMAT,
                "inputs": [{"x": {"dtype": "float32", "shape": [1000000, 1000000], "values": [1.0]}}],
            }
        )
    )
    with pytest.raises(DataError, match="holds 1000000000000 values, the file has 1"):
        feedfile.load_inputs(tmp_path / "short.json")
    np.save(tmp_path / "pickled.npy", np.array([object()], dtype=object), allow_pickle=True)
    import zipfile

    with zipfile.ZipFile(tmp_path / "evil.npz", "w") as z:
        z.write(tmp_path / "pickled.npy", "inputs/0/x.npy")
    with pytest.raises(DataError, match="no objects"):
        feedfile.load_inputs(tmp_path / "evil.npz")


def test_the_pipelines_parity_takes_the_same_flags(tiny, tmp_path):
    cfg, store = tiny
    saved = tmp_path / "inputs.npz"
    code, out, err = run_cli(
        "parity",
        str(cfg),
        "-w",
        str(store),
        "--save-inputs",
        str(saved),
        "--save-outputs",
        str(tmp_path / "outputs.json"),
        "--atol",
        "1e-3",
    )
    assert code == 0, err
    runs = json.loads((tmp_path / "outputs.json").read_text())["runs"]
    assert set(runs) == {"candidate", "onnx", "torch"}
    samples = feedfile.load_inputs(saved)
    assert len(runs["onnx"]) == len(samples) == 2  # parity: {samples: 1} per distinct shape (batch 1 and 3)
    assert [s["x"].shape[0] for s in samples] == [1, 3]
    code, out, err = run_cli("parity", str(cfg), "-w", str(store), "--load-inputs", str(saved))
    assert code == 0, err
    result = deploykit.parity(cfg, workdir=store, validation=saved, progress=False)
    assert result.parity["data"]["kind"] == "validation" and result.parity["data"]["samples"] == 2


def test_parity_a_b_on_an_engine_folder_matches_its_onnx_source(tmp_path):
    source = _model(tmp_path / "a.onnx", 0.5)
    engine = tmp_path / "engine"
    code, _, err = run_cli(
        "build", str(source), "-o", str(engine), "-w", str(tmp_path / "store"), "--dim", "batch=1,2,4"
    )
    assert code == 0, err
    assert json.loads((engine / "engine.json").read_text())["backend"] == "onnxruntime"
    saved = tmp_path / "outputs.npz"
    for a, b in ((engine, source), (source, engine)):
        code, out, err = run_cli("parity", str(a), str(b), "--dim", "batch=2", "--save-outputs", str(saved))
        assert code == 0, err
        assert "result: PASS (exit 0) — 2 checks passed" in out
    from deploykit.data.arrayfile import read_arrays

    outputs = dict(read_arrays(saved))  # the last run: the engine is the candidate, on the source's inputs
    x = np.stack([outputs[f"reference/{i}/z"] + 0.5 for i in range(4)])  # z = x - 0.5
    for i in range(4):
        np.testing.assert_allclose(outputs[f"candidate/{i}/y"], x[i] * 2 + 0.5, rtol=1e-6, atol=1e-6)
        assert outputs[f"candidate/{i}/y"].shape == (2, 16)


def test_parity_a_b_on_a_folder_that_is_not_an_engine_folder_exits_2_in_one_line(tmp_path):
    source = _model(tmp_path / "a.onnx", 0.0)
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "model.onnx").write_bytes(source.read_bytes())  # a model inside is not enough
    for args, side in (((tmp_path / "plain", source), "A"), ((source, tmp_path / "plain"), "B")):
        code, out, err = run_cli("parity", *map(str, args))
        assert code == 2 and out == "", err
        first, *rest = err.strip().splitlines()
        assert first == f"error: {side} {tmp_path / 'plain'}: a folder without engine.json, not an engine folder " + (
            "(deploykit build -o DIR)"
        )
        assert len(rest) <= 1 and "Traceback" not in err  # one line (and its hint)


def test_per_output_rtol_on_the_command_line(tmp_path):
    a, b = _model(tmp_path / "a.onnx", 0.0), _model(tmp_path / "b.onnx", 0.0, scale=2.02)  # y 1% off, z equal
    code, out, err = run_cli("parity", str(a), str(b), "--dim", "batch=2", "--rtol", "y:0.011")
    assert code == 0, err
    assert "result: PASS (exit 0) — 2 checks passed" in out
    code, out, err = run_cli("parity", str(a), str(b), "--dim", "batch=2", "--rtol", "y:0.009", "--log-format", "json")
    assert code == 1, err
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert not checks["y vs a.onnx"]["passed"] and checks["z vs a.onnx"]["passed"]  # z keeps the preset
    assert "128 of 128 elements outside rtol 0.009" in checks["y vs a.onnx"]["message"]  # 4 samples x 2 x 16
    code, _, err = run_cli("parity", str(a), str(b), "--rtol", "y:-1")
    assert code == 2 and "--rtol" in err
