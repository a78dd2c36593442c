"""deploykit stack: the file's bad input (one line naming the entry, exit 2, before anything runs), the
frame arithmetic, and the harness's verdicts on stand-in sessions (test doubles that sleep a fixed time)
with margins no machine load can cross: a model that sleeps 30 ms per frame at 50 Hz cannot keep up
however fast the machine is; one that sleeps 2 ms at 10 Hz meets a 5-second deadline however busy it is."""

import json
import time
from xml.etree import ElementTree as ET

import numpy as np
import pytest

from deploykit.errors import ConfigError
from deploykit.graph.run import TensorSpec
from deploykit.stack import models as stack_models
from deploykit.stack.pacing import next_frame, released
from deploykit.stack.run import run_stack
from tests.conftest import run_cli


class Sleeper:
    """A test double of a session: each run sleeps ``ms`` (or raises every ``fail_every``-th run) and
    returns its output as ONNX Runtime's runner does (a list); ``infer`` returns it by name."""

    evaluator = "sleeping session (test double)"

    def __init__(self, ms: float, fail_every: int = 0) -> None:
        self.ms, self.fail_every, self.runs = ms, fail_every, 0
        self.inputs = [TensorSpec("x", "float32", (1, 4))]
        self.outputs = [TensorSpec("y", "float32", (1, 4))]

    def output(self):
        return np.zeros((1, 4), np.float32)

    def sleep_ms(self):
        return self.ms

    def timed_runner(self, feeds, **options):
        def run():
            self.runs += 1
            if self.fail_every and self.runs % self.fail_every == 0:
                raise RuntimeError("stand-in failure")
            time.sleep(self.sleep_ms() / 1000)
            return [self.output()]

        return run

    def infer(self, feeds):
        return {"y": self.output()}


class TurnsNaN(Sleeper):
    """Its runs' outputs hold NaN from the ``after``-th run on; its untimed ``infer`` stays finite (so only
    the look at the timed run's own outputs can catch it)."""

    def __init__(self, ms: float, after: int) -> None:
        super().__init__(ms)
        self.after = after

    def output(self):
        return np.full((1, 4), np.nan if self.runs >= self.after else 0.0, np.float32)

    def infer(self, feeds):
        return {"y": np.zeros((1, 4), np.float32)}


class ReturnsNothing(Sleeper):
    """TensorRT's timed runner returns nothing: only the untimed inference after the run is looked at."""

    def timed_runner(self, feeds, **options):
        run = super().timed_runner(feeds, **options)
        return lambda: run() and None

    def infer(self, feeds):
        return {"y": np.array([np.inf], np.float32)}


class Grows(Sleeper):
    """Keeps 4 MiB of every run (written, so resident): a leak."""

    def __init__(self, ms: float) -> None:
        super().__init__(ms)
        self.kept = []

    def output(self):
        self.kept.append(b"x" * (4 << 20))
        return super().output()


class StepsUp(Sleeper):
    """Sleeps ``ms`` per run until the ``after``-th run, then ``slow_ms``: a latency that drifts."""

    def __init__(self, ms: float, slow_ms: float, after: int) -> None:
        super().__init__(ms)
        self.slow_ms, self.after = slow_ms, after

    def sleep_ms(self):
        return self.slow_ms if self.runs > self.after else self.ms


def write_stack(tmp_path, text):
    (tmp_path / "m.onnx").write_bytes(b"")  # the file check needs a file; stand-in sessions replace loading
    path = tmp_path / "stack.yaml"
    path.write_text(text)
    return path


def standins(monkeypatch, sessions):
    def load_all(spec, workdir, reporter=None):
        return {
            n: stack_models.Loaded(n, sessions[n], {"x": np.zeros((1, 4), np.float32)}, "stand-in") for n in spec.models
        }

    monkeypatch.setattr(stack_models, "load_all", load_all)


GOOD = """
name: car
duration_s: 1.0
alone_s: 0.3
models:
  detector: {model: m.onnx, rate_hz: 10, deadline_ms: 5000}
  planner: {model: m.onnx, consumes: detector, deadline_ms: 5000, e2e_deadline_ms: 10000}
  segmenter: {model: m.onnx, rate_hz: 50, deadline_ms: 40}
"""


# -- the frame arithmetic ----------------------------------------------------------------------------


