"""Profiling on the CPU backend for real: ONNX Runtime's profiler on an engine built here, the peaks cache,
``deploykit profile``, ``gate.profile`` and the report's plots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from deploykit.profiling import ProfileOptions
from deploykit.profiling import ort as ort_profile
from deploykit.profiling.cost import layer_cost
from deploykit.profiling.peaks import Peaks, cached_peaks, measure_cpu
from deploykit.profiling.run import engine_feeds, profile_engine
from tests.conftest import run_cli

FAST = ProfileOptions(iterations=5, warmup=2, top=3)


def conv_net(path: Path) -> Path:
    """conv(3->16, 3x3) -> relu -> maxpool 2x2 -> conv(16->32, 3x3) -> global average pool; dynamic batch."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weight(name: str, shape: tuple[int, ...]):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name
        )

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1] * 4, name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1] * 4, name="conv2"),
        helper.make_node("GlobalAveragePool", ["c2"], ["y"], name="gap"),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_net",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32, 1, 1])],
        [weight("w1", (16, 3, 3, 3)), weight("w2", (32, 16, 3, 3))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from deploykit.backends.onnxruntime import OnnxRuntimeBackend
    from deploykit.config import BuildConfig

    folder = tmp_path_factory.mktemp("engine")
    OnnxRuntimeBackend().build(conv_net(folder.parent / "conv_net.onnx"), BuildConfig(), folder)
    return folder


TEST_PEAKS = Peaks("test", {"fp32": 50e9}, {4 << 20: 40e9, 64 << 20: 10e9})


def test_onnxruntime_profile_has_every_node_of_the_optimized_graph(engine: Path, monkeypatch) -> None:
    import onnx

    monkeypatch.setattr("deploykit.profiling.run.machine_peaks", lambda record, layers, d: (TEST_PEAKS, ""))
    report = profile_engine(engine, engine_feeds(engine, {"batch": 2}), FAST, model="conv_net", batch=2)
    graph = onnx.load(str(engine / "model.onnx")).graph
    assert {r["name"] for r in report["layers"]} == {n.name for n in graph.node}  # relu1 fused into conv1
    ops = {r["name"]: r["op_type"] for r in report["layers"]}
    assert ops["conv1"] == "FusedConv" and ops["pool1"] == "MaxPool"
    assert all(r["runs"] == FAST.iterations and r["ms"] > 0 for r in report["layers"])  # warm-up runs dropped
    conv2 = next(r for r in report["layers"] if r["name"] == "conv2")
    assert conv2["inputs"][0] == ["fp32", [2, 16, 16, 16]]  # shapes as ONNX Runtime ran them
    assert conv2["flops"] == 2 * (2 * 32 * 16 * 16) * (16 * 3 * 3)
    pool = next(r for r in report["layers"] if r["name"] == "pool1")
    assert pool["flops"] == (2 * 16 * 16 * 16) * 4  # kernel_shape read from the engine's graph
    assert report["top"] == [r["name"] for r in report["layers"][:3]]
    assert [r["ms"] for r in report["layers"]] == sorted((r["ms"] for r in report["layers"]), reverse=True)
    assert abs(sum(r["share"] for r in report["layers"]) - 1) < 1e-9
    assert report["run_ms"] > 0 and report["backend"] == "onnxruntime" and "floor_ms" in report


def event(name: str, ts: int, dur: int, op: str = "Conv", cat: str = "Node") -> dict:
    return {
        "cat": cat,
        "name": name,
        "ts": ts,
        "dur": dur,
        "args": {
            "op_name": op,
            "provider": "CPUExecutionProvider",
            "input_type_shape": [{"float": [1, 3, 8, 8]}, {"float": [4, 3, 3, 3]}],
            "output_type_shape": [{"float": [1, 4, 8, 8]}],
        },
    }


def test_events_are_assigned_to_runs_warmups_dropped_and_repeats_summed() -> None:
    runs = [{"cat": "Session", "name": "model_run", "ts": t, "dur": 100} for t in (0, 1000, 2000)]
    events = runs + [
        event("a_kernel_time", 10, 50),
        event("a_kernel_time", 1010, 30),
        event("a_kernel_time", 1060, 20),
        event("a_fence_before", 1005, 1),
        event("a_kernel_time", 2010, 40),
        event("b_kernel_time", 2050, 8, op="Relu"),
    ]
    layers, run_ms = ort_profile.layers_from_events(events, warmup=1, attributes={})
    by_name = {layer.name: layer for layer in layers}
    assert by_name["a"].times_ms == [0.05, 0.04]  # run 2: two executions summed; run 1 (warm-up) dropped
    assert by_name["b"].times_ms == [0.0, 0.008]  # not executed in run 2
    assert run_ms == 0.1 and by_name["a"].inputs[1].shape == (4, 3, 3, 3) and by_name["a"].precision == "fp32"
    assert layer_cost(by_name["a"]).flops == 2 * (4 * 8 * 8) * (3 * 3 * 3)


def test_events_without_a_run_after_warmup_are_refused() -> None:
    from deploykit.errors import ArtifactCorrupt

    with pytest.raises(ArtifactCorrupt, match="no model_run after the warm-up"):
        ort_profile.layers_from_events([{"cat": "Session", "name": "model_run", "ts": 0, "dur": 1}], warmup=1)


# -- peaks --------------------------------------------------------------------------------------------


def test_peaks_are_measured_once_then_read_from_the_cache(tmp_path: Path) -> None:
    calls: list[tuple[set[str], bool]] = []

    def measure(precisions: set[str], copy: bool) -> dict:
        calls.append((set(precisions), copy))
        return {
            "gemm_flops": {p: 1e9 * (1 + len(calls)) for p in precisions},
            "bandwidth": {1024: 5e9} if copy else {},
            "method": {"copy": "fake"},
        }

    key = {"machine": "test"}
    first = cached_peaks(tmp_path, key, "dev", {"fp32"}, measure, {"fp32", "int8"})
    again = cached_peaks(tmp_path, key, "dev", {"fp32", "fp16"}, measure, {"fp32", "int8"})  # fp16: not measurable
    assert calls == [({"fp32"}, True)] and first == again
    with_int8 = cached_peaks(tmp_path, key, "dev", {"int8"}, measure, {"fp32", "int8"})
    assert calls[1] == ({"int8"}, False)  # only what is missing; copy bandwidth kept
    assert with_int8.gemm_flops == {"fp32": 2e9, "int8": 3e9} and with_int8.bandwidth == {1024: 5e9}
    other = cached_peaks(tmp_path, {"machine": "other"}, "dev", {"fp32"}, measure, {"fp32"})
    assert len(calls) == 3 and other.gemm_flops == {"fp32": 4e9}
    for f in tmp_path.glob("peaks-*.json"):
        f.write_text("{broken")  # a corrupt cache is measured again, not trusted
    cached_peaks(tmp_path, key, "dev", {"fp32"}, measure, {"fp32"})
    assert len(calls) == 4


def test_cpu_peaks_are_measured_through_onnxruntime() -> None:
    peaks = measure_cpu({"fp32", "int8"}, copy=False, n=128)
    assert set(peaks["gemm_flops"]) == {"fp32", "int8"} and all(v > 1e6 for v in peaks["gemm_flops"].values())
    assert "onnxruntime backend" in peaks["method"]["gemm_fp32"]


# -- command line, gate, report ----------------------------------------------------------------------


def test_cli_profile_of_an_onnx_file_writes_json_markdown_and_html(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr("deploykit.profiling.run.machine_peaks", lambda record, layers, d: (TEST_PEAKS, ""))
    model = conv_net(tmp_path / "conv_net.onnx")
    code, out, err = run_cli(
        "profile",
        str(model),
        "--dim",
        "batch=1,2,4",
        "-w",
        str(tmp_path / "store"),
        "--iterations",
        "5",
        "--warmup",
        "1",
        "--top",
        "2",
        "-o",
        str(tmp_path / "out"),
    )
    assert code == 0, err
    assert "conv2" in out and "roofline floor" in out
    report = json.loads((tmp_path / "out" / "profile.json").read_text())
    assert report["batch"] == 2 and report["layers"][0]["inputs"][0][1][0] == 2
    assert "| layer | op | precision |" in (tmp_path / "out" / "profile.md").read_text()
    assert (tmp_path / "out" / "profile.html").read_text().count("data:image/png;base64,") == 2


def test_cli_profile_of_an_engine_folder_and_of_nothing(engine: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("deploykit.profiling.run.machine_peaks", lambda record, layers, d: (None, "off in this test"))
    code, out, err = run_cli("profile", str(engine), "-w", str(tmp_path / "store"), "--iterations", "3", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["batch"] == 1 and report["roofline_note"] == "off in this test"
    code, _, err = run_cli("profile", str(tmp_path), "-w", str(tmp_path / "store"))
    assert code == 4 and "not an engine folder" in err and "Traceback" not in err


def test_gate_profile_writes_the_profile_and_the_report_shows_it(tmp_path: Path, monkeypatch) -> None:
    import deploykit
    from deploykit.api import write_report

    monkeypatch.setattr("deploykit.profiling.run.machine_peaks", lambda record, layers, d: (TEST_PEAKS, ""))
    model = conv_net(tmp_path / "conv_net.onnx")
    result = deploykit.convert(
        model,
        workdir=tmp_path / "store",
        dims={"batch": (1, 1, 2)},
        gate__profile=True,
        gate__iterations=5,
        gate__trials=1,
        gate__warmup=1,
    )
    gate = result.artifacts["gate"]
    profile = json.loads(gate.file("profile.json").read_text())
    assert json.loads(gate.file("gate.json").read_text())["profile"]["top"] == profile["top"]
    from deploykit.report import markdown

    assert "Per-layer profile" in markdown.render(result.record)  # the run's summary.md
    html = write_report(result.name, tmp_path / "report.html", workdir=tmp_path / "store").read_text()
    assert "Per-layer profile (onnxruntime)" in html and "roofline" in html
    plain = deploykit.convert(
        model, workdir=tmp_path / "store", dims={"batch": (1, 1, 2)}, gate__iterations=5, gate__trials=1, gate__warmup=1
    )
    assert plain.artifacts["gate"].digest != gate.digest  # gate.profile enters the gate's recipe key
    assert not (plain.artifacts["gate"].path / "profile.json").exists()


def test_plots_use_the_figure_api_and_leave_pyplot_alone(tmp_path: Path) -> None:
    """Rendering must not switch the process's matplotlib backend (a notebook's) nor import pyplot."""
    code = (
        "import json, sys, matplotlib\n"
        "from deploykit.report import plots\n"
        f"p = json.loads(open({str(tmp_path / 'p.json')!r}).read())\n"
        # The raw rcParams value: matplotlib.get_backend() would itself resolve the backend through pyplot.
        "raw = lambda: dict.__getitem__(matplotlib.rcParams, 'backend')\n"
        "before = raw()\n"
        "uris = [plots.profile_layers(p), plots.roofline(p)]\n"
        "assert all(u.startswith('data:image/png;base64,') and len(u) > 2000 for u in uris)\n"
        "assert raw() == before, (before, raw())\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    from deploykit.profiling.layers import Layer, Tensor
    from deploykit.profiling.summary import summarize

    layer = Layer(
        "conv",
        "Conv",
        "fp32",
        [Tensor("fp32", (1, 8, 16, 16)), Tensor("fp32", (8, 8, 3, 3))],
        [Tensor("fp32", (1, 8, 16, 16))],
        times_ms=[0.2],
    )
    relu = Layer(
        "relu", "Relu", "fp32", [Tensor("fp32", (1, 8, 16, 16))], [Tensor("fp32", (1, 8, 16, 16))], times_ms=[0.05]
    )
    (tmp_path / "p.json").write_text(json.dumps(summarize([layer, relu], TEST_PEAKS, backend="onnxruntime")))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
