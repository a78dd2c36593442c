"""The gate stage: trials and spread, sweep, targets, baseline comparison, CI outputs."""

import json
import shutil
from xml.etree import ElementTree as ET

import pytest

from deploykit.errors import ConfigError, TargetMissed, UsageError
from deploykit.stages.gate import time_iterations, warm_up
from tests.conftest import run_cli
from tests.standins import StandInSession, gate, gate_model


@pytest.fixture
def model(tmp_path):
    return gate_model(tmp_path)


def test_trials_give_median_and_spread_after_timed_warmup(model):
    g = gate(model).gate
    assert len(g["trials"]) == 3 and len(g["trials_ms"]) == 3 and all(len(t) == 20 for t in g["trials_ms"])
    p50s = sorted(t["p50_ms"] for t in g["trials"])
    assert g["latency"]["p50_ms"] == p50s[1]  # the median trial
    assert g["spread"]["p50_ms"]["min"] == p50s[0] and g["spread"]["p50_ms"]["max"] == p50s[2]
    assert g["fps_best_case"] == pytest.approx(1000.0 / g["latency"]["p50_ms"])  # labelled, not judged
    assert g["fps"] == sorted(g["fps_trials"])[1]  # wall-clock throughput, the median trial
    for fps, trial in zip(g["fps_trials"], g["trials_ms"], strict=True):  # the wall holds every call and more
        assert fps <= 1000.0 * len(trial) / sum(trial) * (1 + 1e-6)
    assert g["warmup"]["iterations"] >= 3 and g["warmup"]["seconds"] >= 0.01
    assert g["schema"] == "deploykit.gate/3" and g["latency"]["n"] == 60
    assert g["shapes"] == {"x": [1, 8]} and g["batch"] == 1  # the opt shape, as timed


def test_batch_sweep_and_concurrency(model):
    g = gate(model, gate__batches=[2, 4], gate__concurrency=2).gate
    assert [s["batch"] for s in g["sweep"]] == [2, 4]
    for s in g["sweep"]:
        assert s["fps_best_case"] == pytest.approx(s["batch"] * 1000.0 / s["latency"]["p50_ms"])
        assert s["shapes"] == {"x": [s["batch"], 8]}
        assert "trials_ms" not in s
    assert g["concurrency"]["streams"] == 2 and g["concurrency"]["throughput"] > 0


def test_sweep_batch_outside_the_dims_is_a_config_error(model):
    with pytest.raises(ConfigError, match=r"gate.batches: 8 is outside input 'x''s batch range \[1, 4\]"):
        gate(model, gate__batches=[8])


def test_timing_loop_holds_only_the_call():
    calls = []
    out = time_iterations(lambda: calls.append(1), 50)
    assert len(out) == 50 == len(calls) and all(t >= 0 for t in out)
    n, seconds = warm_up(lambda: None, 5, 0.02)
    assert n >= 5 and seconds >= 0.02


def test_progress_is_reported_between_trials_only(model):
    events = []

    class Spy:
        def event(self, name, **fields):
            pass

        def task(self, description, total):
            import contextlib

            @contextlib.contextmanager
            def cm():
                yield lambda n=1: events.append((description, n))

            return cm()

    gate(model, reporter=Spy())
    assert [e for e in events if e[0].startswith("timing")] == [("timing batch 1", 1)] * 3


# -- targets -------------------------------------------------------------------------------------------


def test_latency_target_and_junit_has_one_testcase_per_model_and_target(model, tmp_path):
    with pytest.raises(TargetMissed, match=r"p99 \d+\.\d+ ms \(median of 3 trials\) > target 1e-06 ms"):
        gate(model, gate__targets={"default": {"latency_ms_p99": 1e-6, "fps": 1}})
    code, _, _ = run_cli(
        "gate",
        str(model),
        "-w",
        str(tmp_path / "store"),
        "--set",
        "gate.targets.default.latency_ms_p99=1e-6",
        "--report-dir",
        str(tmp_path / "r"),
    )
    assert code == 1
    suite = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    cases = {c.get("name"): c for c in suite.findall("testcase") if c.get("classname") == "deploykit.m.gate"}
    assert sorted(cases) == ["m on default batch 1: fps", "m on default batch 1: latency_ms_p99"]  # model x platform
    assert suite.get("failures") == "1" and cases["m on default batch 1: fps"].find("failure") is None
    assert "latency_ms_p99" in cases["m on default batch 1: latency_ms_p99"].find("failure").get("message")
    assert int(suite.get("tests")) == len(suite.findall("testcase")) > 2  # parity's testcases are there too
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "**FAIL**" in summary and "trial range" in summary and "(exit 1)" in summary


def test_target_with_neither_fps_nor_latency_exits_2(model):
    code, _, err = run_cli(
        "gate", str(model), "-w", str(model.parent / "store"), "--set", "gate.targets={cpu: {batch: 2}}"
    )
    assert code == 2 and "gate.targets.cpu: a target needs 'fps', 'latency_ms_p99' or 'deadline_ms'" in err


def test_missing_target_is_an_error_unless_allowed(model):
    code, _, err = run_cli(
        "gate", str(model), "-w", str(model.parent / "store"), "--set", "gate.targets={nvidia-h200: {fps: 1}}"
    )
    assert code == 2 and "no target for this platform" in err and "--allow-missing-target" in err
    code, _, _ = run_cli(
        "gate",
        str(model),
        "-w",
        str(model.parent / "store"),
        "--set",
        "gate.targets={nvidia-h200: {fps: 1}}",
        "--allow-missing-target",
        "--report-dir",
        str(model.parent / "r"),
    )
    assert code == 0
    assert ET.parse(model.parent / "r" / "junit.xml").getroot().get("skipped") == "1"