def test_releases_and_the_frame_after_a_slow_one():
    assert released(0.0, 1.0, 0.1) == 10 and released(0.0, 1.05, 0.1) == 11 and released(0.0, 0.0, 0.1) == 0
    assert next_frame(0, 0.0, 0.1, 0.05, 10) == (1, 0)  # done early: wait for frame 1
    assert next_frame(0, 0.0, 0.1, 0.15, 10) == (1, 0)  # frame 1 arrived meanwhile: run it now
    assert next_frame(0, 0.0, 0.1, 0.35, 10) == (3, 2)  # 1 and 2 dropped, 3 is the newest
    assert next_frame(7, 0.0, 0.1, 2.0, 10) == (9, 1)  # nothing past the phase's last frame


# -- bad input -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "edit, says",
    [
        ("detector: {model: nope.onnx, rate_hz: 10}", "models.detector.model: nope.onnx not found"),
        ("detector: {model: m.onnx, rate_hz: 0}", "models.detector.rate_hz: 0 is not a positive, finite number"),
        ("detector: {model: m.onnx, rate_hz: .nan}", "models.detector.rate_hz: nan is not a positive, finite number"),
        ("detector: {model: m.onnx}", "models.detector.rate_hz: missing"),
        (
            "detector: {model: m.onnx, rate_hz: 10, consumes: planner}\n  planner: {model: m.onnx, consumes: detector}",
            "models.detector.rate_hz: detector consumes 'planner'",
        ),
        (
            "detector: {model: m.onnx, consumes: planner}\n  planner: {model: m.onnx, consumes: detector}",
            "the chain has a cycle (detector -> planner -> detector)",
        ),
        ("detector: {model: m.onnx, consumes: radar}", "models.detector.consumes: no model named 'radar'"),
        (
            "detector: {model: m.onnx, rate_hz: 10, deadline_ms: -1}",
            "models.detector.deadline_ms: -1 is not a positive",
        ),
        ("detector: {model: m.onnx, rate_hz: 10, rate: 5}", "did you mean 'rate_hz'"),
    ],
)
def test_bad_stack_files_exit_2_naming_the_entry_before_anything_runs(tmp_path, edit, says):
    path = write_stack(tmp_path, f"models:\n  {edit}\n")
    code, out, err = run_cli("stack", str(path), "-w", str(tmp_path / "store"))
    assert code == 2 and says in err, err
    assert len(err.strip().splitlines()) <= 2 and not (tmp_path / "store").exists()


def test_a_duration_past_the_limit_exits_2(tmp_path):
    path = write_stack(tmp_path, "duration_s: 4000\nmodels:\n  a: {model: m.onnx, rate_hz: 1}\n")
    code, _, err = run_cli("stack", str(path))
    assert code == 2 and "past limits.max_duration_s (3600 s)" in err
    from deploykit.stack.run import _spec

    assert _spec(path, 10.0, 0.0).duration_s == 10.0  # --duration replaces the file's, and is checked the same way
    with pytest.raises(ConfigError, match="past limits.max_duration_s"):
        _spec(path, 5000.0, None)


@pytest.mark.parametrize("cap", ["90000", "1e9", ".inf", "0"])
def test_the_file_cannot_raise_its_duration_limit_past_the_hard_maximum(tmp_path, cap):
    path = write_stack(
        tmp_path, f"duration_s: 10\nlimits: {{max_duration_s: {cap}}}\nmodels:\n  a: {{model: m.onnx, rate_hz: 1}}\n"
    )
    code, _, err = run_cli("stack", str(path), "-w", str(tmp_path / "store"))
    assert code == 2 and "limits.max_duration_s:" in err and "hard maximum of 86400 s (24 h)" in err, err
    assert not (tmp_path / "store").exists()


def test_a_file_may_raise_its_duration_limit_up_to_the_hard_maximum(tmp_path):
    from deploykit.stack.spec import load_stack

    path = write_stack(
        tmp_path, "duration_s: 7200\nlimits: {max_duration_s: 86400}\nmodels:\n  a: {model: m.onnx, rate_hz: 1}\n"
    )
    assert load_stack(path).duration_s == 7200


def test_a_deadline_below_the_best_case_fails_at_once(tmp_path, monkeypatch):
    standins(monkeypatch, {"a": Sleeper(20.0)})
    path = write_stack(tmp_path, "duration_s: 60\nmodels:\n  a: {model: m.onnx, rate_hz: 10, deadline_ms: 1}\n")
    start = time.monotonic()
    code, _, err = run_cli("stack", str(path))
    assert code == 2 and "models.a.deadline_ms: 1 ms is below the model's measured best case" in err
    assert time.monotonic() - start < 50  # it did not run the 60-second stack first


# -- verdicts on stand-in sessions ------------------------------------------------------------------


