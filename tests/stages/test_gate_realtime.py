"""The gate's real-time verdicts, on a stand-in session and clock (tests/standins.py): fps judged on
wall-clock throughput, deadlines with miss rate and runs of misses, the timed batch and shapes, and
trtexec's timing flags. Every number below is scripted, so no machine load can change a verdict."""

import re
from xml.etree import ElementTree as ET

import pytest

from deploykit.config import load_config
from deploykit.errors import ConfigError, TargetMissed
from deploykit.progress import SilentReporter
from deploykit.report import markdown, terminal
from deploykit.stages.gate import measure_batch, timing_warnings
from tests.conftest import run_cli
from tests.standins import StandInSession, gate, gate_model, standin_engine


@pytest.fixture
def model(tmp_path):
    return gate_model(tmp_path)


def scripted(monkeypatch, clock, latencies):
    session = StandInSession(clock, latencies)
    standin_engine(monkeypatch, session)
    return session


def test_fps_is_judged_on_wall_clock_throughput_not_the_best_case(model, monkeypatch, standin_clock):
    scripted(monkeypatch, standin_clock, [1.0] * 19 + [101.0])  # one stall per 20 runs
    with pytest.raises(TargetMissed) as e:
        gate(model, gate__targets={"default": {"fps": 500}})
    g, record = e.value.result.gate, e.value.result.record
    assert g["fps_best_case"] == pytest.approx(1000.0)  # batch / median latency: would have passed
    assert g["fps"] == pytest.approx(20 / 0.120)  # 20 runs in 120 ms of wall clock: judged
    check = g["checks"][0]
    assert check["measured"] == g["fps"] and not check["passed"] and "wall-clock" in check["statistic"]
    line = next(x for x in terminal.verdict_lines(record) if x.startswith("gate:"))
    assert line.index("166.7 FPS wall-clock") < line.index("best case 1000.0 FPS")
    assert "wall-clock fps 166.7 < 500" in line
    md = markdown.render(record)
    assert md.index("**FPS** (wall-clock throughput") < md.index("best case: batch / median latency")
    assert "max (every iteration) | 101.000 ms" in md


def test_a_deadline_reports_misses_runs_and_the_worst_case(model, monkeypatch, standin_clock, tmp_path):
    scripted(monkeypatch, standin_clock, [1, 1, 1, 9, 9, 9, 1, 1, 1, 1])
    code, _, err = run_cli(
        "gate",
        str(model),
        "-w",
        str(model.parent / "store"),
        "--set",
        "gate.targets={default: {deadline_ms: 5, max_miss_rate: 0.25}}",
        "--report-dir",
        str(tmp_path / "r"),
    )
    assert code == 1 and "deadline 5 ms: 18 of 60 frames late (30.00%; longest run 3) > allowed 25%" in err
    suite = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    case = next(c for c in suite.findall("testcase") if c.get("name") == "m on default batch 1: deadline 5 ms")
    assert "miss rate 0.3 > 0.25" in case.find("failure").get("message")
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "deadline 5 ms: late frames | 18 of 60 (30.00%), longest run 3" in summary
    g = load_json(tmp_path / "r" / "gate.json")
    assert g["worst_case"]["max_ms"] == 9.0 and g["worst_case"]["jitter_ms"] == pytest.approx(8.0)
    assert g["deadline"]["longest_miss_run"] == 3 and g["checks"][0]["statistic"].startswith("share of frames")

    scripted(monkeypatch, standin_clock, [1, 1, 1, 9, 9, 9, 1, 1, 1, 1])
    passed = gate(model, gate__targets={"default": {"deadline_ms": 5, "max_miss_rate": 0.3}}, rerun=("gate",))
    assert passed.passed and passed.gate["deadline"]["miss_rate"] == pytest.approx(0.3)


def test_the_html_report_plots_latency_over_time_with_the_deadline(model, monkeypatch, standin_clock):
    from deploykit.report import html, plots

    scripted(monkeypatch, standin_clock, [1, 1, 1, 9, 9, 9, 1, 1, 1, 1])
    result = gate(model, gate__targets={"default": {"deadline_ms": 5, "max_miss_rate": 0.5}})
    page = html.render_page(result.record)
    assert "deadline 5 ms: late frames" in page and "p99.9 (every iteration)" in page
    if plots.available():
        assert page.count("<img") == 4  # histogram, percentiles, latency over time; parity: its one output
        assert plots.latency_over_time(result.gate).startswith("data:image/png;base64,")


