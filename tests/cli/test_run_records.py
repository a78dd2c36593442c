"""Run records: one per (name, precision, backend, flavour), never overwritten by another; the
report picks the newest and names the others; a reused gate says it is cached, and --remeasure
measures again without rerunning anything else; progress covers the CPU timing."""

import json

import pytest

import deploykit
from deploykit.errors import UsageError
from deploykit.record import model as records
from deploykit.report import write_html
from deploykit.stages import default_stages
from tests.cli.console import deploykit as run

LOOSE = {"quantize.tolerances.int8.rel_l2": 0.5, "quantize.tolerances.int8.cosine": 0.5}


class Events:
    def __init__(self):
        self.tasks = []

    def event(self, name, **fields):
        pass

    def task(self, description, total):
        import contextlib

        self.tasks.append(description)
        return contextlib.nullcontext(lambda n=1: None)


def test_fp32_and_int8_runs_keep_their_own_records_and_reports(quantizable, tmp_path):
    cfg, store = quantizable
    fp32 = deploykit.convert(cfg, workdir=store).record
    events = Events()
    int8 = deploykit.convert(
        cfg, workdir=store, reporter=events, overrides={"quantize.precision": "int8", **LOOSE}
    ).record
    assert (fp32.identity, int8.identity) == ("tiny.fp32.onnxruntime", "tiny.int8.onnxruntime.onnxruntime")
    assert {p.stem for p in (store / "records").glob("*.json")} >= {fp32.identity, int8.identity}
    assert records.read(store / "records" / f"{fp32.identity}.json").precision == "fp32"  # not overwritten
    assert any(t.startswith("timing FP32 against INT8") for t in events.tasks)  # no frozen bar after calibration
    # every stage of the INT8 run, surgery included, with what it did
    assert [(s.stage, s.status) for s in int8.stages] == [
        ("export", "reused"),
        ("surgery", "reused"),
        ("quantize", "ran"),
        ("build", "ran"),
        ("parity", "ran"),
        ("gate", "ran"),
    ]
    # the report of the name: the newest, with a note naming the other; a precision picks one
    path, note = write_html(store, "tiny", tmp_path / "r.html", default_stages(), with_plots=False)
    assert "tiny.int8.onnxruntime.onnxruntime" in path.read_text() and "tiny.fp32.onnxruntime" in note
    page = write_html(store, "tiny", tmp_path / "f.html", default_stages(), with_plots=False, precision="fp32")[0]
    text = page.read_text()
    assert "deploykit run tiny.fp32.onnxruntime" in text and ">quantize<" not in text
    int8_page = write_html(store, int8.identity, tmp_path / "i.html", default_stages(), with_plots=False)[0].read_text()
    assert ">surgery<" in int8_page and ">quantize<" in int8_page and ">stored<" not in int8_page
    with pytest.raises(UsageError, match="no recorded run of 'tiny' with precision fp8"):
        write_html(store, "tiny", tmp_path / "x.html", default_stages(), precision="fp8")
    # the CLI says which one it took
    proc = run("report", "tiny", "-w", str(store), "-o", str(tmp_path / "c.html"), "--no-plots")
    assert proc.returncode == 0 and "showing the newest, tiny.int8" in proc.stderr


def test_a_reused_gate_says_cached_and_remeasure_reruns_only_the_gate(tiny, tmp_path):
    cfg, store = tiny
    proc = run("convert", str(cfg), "-w", str(store), "--log-format", "json")
    result = json.loads(proc.stdout)
    assert proc.returncode == 0 and result["gate_cached"] is True
    human = run("convert", str(cfg), "-w", str(store), "--report-dir", str(tmp_path / "r"))
    assert "[cached: measured" in human.stdout and "--remeasure" in human.stdout
    assert "(cached: measured by an earlier run)" in (tmp_path / "r" / "summary.md").read_text()
    again = json.loads(run("convert", str(cfg), "-w", str(store), "--remeasure", "--log-format", "json").stdout)
    assert {s["stage"]: s["status"] for s in again["stages"]} == {
        "export": "reused",
        "surgery": "reused",
        "build": "reused",
        "parity": "reused",
        "gate": "ran",
    }
    assert again["gate_cached"] is False


def test_parity_prints_one_row_per_output_and_reference(tiny):
    cfg, store = tiny
    proc = run("parity", str(cfg), "-w", str(store))
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("│ ")]
    table = {tuple(c.strip() for c in r.strip("│ ").split("│")[:2]) for r in rows}
    assert {("features", "onnx"), ("features", "torch"), ("pooled", "onnx"), ("pooled", "torch")} <= table
    assert "(<= 0.0001)" in proc.stdout  # the limit beside the measurement
    assert "parity: PASS" in proc.stdout


def test_a_partial_run_does_not_replace_the_record_of_a_whole_one(tiny):
    cfg, store = tiny
    whole = deploykit.convert(cfg, workdir=store).record
    partial = deploykit.export(cfg, workdir=store).record
    assert [s.stage for s in partial.stages] == ["export"]
    [kept] = records.find(store, whole.identity)
    assert [s.stage for s in kept.stages][-1] == "gate" and "partial" not in kept.details


@pytest.mark.e2e
def test_progress_covers_the_search_and_the_cpu_timing(quantizable):
    """--log-format json events name each long step, so a progress bar never sits still through them."""
    cfg, store = quantizable
    proc = run(
        "quantize",
        str(cfg),
        "-w",
        str(store),
        "--precision",
        "int8",
        "--target",
        "onnxruntime",
        "--auto-repair",
        "--set",
        "quantize.repair.max_iterations=1",
        "--set",
        "quantize.tolerances.int8.rel_l2=1e-9",
        "--log-format",
        "json",
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    events = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    tasks = [e["description"] for e in events if e["event"] == "task_start"]
    assert any(t.startswith("calibrating") for t in tasks), tasks
    assert "mixed-precision search: candidates" in tasks and "timing FP32 against INT8 on this CPU" in tasks, tasks
    ends = {e["description"] for e in events if e["event"] == "task_end"}
    assert set(tasks) <= ends  # every step that started also ended
    assert json.loads(proc.stdout)["verdict"] == "FAIL"