def test_a_stack_reports_each_model_and_fails_on_the_one_that_cannot_keep_up(tmp_path, monkeypatch):
    sessions = {"detector": Sleeper(2.0), "planner": Sleeper(1.0), "segmenter": Sleeper(30.0)}
    standins(monkeypatch, sessions)
    path = write_stack(tmp_path, GOOD)
    code, out, err = run_cli("stack", str(path), "--report-dir", str(tmp_path / "r"))
    assert code == 1 and "stack failed: deadline 40 ms:" in err
    result = json.loads((tmp_path / "r" / "stack.json").read_text())
    assert result["exit_code"] == 1 and result["verdict"] == "FAIL"
    seg, det, plan = (result["models"][n] for n in ("segmenter", "detector", "planner"))
    assert seg["dropped"] > 0 and seg["deadline"]["misses"] >= seg["dropped"]  # 30 ms a frame at 50 Hz
    assert det["deadline"]["misses"] == 0 and det["completed"] + det["dropped"] == 10
    assert plan["completed"] <= det["completed"] and plan["consumes"] == "detector"
    assert det["alone"]["completed"] + det["alone"]["dropped"] == 3 and det["slowdown"]["p50"] > 0
    chain = result["chains"]["detector -> planner"]
    assert chain["frames"] == plan["completed"] and chain["latency"]["p50_ms"] >= plan["latency"]["p50_ms"]
    failed = [c["name"] for c in result["checks"] if not c["passed"]]
    assert failed == ["segmenter: deadline 40 ms"]
    suite = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    assert suite.get("failures") == "1" and int(suite.get("tests")) == len(result["checks"])
    names = {c.get("name") for c in suite.findall("testcase")}
    assert {
        "detector: deadline 5000 ms",
        "planner: errors",
        "detector -> planner: end-to-end deadline 10000 ms",
    } <= names
    assert suite.get("skipped") == "3"  # a 1-s run is too short to judge drift: reported, not judged
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "FAIL (exit 1)" in summary and "| segmenter | 50 |" in summary
    assert "for 1 s; each alone first for 0.3 s." in summary and "| detector | " in summary.split("Soak of")[1]
    assert "resident memory" in summary and "NaN/Inf every 1 s" in summary
    assert "failed" in (tmp_path / "r" / "report.html").read_text()
    assert out.splitlines()[0].startswith("stack: FAIL") and out.splitlines()[-1].startswith("result: FAIL (exit 1)")


def test_the_python_api_returns_a_result_with_a_notebook_view(tmp_path, monkeypatch):
    import deploykit

    standins(monkeypatch, {"a": Sleeper(1.0), "b": Sleeper(1.0, fail_every=3)})
    path = write_stack(
        tmp_path,
        "duration_s: 0.5\nalone_s: 0\nmodels:\n  a: {model: m.onnx, rate_hz: 20}\n  b: {model: m.onnx, rate_hz: 20}\n",
    )
    result = deploykit.stack(path)
    assert not result.passed and result.exit_code == 1
    assert [c.name for c in result.failed_checks] == ["b: errors"]
    assert result.models["b"]["errors"] >= 2 and "stand-in failure" in result.models["b"]["first_error"]
    assert "<table>" in result._repr_html_() and "exit 1" in result._repr_html_()
    assert repr(result).splitlines()[-1].startswith("result: FAIL (exit 1)")
    assert "alone" not in result.models["a"]


def test_a_gpu_stack_without_tensorrt_is_an_environment_problem(tmp_path):
    from deploykit.backends import get_backend

    if get_backend("tensorrt", require_available=False).availability().available:
        pytest.skip("TensorRT is installed here, so device: cuda loads instead of exiting 3 (no test runs it)")
    path = write_stack(tmp_path, "device: cuda\nmodels:\n  a: {model: m.onnx, rate_hz: 10}\n")
    code, _, err = run_cli("stack", str(path))
    assert code == 3 and "stack device cuda: the tensorrt backend is unavailable" in err