def test_bad_deadline_fields_exit_2_naming_the_field(model):
    for text, says in (
        ("{deadline_ms: 0}", "deadline_ms must be a positive number"),
        ("{deadline_ms: .nan}", "deadline_ms must be a positive number of milliseconds, got nan"),
        ("{deadline_ms: 5, max_miss_rate: 2}", "max_miss_rate must be a share from 0 to 1"),
    ):
        code, _, err = run_cli(
            "gate", str(model), "-w", str(model.parent / "store"), "--set", f"gate.targets.default={text}"
        )
        assert code == 2 and "gate.targets.default" in err and says in err, err
        assert len(err.strip().splitlines()) <= 2  # one line (and its hint), no traceback


# -- the timed batch and shapes ------------------------------------------------------------------


def test_shapes_set_the_timed_batch_on_a_config(model, monkeypatch, standin_clock):
    scripted(monkeypatch, standin_clock, [1.0])
    code, _, err = run_cli("gate", str(model), "-w", str(model.parent / "store"), "--shapes", "x:3x8")
    assert code == 0, err
    g = _gate_json(model)
    assert g["batch"] == 3 and g["shapes"] == {"x": [3, 8]}
    code, _, err = run_cli("gate", str(model), "-w", str(model.parent / "store"), "--opt-shapes", "x:2x8")
    assert code == 0, err
    assert _gate_json(model)["shapes"] == {"x": [2, 8]}
    result = gate(model, gate__targets={"default": {"fps": 1, "batch": 4}})  # a target's batch wins
    assert result.gate["batch"] == 4 and result.gate["shapes"] == {"x": [4, 8]}


def test_shapes_set_the_timed_batch_on_an_onnx_source(model, monkeypatch, standin_clock):
    scripted(monkeypatch, standin_clock, [1.0])
    onnx_file = model.parent / "model.onnx"
    code, _, err = run_cli(
        "gate",
        str(onnx_file),
        "-w",
        str(model.parent / "store2"),
        "--shapes",
        "x:2x8",
        "--report-dir",
        str(model.parent / "r"),
    )
    assert code == 0, err
    g = load_json(model.parent / "r" / "gate.json")
    assert g["batch"] == 2 and g["shapes"] == {"x": [2, 8]}


# -- trtexec's timing flags -----------------------------------------------------------------------


def test_use_cuda_graph_is_refused_on_the_cpu_before_anything_runs(model):
    for flag in ("--useCudaGraph", "--use-cuda-graph"):
        code, _, err = run_cli("gate", str(model), "-w", str(model.parent / "store"), flag)
        assert code == 2 and "gate.cuda_graph: on (--useCudaGraph): the onnxruntime backend cannot honour it" in err
        assert "hint: drop --useCudaGraph, or time on a backend that can (--backend tensorrt on a GPU)" in err
        assert "__" not in err  # no Python parameter on the command line
    assert not (model.parent / "store" / "objects").exists() or not list((model.parent / "store" / "objects").iterdir())


def test_the_timing_refusal_names_python_parameters_in_python(model):
    """deploykit.convert / deploykit.gate say what a Python caller typed, not the CLI flags."""
    import deploykit

    for call in (
        lambda: gate(model, gate__cuda_graph="on"),  # deploykit.convert
        lambda: deploykit.gate(model, workdir=model.parent / "store", gate__cuda_graph="on", progress=False),
    ):
        with pytest.raises(ConfigError) as e:
            call()
        assert e.value.message.startswith(
            "gate.cuda_graph: on (gate__cuda_graph='on'): the onnxruntime backend cannot honour it"
        )
        assert (
            e.value.hint
            == "drop gate__cuda_graph='on', or time on a backend that can (build__backend='tensorrt' on a GPU)"
        )
        assert "--" not in str(e.value)  # no command-line flag in Python


