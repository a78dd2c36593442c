"""The quantize stage in the pipeline and on the command line: outputs, caching, bad input."""

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import deploykit
from tests.conftest import run_cli
from tests.quant import models


def write_images(folder: Path, n: int, size: int = 16, seed: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, sample in enumerate(models.images(n, size=size, seed=seed)):
        pixels = (sample["x"][0].transpose(1, 2, 0) * 255).round().astype(np.uint8)
        Image.fromarray(pixels).save(folder / f"img_{i:03d}.png")
    return folder


def write_arrays(folder: Path, arrays: list[np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, a in enumerate(arrays):
        np.save(folder / f"s{i:03d}.npy", a)
    return folder


@pytest.fixture
def onnx_model(tmp_path):
    return models.save(models.cnn((16, 16)), tmp_path / "model.onnx")


def quantize_artifacts(store: Path) -> list[dict]:
    manifests = (
        [json.loads(p.read_text()) for p in (store / "objects").glob("*/manifest.json")]
        if (store / "objects").is_dir()
        else []
    )
    return [m for m in manifests if m["stage"] == "quantize"]


def test_cli_quantize_writes_model_ranges_cache_and_precision_report(tmp_path, onnx_model):
    calib = write_images(tmp_path / "calib", 12)
    code, out, err = run_cli(
        "quantize",
        str(onnx_model),
        "--precision",
        "int8",
        "--target",
        "tensorrt",
        "--calib-data",
        str(calib),
        "-o",
        str(tmp_path / "out"),
        "-w",
        str(tmp_path / "store"),
    )
    assert code == 0, err
    files = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"model.onnx", "ranges.json", "calibration.cache", "precision.json", "manifest.json"} <= files
    assert (tmp_path / "out" / "calibration.cache").read_text().startswith("TRT-101200-EntropyCalibration2\n")
    ranges = json.loads((tmp_path / "out" / "ranges.json").read_text())
    assert ranges["samples"] == 12 and ranges["tensors"]["x"]["max"] <= 1.0
    summary = json.loads((tmp_path / "out" / "manifest.json").read_text())["summary"]
    assert summary["flavour"] == "tensorrt" and summary["check"]["passed"] and summary["evaluate"] == "as_written"
    assert "  int8 for tensorrt" in out and "head_out: rel-L2" in out and "quantize: PASS" in out
    # a quarter of a short stream is held out: the CLI says how many samples set the ranges, how many checked
    assert (summary["range_samples"], summary["check_samples"]) == (9, 3) and ranges["range_samples"] == 9
    assert "ranges from 9 of 12 samples, checked on 3 held out" in out


def test_a_stacked_npz_calibrates_as_its_samples_and_the_cli_says_so(tmp_path, onnx_model):
    """A [24, 3, H, W] file is 24 samples (it was refused as one sample of the wrong shape)."""
    np.savez(tmp_path / "calib.npz", x=np.concatenate([s["x"] for s in models.images(24)]))
    code, out, err = run_cli(
        "quantize",
        str(onnx_model),
        "--precision",
        "int8",
        "--target",
        "onnxruntime",
        "--calib-data",
        str(tmp_path / "calib.npz"),
        "-w",
        str(tmp_path / "store"),
    )
    assert code == 0, err
    assert "holds 24 samples stacked on the first axis of x" in out
    assert "ranges from 18 of 24 samples, checked on 6 held out" in out
    summary = quantize_artifacts(tmp_path / "store")[0]["summary"]
    assert (summary["samples"], summary["range_samples"], summary["check_samples"]) == (24, 18, 6)


def test_unchanged_data_reuses_the_artifact_and_changed_data_recalibrates(tmp_path, onnx_model):
    calib = write_arrays(tmp_path / "calib", [s["x"] for s in models.images(6)])
    kwargs = {
        "workdir": tmp_path / "store",
        "calib_data": calib,
        "quantize__precision": "int8",
        "quantize__target": "onnxruntime",
    }
    from deploykit import api

    first = api.quantize(onnx_model, **kwargs)
    again = api.quantize(onnx_model, **kwargs)
    assert [r.status for r in again.stages][-1] == "reused"
    np.save(calib / "s000.npy", models.images(1, seed=99)[0]["x"])
    changed = api.quantize(onnx_model, **kwargs)
    assert [r.status for r in changed.stages][-1] == "ran"
    assert changed.artifacts["model"].digest != first.artifacts["model"].digest


def test_convert_runs_quantize_between_surgery_and_build_and_parity_passes(tmp_path, onnx_model):
    write_images(tmp_path / "calib", 16)
    write_images(tmp_path / "val", 4, seed=50)
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text("""
name: q
source: {onnx: model.onnx}
inputs: [{name: x, shape: [N, 3, 16, 16]}]
dims: {N: {min: 1, opt: 1, max: 2}}
calibration: {folder: calib, samples: 16}
validation: {folder: val, samples: 4}
quantize: {precision: int8}
gate: {warmup: 1, iterations: 5, allow_missing_target: true}
""")
    result = deploykit.convert(cfg, workdir=tmp_path / "store")
    assert [r.stage for r in result.stages] == ["ingest", "surgery", "quantize", "build", "parity", "gate"]
    assert result.parity["passed"], result.parity.get("failures")
    fp32 = deploykit.convert(cfg, workdir=tmp_path / "store", quantize__precision="fp32")
    assert "quantize" not in [r.stage for r in fp32.stages]


def test_fewer_samples_than_requested_warns_and_proceeds(tmp_path, onnx_model):
    calib = write_images(tmp_path / "calib", 5)
    with pytest.warns(UserWarning, match="5 samples available, 50 requested"):
        code, out, err = run_cli(
            "quantize",
            str(onnx_model),
            "--precision",
            "int8",
            "--calib-data",
            str(calib),
            "--set",
            "calibration.samples=50",
            "-w",
            str(tmp_path / "store"),
        )
    assert code == 0, err
    summary = quantize_artifacts(tmp_path / "store")[0]["summary"]
    assert summary["samples"] == 5
    assert any("5 samples available, 50 requested" in w for w in summary["warnings"])
    assert "5 samples available, 50 requested" in out


def test_int8_without_calibration_data_is_a_config_error(tmp_path, onnx_model):
    code, _, err = run_cli("quantize", str(onnx_model), "--precision", "int8", "-w", str(tmp_path / "store"))
    assert code == 2 and "needs calibration data" in err and "--calib-data" in err
    code, _, err = run_cli("quantize", str(onnx_model), "-w", str(tmp_path / "store"))
    assert code == 2 and "quantize needs a precision" in err


def test_a_quantized_model_missing_its_tolerance_fails_and_auto_repair_fixes_it(tmp_path):
    model = models.save(models.cnn((16, 16), outlier=300.0), tmp_path / "model.onnx")
    calib = write_images(tmp_path / "calib", 16)
    args = [
        "quantize",
        str(model),
        "--precision",
        "int8",
        "--target",
        "tensorrt",
        "--calib-data",
        str(calib),
        "-w",
        str(tmp_path / "store"),
    ]
    code, _, err = run_cli(*args)
    assert code == 1 and "misses its tolerance" in err and "--auto-repair" in err
    code, out, err = run_cli(*args, "--auto-repair", "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert "mixed-precision search:" in out and "raised conv1 " in out and "(passed)" in out
    report = json.loads((tmp_path / "out" / "precision.json").read_text())
    search = report["search"]
    assert "conv1" in search["layer_precisions"] and report["layer_precisions"] == search["layer_precisions"]
    assert search["passed"] and search["table"][0]["action"] == "base" and not search["table"][0]["passed"]
    assert search["stopped"]["code"] in ("passed", "passed_refined") and search["stopped"]["sentence"] == "passed"
    assert all(set(why) == {"code", "sentence"} for why in report["excluded_from_quantization"].values())
    assert (tmp_path / "out" / "base.onnx").is_file() and (tmp_path / "out" / "sensitivity.json").is_file()
    code, _, err = run_cli(
        "report", summary_run_name(tmp_path / "store"), "-w", str(tmp_path / "store"), "-o", str(tmp_path / "r.html")
    )
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "Mixed-precision search: " in page and "quantize.layer_precisions" in page
    section = page[page.index("Mixed-precision search: ") :].split("<h2")[0]
    assert "<code>conv1</code>" in section and "data:image/png;base64," in section  # the Pareto plot


def test_a_spent_search_budget_says_so_and_does_not_suggest_enabling_it(tmp_path):
    model = models.save(models.cnn((16, 16), outlier=300.0), tmp_path / "model.onnx")
    calib = write_images(tmp_path / "calib", 16)
    code, _, err = run_cli(
        "quantize",
        str(model),
        "--precision",
        "int8",
        "--target",
        "onnxruntime",
        "--calib-data",
        str(calib),
        "-w",
        str(tmp_path / "store"),
        "--auto-repair",
        "--set",
        "quantize.repair.max_iterations=1",
    )
    assert code == 1 and "misses its tolerance" in err
    assert "search stopped: evaluation budget spent (1)" in err and "enable quantize.repair" not in err
    assert "high_precision" not in err  # the onnxruntime flavour's float rest is FP32 already


def test_a_passing_mix_no_faster_than_fp32_is_said_plainly(tmp_path, monkeypatch):
    """The onnxruntime flavour's search exists to ship something faster than FP32: when its passing mix
    is not (timed here as a slow stand-in, so the statement does not hang on this CPU's load), the
    stage says which mix, that it passes, and what to do instead."""
    from deploykit.quant import speed

    real = speed.compare_all
    asked = []  # what each timing decides

    def slow(fp32, graphs, sample, level, budget_s=1.0, decide=()):  # every timing: the search's answer and the stage's
        asked.append(decide)
        found = real(fp32, graphs, sample, level, budget_s=0.1)
        return {
            k: speed.SpeedCheck(1.0, 1.5, f.rounds, f.iterations, f.batch, f.evaluator, 0.6, 0.7)
            for k, f in found.items()
        }

    monkeypatch.setattr(speed, "compare_all", slow)
    model = models.save(models.cnn((16, 16), outlier=300.0), tmp_path / "model.onnx")
    calib = write_images(tmp_path / "calib", 16)
    with pytest.warns(UserWarning) as caught:
        code, _, err = run_cli(
            "quantize",
            str(model),
            "--precision",
            "int8",
            "--target",
            "onnxruntime",
            "--calib-data",
            str(calib),
            "-w",
            str(tmp_path / "store"),
            "--auto-repair",
        )
    assert code == 0, err
    said = next(str(w.message) for w in caught if "FP32 on this CPU" in str(w.message))
    assert said in next(m for m in quantize_artifacts(tmp_path / "store"))["summary"]["warnings"]  # and recorded
    assert "the mix the search chose (1 of " in said and "in FP32, the rest INT8) passes parity but is slower" in said
    assert "keep FP32 (--precision fp32)" in said and "Depthwise-heavy" not in said
    from deploykit.quant.sensitivity import TIMED_EDGES

    assert asked == [TIMED_EDGES]  # the search timed its answer (deciding its edges); the stage reused that timing


def _garbage_images(folder: Path) -> Path:
    write_images(folder, 3)
    (folder / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    return folder


BAD_INPUTS = {
    "empty folder": (lambda d: (d / "calib").mkdir() or d / "calib", [], "holds no"),
    "undecodable image": (lambda d: _garbage_images(d / "calib"), [], "broken.png: cannot decode image"),
    "wrong shape": (
        lambda d: write_arrays(d / "calib", [np.zeros((1, 3, 8, 8), np.float32)]),
        [],
        "has shape [1, 3, 8, 8], the model expects ['N', 3, 16, 16]",
    ),
    "wrong dtype": (
        lambda d: write_arrays(d / "calib", [np.zeros((1, 3, 16, 16), np.float64)]),
        [],
        "has dtype float64, the model expects float32",
    ),
    "nan": (
        lambda d: write_arrays(d / "calib", [np.full((1, 3, 16, 16), np.nan, np.float32)]),
        [],
        "contains NaN or Inf",
    ),
    "missing excluded node": (
        lambda d: write_images(d / "calib", 4),
        ["--set", "quantize.exclude_nodes=[conv9]"],
        "exclude_nodes names 'conv9', which the model does not have",
    ),
    "int4 without matmul": (
        lambda d: write_images(d / "calib", 4),
        ["--precision", "int4"],
        "int4 quantizes MatMul/Gemm weights, and the model has none",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_4_naming_the_thing_and_writes_nothing(tmp_path, onnx_model, case):
    make, extra, message = BAD_INPUTS[case]
    calib = make(tmp_path)
    args = [
        "quantize",
        str(onnx_model),
        "--precision",
        "int8",
        "--calib-data",
        str(calib),
        "-w",
        str(tmp_path / "store"),
        "-o",
        str(tmp_path / "out"),
        *extra,
    ]
    if "--precision" in extra:
        args[2:4] = []
    code, _, err = run_cli(*args)
    assert code == 4, err
    assert message in " ".join(err.split())
    assert not quantize_artifacts(tmp_path / "store")
    assert not any((tmp_path / "store" / "tmp").iterdir()) and not (tmp_path / "out").exists()


def test_a_model_with_qdq_is_refused_with_exit_4(tmp_path):
    calib = write_images(tmp_path / "calib", 4)
    model = models.save(models.cnn((16, 16)), tmp_path / "model.onnx")
    args = ["--calib-data", str(calib), "-w", str(tmp_path / "store"), "--target", "tensorrt"]
    code, _, err = run_cli("quantize", str(model), "--precision", "int8", "-o", str(tmp_path / "q"), *args)
    assert code == 0, err
    code, _, err = run_cli("quantize", str(tmp_path / "q" / "model.onnx"), "--precision", "int8", *args)
    assert code == 4 and "already quantized" in err and "already_quantized: pass" in err


def test_onnxruntime_int8_is_timed_against_fp32_and_a_slower_model_is_called_out(tmp_path, onnx_model, monkeypatch):
    """The summary holds the CPU comparison; when INT8 is not faster the warning reaches the CLI and report."""
    from deploykit.quant import speed

    calib = write_images(tmp_path / "calib", 12)
    args = ["quantize", str(onnx_model), "--precision", "int8", "--calib-data", str(calib)]
    code, out, err = run_cli(*args, "-w", str(tmp_path / "store"))
    assert code == 0, err
    summary = quantize_artifacts(tmp_path / "store")[0]["summary"]
    assert summary["flavour"] == "onnxruntime" and summary["cpu_speed"]["fp32_ms"] > 0
    assert "CPU: FP32" in out and "interleaved rounds" in out
    assert summary["cpu_speed"]["rounds"] >= speed.DECIDED_ROUNDS

    slow = speed.SpeedCheck(1.0, 1.4, rounds=5, iterations=3, batch=1, evaluator="onnxruntime (test double)")
    monkeypatch.setattr(speed, "compare", lambda *a, **k: slow)
    with pytest.warns(UserWarning, match="INT8 is slower than FP32 on this CPU"):
        code, out, err = run_cli(*args, "-w", str(tmp_path / "store2"))
    assert code == 0, err
    summary = quantize_artifacts(tmp_path / "store2")[0]["summary"]
    assert any("INT8 is slower than FP32" in w for w in summary["warnings"])
    code, _, err = run_cli(
        "report", summary_run_name(tmp_path / "store2"), "-w", str(tmp_path / "store2"), "-o", str(tmp_path / "r.html")
    )
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "Quantization: INT8 (onnxruntime flavour)" in page and "INT8 is slower than FP32" in page
    assert "1.400 ms" in page


def test_tensorrt_flavour_is_not_timed_on_the_cpu(tmp_path, onnx_model):
    calib = write_images(tmp_path / "calib", 12)
    code, _, err = run_cli(
        "quantize",
        str(onnx_model),
        "--precision",
        "int8",
        "--target",
        "tensorrt",
        "--calib-data",
        str(calib),
        "-w",
        str(tmp_path / "store"),
    )
    assert code == 0, err
    assert quantize_artifacts(tmp_path / "store")[0]["summary"]["cpu_speed"] is None


def summary_run_name(store: Path) -> str:
    return next((store / "runs").glob("*.json")).stem


DEPTHWISE_CONFIG = """
name: dw
source: {onnx: model.onnx}
inputs: [{name: x, shape: [N, 3, 32, 32]}]
dims: {N: {min: 1, opt: 1, max: 1}}
calibration: {folder: calib, samples: 40}
validation: {folder: val, samples: 8}
quantize: {precision: int8, target: onnxruntime, tolerances: {int8: {rel_l2: 0.04, cosine: 0.999}}}
parity: {tasks: {probability_map: [{output: prob, min_iou: 0.975}]}}
gate: {warmup: 1, iterations: 5, allow_missing_target: true}
"""


@pytest.mark.e2e
def test_search_passed_implies_parity_passed_through_convert_with_validation_data(tmp_path):
    """The quantize check and the search are judged on parity's validation data, metrics and
    tolerances: plain INT8 fails at the quantize stage, the search passes there, and then parity
    passes with the very numbers the quantize stage computed."""
    models.save(models.depthwise(), tmp_path / "model.onnx")
    write_images(tmp_path / "calib", 40, size=32)
    write_images(tmp_path / "val", 8, size=32, seed=9)
    cfg = tmp_path / "deploykit.yaml"
    cfg.write_text(DEPTHWISE_CONFIG)
    args = ["convert", str(cfg), "-w", str(tmp_path / "store")]
    code, _, err = run_cli(*args, "--set", "quantize.repair.auto=false")  # the plain graph, not searched unasked
    assert code == 1 and "misses its tolerance against the FP32 graph on 8 samples of validation data" in err
    code, out, err = run_cli(*args, "--set", "quantize.repair.enabled=true")
    assert code == 0, out + err
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "store" / "objects").glob("*/manifest.json")]
    searched = next(m for m in manifests if m["stage"] == "quantize" and m["summary"]["repair"] is not None)
    q = searched["summary"]
    assert q["repair"]["passed"] and q["layer_precisions"] and q["check"]["samples"] == 8
    judged = next(m for m in manifests if m["stage"] == "parity" and m["parents"]["model"] == searched["digest"])
    parity = json.loads((tmp_path / "store" / "objects" / judged["digest"] / "parity.json").read_text())
    assert parity["passed"] and parity["samples"] == 8, parity["failures"]
    assert parity["outputs"]["prob"]["onnx"]["metrics"]["rel_l2"] == pytest.approx(
        q["check"]["metrics"]["prob"]["rel_l2"], rel=1e-6
    )
    iou = next(t["metrics"]["iou"] for t in parity["tasks"] if t["reference"] == "onnx")
    assert iou == pytest.approx(q["check"]["tasks"][0]["metrics"]["iou"], rel=1e-9) and iou >= 0.975


def test_the_search_cache_lives_in_the_artifact_and_a_tighter_rerun_reuses_it(tmp_path):
    model = models.save(models.cnn((16, 16), outlier=300.0), tmp_path / "model.onnx")
    calib = write_images(tmp_path / "calib", 16)
    args = [
        "quantize",
        str(model),
        "--precision",
        "int8",
        "--target",
        "tensorrt",
        "--calib-data",
        str(calib),
        "-w",
        str(tmp_path / "store"),
        "--auto-repair",
    ]
    code, _, err = run_cli(*args)
    assert code == 0, err
    first = next(m for m in quantize_artifacts(tmp_path / "store") if m["summary"]["repair"])
    assert first["summary"]["repair"]["evaluations"]["cached"] == 0 and "sensitivity.json" in first["files"]
    code, _, err = run_cli(*args, "--set", "quantize.tolerances.int8={rel_l2: 0.05, cosine: 0.995}")
    assert code in (0, 1), err
    second = next(
        m for m in quantize_artifacts(tmp_path / "store") if m["summary"]["repair"] and m["digest"] != first["digest"]
    )
    ev1, ev2 = first["summary"]["repair"]["evaluations"], second["summary"]["repair"]["evaluations"]
    assert second["summary"]["repair"]["cache_key"] == first["summary"]["repair"]["cache_key"]
    # the ranking and causal measurements came back: only the search's own states ran again (a count
    # against the first run's would depend on CPU timing, which orders the groups by latency cost)
    assert ev2["cached"] >= 3 and ev1["fresh"] > 0 and ev2["fresh"] <= second["summary"]["repair"]["iterations"]
    cache = tmp_path / "store" / "objects" / second["digest"] / "sensitivity.json"  # the newest is read
    text = cache.read_text()
    edited = text.replace('"rel_l2": 0', '"rel_l2": 9')
    assert edited != text
    cache.write_text(edited)  # an edited cache is never trusted
    code, _, err = run_cli(*args, "--set", "quantize.tolerances.int8={rel_l2: 0.04, cosine: 0.995}")
    assert code == 4 and "content changed after the artifact was written" in err


def test_a_rerun_at_another_tolerance_reads_the_calibration_statistics_and_changed_data_does_not(tmp_path, onnx_model):
    calib = write_arrays(tmp_path / "calib", [s["x"] for s in models.images(12)])
    args = ["quantize", str(onnx_model), "--precision", "int8", "--target", "onnxruntime"]
    args += ["--calib-data", str(calib), "-w", str(tmp_path / "store")]
    code, _, err = run_cli(*args)
    assert code == 0, err
    (first,) = quantize_artifacts(tmp_path / "store")
    assert "statistics.npz" in first["files"] and first["summary"]["statistics_key"]
    code, _, err = run_cli(*args, "--set", "quantize.tolerances.int8={rel_l2: 0.5, cosine: 0.9}")
    assert code == 0, err
    (second,) = [m for m in quantize_artifacts(tmp_path / "store") if m["digest"] != first["digest"]]
    assert second["summary"]["statistics_key"] == first["summary"]["statistics_key"]
    assert any("calibration statistics reused" in n for n in second["summary"]["notes"])
    assert (second["summary"]["samples"], second["summary"]["range_samples"]) == (
        first["summary"]["samples"],
        first["summary"]["range_samples"],
    )
    ranges = [
        json.loads((tmp_path / "store" / "objects" / m["digest"] / "ranges.json").read_text()) for m in (first, second)
    ]
    assert ranges[0] == ranges[1]
    np.save(calib / "s000.npy", models.images(1, seed=99)[0]["x"])  # other samples: a pass of their own
    code, _, err = run_cli(*args, "--set", "quantize.tolerances.int8={rel_l2: 0.5, cosine: 0.9}")
    assert code == 0, err
    (third,) = [
        m for m in quantize_artifacts(tmp_path / "store") if m["digest"] not in (first["digest"], second["digest"])
    ]
    assert third["summary"]["statistics_key"] != first["summary"]["statistics_key"]
    assert not any("statistics reused" in n for n in third["summary"]["notes"])


def test_a_quantize_run_digests_its_calibration_files_once(tmp_path, onnx_model, monkeypatch):
    """The recipe key digests them; the statistics key reads those facts from the run's context."""
    from deploykit.data.sources import DataSource

    calib = write_arrays(tmp_path / "calib", [s["x"] for s in models.images(8)])
    real, calls = DataSource.fingerprint, []
    monkeypatch.setattr(DataSource, "fingerprint", lambda self: calls.append(self.what) or real(self))
    args = ["quantize", str(onnx_model), "--precision", "int8", "--target", "onnxruntime"]
    code, _, err = run_cli(*args, "--calib-data", str(calib), "-w", str(tmp_path / "store"))
    assert code == 0, err
    assert calls.count("calibration") == 1
    (first,) = quantize_artifacts(tmp_path / "store")
    assert first["summary"]["statistics_key"]
