"""ONNX files as the source, and the file-based stage commands."""

import onnx
import pytest
from onnx import TensorProto, helper

import deploykit
from deploykit.errors import ConfigError, ModelError
from tests.conftest import run_cli


def small_onnx(path, batch="N"):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 2], [0.5, -1, 2, 0.25, 1, 1, -0.5, 3])
    k = helper.make_node("Constant", [], ["k"], value=helper.make_tensor("kv", TensorProto.FLOAT, [], [2.0]))
    graph = helper.make_graph(
        [k, helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Mul", ["m", "k"], ["y"])],
        "g",
        [x],
        [y],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


CONFIG = """
name: s
source: {onnx: model.onnx}
inputs: [{name: INPUT, shape: [batch, 4]}]
dims: {batch: {min: 1, opt: 2, max: 8}}
gate: {warmup: 1, iterations: 5, targets: {default: {fps: 1}}}
"""


def test_onnx_source_runs_every_stage_and_sanitize_folds_constants(tmp_path):
    small_onnx(tmp_path / "model.onnx")
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text(CONFIG.replace("INPUT", "x"))
    result = deploykit.convert(cfg, workdir=tmp_path / "store")
    assert [r.stage for r in result.stages] == ["ingest", "surgery", "build", "parity", "gate"]
    assert result.parity["passed"] and "torch" not in result.parity["references"]
    report = result.artifacts["model"].manifest.summary["passes"][0]
    assert report["pass"] == "sanitize" and report["ops_before"].get("Constant") == 1
    assert "Constant" not in report["ops_after"]


def test_input_the_model_does_not_have_is_a_config_error(tmp_path):
    small_onnx(tmp_path / "model.onnx")
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text(CONFIG.replace("INPUT", "images"))
    code, _, err = run_cli("convert", str(cfg), "-w", str(tmp_path / "store"))
    assert code == 2
    assert "no input 'images'" in err and "its inputs are: x" in err


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_broken_onnx_file_exit_4(tmp_path, damage):
    path = small_onnx(tmp_path / "model.onnx")
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"\x00not onnx\xff" * 10, "empty": b""}[damage])
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text(CONFIG.replace("INPUT", "x"))
    code, _, err = run_cli("convert", str(cfg), "-w", str(tmp_path / "store"))
    assert code == 4, err
    assert "model.onnx" in err and (
        "not a readable ONNX model" in err or "holds no graph" in err or "invalid ONNX" in err
    )


def test_external_data_outside_the_model_folder_is_refused(tmp_path):
    path = small_onnx(tmp_path / "model.onnx")
    model = onnx.load(path)
    w = model.graph.initializer[0]
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("float_data")
    w.external_data.add(key="location", value="../../etc/passwd")
    onnx.save(model, path)
    with pytest.raises(ModelError, match="outside the model's folder"):
        deploykit.convert(path, workdir=tmp_path / "store")


def test_file_commands_build_and_surgery(tmp_path):
    path = small_onnx(tmp_path / "model.onnx")
    code, out, err = run_cli(
        "surgery",
        str(path),
        "--pass",
        "sanitize",
        "-o",
        str(tmp_path / "clean.onnx"),
        "-w",
        str(tmp_path / "store"),
        "--dim",
        "N=1,2,4",
    )
    assert code == 0, err
    assert [n.op_type for n in onnx.load(tmp_path / "clean.onnx").graph.node] == ["MatMul", "Mul"]
    code, out, err = run_cli("build", str(path), "-o", str(tmp_path / "engine"), "-w", str(tmp_path / "store"))
    assert code == 0, err
    assert (tmp_path / "engine" / "engine.json").is_file() and (tmp_path / "engine" / "model.onnx").is_file()
    code, _, err = run_cli("build", str(path), "--dim", "batch=1,2,4", "-w", str(tmp_path / "store"))
    assert code == 2 and "its dynamic dims are: N" in err


def test_unknown_backend_and_unknown_pass(tmp_path):
    path = small_onnx(tmp_path / "model.onnx")
    with pytest.raises(ConfigError, match="config.build.backend: 'tensorflow' is not one of 'onnxruntime', 'tensorrt'"):
        deploykit.convert(path, workdir=tmp_path / "store", build__backend="tensorflow")
    with pytest.raises(ConfigError, match="unknown pass 'sanitise'; did you mean sanitize"):
        deploykit.convert(path, workdir=tmp_path / "store", surgery__passes=["sanitise"])


def test_dangling_input_names_the_node(tmp_path):
    path = small_onnx(tmp_path / "model.onnx")
    model = onnx.load(path)
    model.graph.node[1].input[1] = "nowhere"
    onnx.save(model, path)
    code, _, err = run_cli("build", str(path), "-w", str(tmp_path / "store"))
    assert code == 4
    assert "'nowhere'" in err and "MatMul" in err
