from pathlib import Path

import pytest

from deploykit.config import load_config
from deploykit.errors import ConfigError
from tests.conftest import TINY_CONFIG, run_cli


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "deploykit.yaml"
    p.write_text(text)
    return p


def test_defaults_are_real_values(tmp_path):
    cfg = load_config(write(tmp_path, TINY_CONFIG.replace("EXPORTER", "auto")))
    assert cfg.export.opset == 18 and cfg.build.backend == "onnxruntime"
    assert cfg.shape(cfg.inputs[0], "max") == (3, 3, 16, 16)
    assert cfg.gate.targets["default"].fps == 1.0
    assert cfg.base_dir == tmp_path.resolve()


def test_unknown_key_lists_valid_keys_and_close_match(tmp_path):
    text = TINY_CONFIG.replace("EXPORTER", "auto").replace("warmup: 2", "warmpu: 2")
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text))
    msg = str(e.value)
    assert "config.gate: unknown key 'warmpu'" in msg and "did you mean 'warmup'" in msg
    assert "iterations" in msg and "targets" in msg


@pytest.mark.parametrize(
    "text, expected",
    [
        ("name: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "expected a mapping"),
        (
            TINY_CONFIG.replace("EXPORTER", "auto").replace("{fps: 1}", "{fps: fast}"),
            "gate.targets.default.fps: expected a number",
        ),
        (TINY_CONFIG.replace("EXPORTER", "auto").replace("min: 1, opt: 1", "min: 2, opt: 1"), "min <= opt <= max"),
        (TINY_CONFIG.replace("EXPORTER", "auto").replace("max: 3", "max: 0"), "min <= opt <= max"),
        (TINY_CONFIG.replace("EXPORTER", "cuda"), "export.exporter: 'cuda' is not one of"),
        (
            TINY_CONFIG.replace("EXPORTER", "auto").replace("{fps: 1}", "{batch: 2}"),
            "needs 'fps', 'latency_ms_p99' or 'deadline_ms'",
        ),
        (TINY_CONFIG.replace("EXPORTER", "auto").replace("[batch, 3", "[bacth, 3"), "dim 'bacth'"),
    ],
)
def test_bad_config_names_the_field(tmp_path, text, expected):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text))
    assert expected in str(e.value)
    assert str(tmp_path) in str(e.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_overrides_are_validated_like_the_file(tmp_path):
    path = write(tmp_path, TINY_CONFIG.replace("EXPORTER", "auto"))
    assert load_config(path, {"gate.iterations": 7}).gate.iterations == 7
    with pytest.raises(ConfigError, match="gate.iterations: expected an integer"):
        load_config(path, {"gate.iterations": "many"})


def test_config_show_prints_resolved_defaults(tmp_path):
    path = write(tmp_path, TINY_CONFIG.replace("EXPORTER", "auto"))
    code, out, _ = run_cli("config", "show", str(path), "--set", "gate.iterations=5")
    assert code == 0
    assert "opset: 18" in out and "iterations: 5" in out and "optimization_level: extended" in out


def test_bad_config_exit_code_is_2_and_message_is_one_line(tmp_path):
    path = write(tmp_path, TINY_CONFIG.replace("EXPORTER", "auto").replace("warmup", "warmpu"))
    code, _, err = run_cli("convert", str(path), "-w", str(tmp_path / "store"))
    assert code == 2
    assert err.startswith("error:") and "warmpu" in err and "hint:" in err
    assert not (tmp_path / "store").exists()  # nothing was written for a bad config


def test_error_text_with_brackets_is_printed_verbatim(tmp_path):
    path = write(
        tmp_path, TINY_CONFIG.replace("EXPORTER", "auto").replace("[batch, 3, 16, 16]", "[batch, 3, 16, [bold]]")
    )
    code, _, err = run_cli("convert", str(path), "-w", str(tmp_path / "store"))
    assert code == 2 and "['bold']" in err  # rich must not swallow it as markup
    assert "expected an integer or a string" in err


def test_a_calibration_method_for_a_precision_without_ranges_is_refused_at_load(tmp_path):
    path = write(tmp_path, TINY_CONFIG.replace("EXPORTER", "auto") + "quantize: {method: entropy}\n")
    assert load_config(path).quantize.method == "entropy"  # fp32: the stage does not run, nothing to refuse
    assert load_config(path, {"quantize.precision": "int8"}).quantize.method == "entropy"
    for precision in ("fp16", "int4"):
        with pytest.raises(
            ConfigError, match=f"method 'entropy' does not apply to precision {precision}: only int8 and fp8 calibrate"
        ):
            load_config(path, {"quantize.precision": precision})
    assert load_config(path, {"quantize.precision": "fp16", "quantize.method": "max"}).quantize.method == "max"


def test_one_tolerance_type_a_partial_quantize_tolerance_keeps_the_other_defaults(tmp_path):
    from deploykit.config import Tolerance, parity_preset

    path = write(
        tmp_path,
        TINY_CONFIG.replace("EXPORTER", "auto") + "quantize: {precision: int8, tolerances: {int8: {rel_l2: 0.05}}}\n",
    )
    q = load_config(path).quantize
    assert isinstance(q.tolerance(), Tolerance) and (q.tolerance().rel_l2, q.tolerance().cosine) == (0.05, 0.995)
    preset = parity_preset(q)
    assert (preset.rel_l2, preset.cosine, preset.rel_floor, preset.max_abs) == (0.05, 0.995, 1e-2, None)
    with pytest.raises(ConfigError, match="cosine must be in"):
        load_config(path, {"quantize.tolerances.int8": {"cosine": 1.5}})
    with pytest.raises(ConfigError, match="rel_l2 must be >= 0"):
        load_config(path, {"parity.default": {"rel_l2": -1}})
    assert load_config(path, {"parity.default": {"cosine": float("-inf")}}).parity.default.cosine == float("-inf")


@pytest.mark.parametrize(
    ("sets", "refused"),
    [
        ({"build.backend": "tensorrt", "quantize.precision": "int8", "quantize.target": "onnxruntime"}, True),
        ({"build.backend": "tensorrt", "quantize.precision": "int8", "quantize.target": "tensorrt"}, False),
        ({"build.backend": "tensorrt", "quantize.precision": "int8"}, False),  # auto follows the backend
        ({"build.backend": "tensorrt", "quantize.target": "onnxruntime"}, False),  # fp32: nothing is quantized
        ({"build.backend": "onnxruntime", "quantize.precision": "int8", "quantize.target": "tensorrt"}, False),
    ],
)
def test_the_onnxruntime_flavour_for_a_tensorrt_build_is_refused_at_load(tmp_path, sets, refused):
    cfg = write(tmp_path, TINY_CONFIG.replace("EXPORTER", "dynamo"))
    if not refused:
        load_config(cfg, sets)
        return
    with pytest.raises(
        ConfigError, match="quantize.target: 'onnxruntime' writes INT8 Q/DQ .* tensorrt backend refuses"
    ):
        load_config(cfg, sets)
    code, _, err = run_cli("config", "show", str(cfg), *(f"--set={k}={v}" for k, v in sets.items()))
    assert code == 2 and "quantize.target=tensorrt" in err
