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
    """A test double of a session: each run sleeps ``ms`` (or raises every ``fail_every``-th run)."""

    evaluator = "sleeping session (test double)"

    def __init__(self, ms: float, fail_every: int = 0) -> None:
        self.ms, self.fail_every, self.runs = ms, fail_every, 0
        self.inputs = [TensorSpec("x", "float32", (1, 4))]

    def timed_runner(self, feeds, **options):
        def run():
            self.runs += 1
            if self.fail_every and self.runs % self.fail_every == 0:
                raise RuntimeError("stand-in failure")
            time.sleep(self.ms / 1000)

        return run


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
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "FAIL (exit 1)" in summary and "| segmenter | 50 |" in summary
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
    assert first.environment["rss"]["samples"] >= 1 and first.environment["rss"]["last_mib"] > 0  # sampled as it ran


def test_bad_python_input_names_the_entry():
    with pytest.raises(ConfigError, match="models.a.rate_hz: 0 is not a positive"):
        run_stack({"models": {"a": {"model": __file__.replace(".py", ".yaml"), "rate_hz": 0}}})