@pytest.mark.parametrize("warmup_flag", ["--warmUp", "--warmup-ms"])  # trtexec's spelling and ours
def test_timing_flags_set_their_fields(model, monkeypatch, standin_clock, warmup_flag):
    session = scripted(monkeypatch, standin_clock, [1, 1, 1, 1, 6])
    code, _, err = run_cli(
        "gate",
        str(model),
        "-w",
        str(model.parent / "store"),
        "--noDataTransfers",
        "--avgRuns",
        "5",
        warmup_flag,
        "50",
        "--iterations",
        "20",
    )
    assert code == 0, err
    g = _gate_json(model)
    assert g["timed"]["data_transfers"] is False and "no host<->device copies" in g["timed"]["what"]
    assert g["timed"]["avg_runs"] == 5 and g["latency"]["p50_ms"] == pytest.approx(2.0)  # every mean of 5 is 2
    assert g["worst_case"]["p50_ms"] == 1.0 and g["worst_case"]["max_ms"] == 6.0  # every run, not averaged
    assert g["warmup"]["min_seconds"] == 0.05 and g["warmup"]["seconds"] >= 0.05
    assert session.options[-1] == {}  # cuda_graph auto: nothing asked of the session


def test_no_data_transfers_times_the_engine_alone_where_a_session_can(tiny, standin_clock):
    class WithDevice(StandInSession):
        def engine_timed_runner(self, feeds, **options):
            self.options.append({"engine": "alone", **options})
            return lambda: self.clock.advance_ms(0.5)

    cfg, _ = tiny
    session = WithDevice(standin_clock, [2.0])
    out = measure_batch(
        session, load_config(cfg, {"gate.data_transfers": False, "gate.cuda_graph": "on"}), 1, SilentReporter()
    )
    assert out["latency"]["p50_ms"] == pytest.approx(0.5) and "engine_only" not in out
    assert session.options == [{"engine": "alone", "cuda_graph": "on"}]
    assert out["timed"]["what"] == "engine alone (no host<->device copies)"
    warned = timing_warnings({"timed": {"runner": {"mode": "enqueue", "why": "capture failed"}}}, "on")
    assert warned == ["gate.cuda_graph is on but the engine was enqueued without a CUDA graph: capture failed"]


def load_json(path):
    import json

    return json.loads(path.read_text())


def _gate_json(model):
    """The gate report of the newest run of config ``m`` in the test's store."""
    records = sorted((model.parent / "store" / "records").glob("m.*.json"), key=lambda p: p.stat().st_mtime)
    return load_json(records[-1])["details"]["gate"]


# -- a measurement taken under load -----------------------------------------------------------------

BUSY = {"cpus": 2, "loadavg1": 7.5, "cpu_pressure": 0.6, "loaded": True}


def test_a_reused_gate_taken_under_load_says_remeasure_in_every_view(model, monkeypatch, standin_clock, tmp_path):
    """The load the gate reads is a stand-in (load_between scripted busy), so the verdict of 'under load'
    never depends on this machine; the second run reuses that measurement and every view says so."""
    from deploykit.report import html
    from deploykit.stages import gate as gate_stage

    scripted(monkeypatch, standin_clock, [1.0])
    monkeypatch.setattr(gate_stage, "load_between", lambda before, after: dict(BUSY))
    store, reports = model.parent / "store", tmp_path / "r"
    code, _, err = run_cli("gate", str(model), "-w", str(store))
    assert code == 0, err
    code, out, err = run_cli("gate", str(model), "-w", str(store), "--report-dir", str(reports))
    assert code == 0, err
    under_load = "taken under load (CPU pressure 0.6, load 7.5 on 2 CPUs): --remeasure on a quiet machine"
    table = re.sub(r"[│\s]+", " ", out)  # the stage table may wrap the note over several rows
    assert under_load in table and "--rerun" not in out
    warned = "gate: measured under load (CPU pressure 0.6, load 7.5 on 2 CPUs): the numbers may be low; --remeasure"
    assert f"warning: {warned} on a quiet machine" in out.splitlines()
    records = sorted((store / "records").glob("m.*.json"), key=lambda p: p.stat().st_mtime)
    record = load_json(records[-1])
    [gate_row] = [s for s in record["stages"] if s["stage"] == "gate"]
    assert gate_row["status"] == "reused" and under_load in gate_row["note"]
    assert f"{warned} on a quiet machine" in record["warnings"]
    summary = (reports / "summary.md").read_text()
    assert under_load in summary and "--rerun" not in summary
    from deploykit.record.model import RunRecord

    page = html.render_page(RunRecord.from_dict(record))
    assert under_load in page and "--rerun" not in page