def test_a_real_onnx_model_builds_once_and_runs_on_its_own_thread_budget(tmp_path):
    """Real ONNX Runtime sessions (no speed asserted: the deadline is 10 s)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "mm.onnx")
    stack = {
        "duration_s": 0.5,
        "alone_s": 0.2,
        "models": {
            "a": {"model": str(tmp_path / "mm.onnx"), "rate_hz": 20, "deadline_ms": 10000, "threads": 1},
            "b": {"model": str(tmp_path / "mm.onnx"), "consumes": "a", "threads": 1},
        },
    }
    first = run_stack(stack, workdir=tmp_path / "store")
    again = run_stack(stack, workdir=tmp_path / "store")
    assert first.passed and again.passed and "(ran)" in first.models["a"]["source"]
    assert "(reused)" in again.models["a"]["source"] and again.models["b"]["source"].endswith("(reused)")
    assert first.models["a"]["completed"] + first.models["a"]["dropped"] == 10 and first.models["a"]["threads"] == 1
    assert first.soak["rss"]["samples"] >= 2 and first.soak["rss"]["last_mib"] > 0  # sampled as it ran
    a = first.models["a"]["soak"]["nonfinite"]
    assert a["bad"] == 0 and a["checks"] >= 2  # ONNX Runtime's runner returns its outputs: looked at in the run too


def test_bad_python_input_names_the_entry():
    with pytest.raises(ConfigError, match="models.a.rate_hz: 0 is not a positive"):
        run_stack({"models": {"a": {"model": __file__.replace(".py", ".yaml"), "rate_hz": 0}}})


# -- the soak's checks (soak: the gate's SoakLimits) ------------------------------------------------


def soak_stack(tmp_path, models, soak="", duration=1.0):
    lines = "".join(f"  {n}: {{model: m.onnx, rate_hz: {hz}}}\n" for n, hz in models.items())
    return write_stack(tmp_path, f"duration_s: {duration}\nalone_s: 0\nsoak: {{{soak}}}\nmodels:\n{lines}")


def checks(result):
    return {c.name: c for c in result.checks}


def test_nan_in_the_outputs_a_timed_run_returned_fails_the_nan_check(tmp_path, monkeypatch):
    import deploykit

    standins(monkeypatch, {"a": TurnsNaN(1.0, after=8), "b": Sleeper(1.0)})
    result = deploykit.stack(soak_stack(tmp_path, {"a": 20, "b": 20}, "check_every_s: 0.05"))
    c = checks(result)
    assert not c["a: NaN/Inf"].passed and c["a: NaN/Inf"].measured >= 1  # its infer() is finite: the run's own outputs
    assert c["a: NaN/Inf"].codes == ("nonfinite",) and c["b: NaN/Inf"].codes == ()
    assert "output 'y' at " in result.models["a"]["soak"]["nonfinite"]["first"]
    assert c["b: NaN/Inf"].passed and result.models["b"]["soak"]["nonfinite"]["checks"] >= 2
    assert result.exit_code == 1 and "a: NaN/Inf" in [x.name for x in result.failed_checks]


def test_a_runner_that_returns_nothing_is_checked_by_one_untimed_inference_after_the_run(tmp_path, monkeypatch):
    import deploykit

    standins(monkeypatch, {"trt": ReturnsNothing(1.0)})
    result = deploykit.stack(soak_stack(tmp_path, {"trt": 20}))
    n = result.models["trt"]["soak"]["nonfinite"]
    assert n == {"checks": 1, "bad": 1, "first": "output 'y' in the untimed inference after the run"}
    assert not checks(result)["trt: NaN/Inf"].passed


def test_a_leaking_model_fails_the_resident_memory_check(tmp_path, monkeypatch):
    standins(monkeypatch, {"leak": Grows(1.0)})
    path = soak_stack(tmp_path, {"leak": 20}, "max_rss_growth_mib: 8, check_every_s: 0.1")
    code, out, err = run_cli("stack", str(path), "--report-dir", str(tmp_path / "r"))
    result = json.loads((tmp_path / "r" / "stack.json").read_text())
    rss = next(c for c in result["checks"] if c["name"] == "all models: resident memory growth")
    assert code == 1 and not rss["passed"] and rss["measured"] > 8 and rss["limit"] == 8  # ~80 MiB kept in 1 s
    assert rss["codes"] == ["above_limit"]
    assert result["soak"]["rss"]["samples"] >= 5 and result["soak"]["limits"]["max_rss_growth_mib"] == 8
    assert "resident memory" in out.splitlines()[0] and "allowed +8" in out.splitlines()[0]
    suite = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    case = next(c for c in suite.findall("testcase") if c.get("name") == "all models: resident memory growth")
    assert case.get("classname") == "deploykit.stack.stack" and case.find("failure") is not None
    assert "| all models: resident memory growth | **FAIL** |" in (tmp_path / "r" / "summary.md").read_text()


def test_a_latency_that_steps_up_fails_the_drift_check(tmp_path, monkeypatch):
    """1 ms a frame, then 60 ms (at 10 Hz, 1-s windows of a 3-s phase): judged and failed at any load."""
    standins(monkeypatch, {"a": StepsUp(1.0, 60.0, after=5 + 15)})  # 5 warm-up runs, then 15 fast frames
    path = soak_stack(tmp_path, {"a": 10}, "window_s: 1", duration=3.0)
    code, out, err = run_cli("stack", str(path), "--report-dir", str(tmp_path / "r"))
    result = json.loads((tmp_path / "r" / "stack.json").read_text())
    drift = result["models"]["a"]["soak"]["drift"]
    assert drift["judged"] and drift["window_s"] == 1.0 and drift["first_frames"] >= 5 <= drift["last_frames"]
    assert drift["last_p50_ms"] >= 60 and drift["drift"] > 0.1
    check = next(c for c in result["checks"] if c["name"] == "a: latency drift")
    assert code == 1 and not check["passed"] and check["limit"] == 0.1 and check["codes"] == ["above_limit"]
    assert "a: latency drift" in out.splitlines()[-1] and "stack failed" in err
    assert "| a: latency drift | **FAIL** |" in (tmp_path / "r" / "summary.md").read_text()


def test_drift_on_a_short_run_is_reported_not_judged(tmp_path, monkeypatch):
    standins(monkeypatch, {"a": StepsUp(1.0, 60.0, after=5 + 5)})  # it drifts, but 2 s is no soak
    path = soak_stack(tmp_path, {"a": 10}, duration=2.0)  # the default 60-s window: a third of 2 s
    code, out, err = run_cli("stack", str(path), "--report-dir", str(tmp_path / "r"))
    result = json.loads((tmp_path / "r" / "stack.json").read_text())
    check = next(c for c in result["checks"] if c["name"] == "a: latency drift")
    assert code == 0 and check["passed"] and check["status"] == "skipped" and check["limit"] is None
    assert check["codes"] == ["not_judged"]
    assert "too short to judge drift: windows of 0.667 s, judged from 10 s, a phase of 30 s or more" in check["message"]
    assert result["models"]["a"]["soak"]["drift"]["drift"] > 0.1  # measured and shown all the same
    assert "1 reported, not judged" in out.splitlines()[-1] and "not judged" in out.splitlines()[1]
    suite = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    assert suite.get("skipped") == "1" and suite.get("failures") == "0"
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "| a: latency drift | not judged |" in summary and "each alone first" not in summary
    assert "not judged" in (tmp_path / "r" / "report.html").read_text()


def test_the_soak_limits_are_the_gates_and_checked_the_same_way(tmp_path):
    from deploykit.config import SoakLimits
    from deploykit.stack.spec import load_stack

    path = soak_stack(tmp_path, {"a": 10}, "max_drift: 0.5")
    assert load_stack(path).soak == SoakLimits(max_drift=0.5)
    code, _, err = run_cli("stack", str(soak_stack(tmp_path, {"a": 10}, "check_every_s: 0")))
    assert code == 2 and "soak.check_every_s" in err
    code, _, err = run_cli("stack", str(soak_stack(tmp_path, {"a": 10}, "max_drif: 0.5")))
    assert code == 2 and "did you mean 'max_drift'" in err


def test_stack_frames_reach_a_chrome_trace(tmp_path, monkeypatch):
    standins(monkeypatch, {"a": Sleeper(1.0), "b": Sleeper(1.0)})
    path = write_stack(
        tmp_path,
        "name: car\nduration_s: 0.5\nalone_s: 0.2\nmodels:\n"
        "  a: {model: m.onnx, rate_hz: 20}\n  b: {model: m.onnx, consumes: a}\n",
    )
    trace = tmp_path / "trace.json"
    code, _, err = run_cli("stack", str(path), "--trace", str(trace), "--report-dir", str(tmp_path / "r"))
    assert code == 0, err
    result = json.loads((tmp_path / "r" / "stack.json").read_text())
    doc = json.loads(trace.read_text())
    threads = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M"}
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    for name in ("a", "b"):
        frames = [e for e in spans if e["name"] == f"stack {name} frame"]
        m = result["models"][name]
        assert len(frames) == m["completed"] + m["alone"]["completed"]  # every run, alone and together
        assert {threads[e["tid"]] for e in frames} == {f"stack {name}"}  # one track per model thread
        assert all(e["dur"] > 0 for e in frames)
        assert [e["name"] for e in spans].count(f"stack {name} output check") == 1
    names = {e["name"] for e in spans}
    assert {"stack car together", "stack a alone", "stack b alone"} <= names
    together = next(e for e in spans if e["name"] == "stack car together")
    inside = [e for e in spans if e["name"] == "stack a frame" and e["ts"] >= together["ts"]]
    assert len(inside) == result["models"]["a"]["completed"]
    assert any("--trace keeps every frame's event in memory" in w for w in result["warnings"])