def test_target_for_another_precision_is_refused(model):
    with pytest.raises(ConfigError, match="gate.targets.default is for int8 builds; this run builds fp32"):
        gate(model, gate__targets={"default": {"fps": 1, "precision": "int8"}})


# -- baseline ------------------------------------------------------------------------------------------


def baseline_from(model, tmp_path, edit=None):
    report = gate(model).gate
    if edit:
        edit(report)
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(report))
    return path


def test_baseline_from_the_same_model_is_compared_and_recorded(model, tmp_path):
    path = baseline_from(model, tmp_path)
    try:
        g = gate(model, gate__baseline=str(path), gate__batches=[2]).gate
    except TargetMissed as e:  # a microsecond model can drift between two runs on a shared machine
        g = e.result.gate
    assert g["baseline"]["path"] == str(path) and len(g["baseline"]["digest"]) == 64
    assert [c["metric"] for c in g["baseline"]["checks"]] == ["fps", "p99 latency"]  # the baseline had no sweep
    for c in g["baseline"]["checks"]:
        assert c["slowdown_at_least"] <= c["slowdown"] and c["message"].startswith(c["metric"])


def test_regression_beyond_the_spread_fails_and_says_by_how_much(model, tmp_path):
    def far_faster(r):
        # margins no load covers: the baseline is measured in this run too, possibly while another test
        # worker loads the machine, and p99 spreads far more than fps (x10 fps and /100 p99 were covered)
        r["fps_trials"] = [f * 1000 for f in r["fps_trials"]]
        for t in r["trials"]:
            t["p99_ms"] /= 10_000

    path = baseline_from(model, tmp_path, far_faster)
    code, _, err = run_cli(
        "gate",
        str(model),
        "-w",
        str(model.parent / "store"),
        "--baseline",
        str(path),
        "--report-dir",
        str(tmp_path / "r"),
    )
    assert code == 1
    assert "gate failed: fps" in err and "% slower, at least" in err
    suite = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    gate_cases = [c.get("name") for c in suite.findall("testcase") if c.get("classname") == "deploykit.m.gate"]
    assert gate_cases == ["m on default batch 1: fps", "m baseline fps", "m baseline p99 latency"]
    failed = [c.get("name") for c in suite.findall("testcase") if c.find("failure") is not None]
    assert failed == ["m baseline fps", "m baseline p99 latency"] and suite.get("failures") == "2"
    assert "% slower" in (tmp_path / "r" / "summary.md").read_text()


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda r: r.update(model="other"), "it measured model 'other', this run is 'm'"),
        (lambda r: r.update(platform="cpu:Other CPU"), "it measured platform 'cpu:Other CPU'"),
        (lambda r: r["device"].update(model="Other CPU"), "it was measured on cpu 'Other CPU'"),
        (lambda r: r.update(batch=4), "it measured batch 4, this run measures batch 1"),
        (lambda r: r.pop("schema"), "not a deploykit.gate/3 report"),
        (lambda r: r.update(schema="deploykit.gate/2"), "older reports measured fps as batch / median latency"),
    ],
)
def test_baseline_from_another_model_or_platform_is_refused(model, tmp_path, edit, reason):
    path = baseline_from(model, tmp_path, edit)
    with pytest.raises(UsageError, match="cannot be compared|not a deploykit") as e:
        gate(model, gate__baseline=str(path))
    assert reason in str(e.value)


def test_missing_baseline_file_exits_2(model, tmp_path):
    code, _, err = run_cli("gate", str(model), "-w", str(tmp_path / "store"), "--baseline", str(tmp_path / "no.json"))
    assert code == 2 and "no.json: no such file" in err


def test_reports_are_strict_json(model):
    result = gate(model)
    text = result.artifacts["gate"].file("gate.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    shutil.rmtree(model.parent / "store")


def test_a_missing_target_fails_before_any_stage_runs(model):
    with pytest.raises(ConfigError, match="no target for this platform"):
        gate(model, gate__targets={"nvidia-h200": {"fps": 1}})
    assert not list((model.parent / "store" / "objects").iterdir())  # nothing was ingested or built


def test_sessions_with_an_engine_only_runner_report_both_timings(tiny, standin_clock):
    """A session that can time the engine alone (TensorRT) gets both numbers; targets use end to end."""
    from deploykit.config import load_config
    from deploykit.progress import SilentReporter
    from deploykit.stages.gate import measure_batch

    class TwoClocks(StandInSession):
        def engine_timed_runner(self, feeds, **options):
            return lambda: self.clock.advance_ms(0.5)

    cfg, _ = tiny
    session = TwoClocks(standin_clock, [2.0])
    session.runner_info = {"mode": "cuda-graph"}
    out = measure_batch(session, load_config(cfg, {"gate.trials": 2, "gate.iterations": 5}), 1, SilentReporter())
    assert out["engine_only"]["latency"]["p50_ms"] == pytest.approx(0.5)
    assert out["latency"]["p50_ms"] == pytest.approx(2.0) and out["fps"] == pytest.approx(500.0)
    assert out["engine_only"]["runner"] == {"mode": "cuda-graph"}
    assert out["engine_only"]["fps_best_case"] == pytest.approx(2000.0)
