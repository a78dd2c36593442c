"""Tracing: a Chrome trace (Perfetto opens it) of every stage and every timed inference, NVTX ranges
where the nvtx package is importable (a recording stand-in here), nothing at all when off."""

import json
import os
import subprocess
import sys
import types

import pytest

from deploykit import tracing
from tests.conftest import run_cli
from tests.standins import StandInSession, gate, gate_model, standin_engine


@pytest.fixture
def model(tmp_path):
    return gate_model(tmp_path)


def events(path):
    doc = json.loads(path.read_text())
    assert doc["displayTimeUnit"] == "ms" and doc["otherData"]["producer"] == "deploykit"
    for e in doc["traceEvents"]:
        assert e["ph"] in ("X", "M") and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["ts"], float)
    return doc


def test_a_traced_run_has_every_stage_and_every_timed_inference(model, monkeypatch, standin_clock, tmp_path):
    standin_engine(monkeypatch, StandInSession(standin_clock, [1.0, 3.0]))
    out = tmp_path / "trace.json"
    code, _, err = run_cli("gate", str(model), "-w", str(model.parent / "store"), "--trace", str(out))
    assert code == 0, err
    doc = events(out)
    names = [e["name"] for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {"stage ingest", "stage build", "stage parity", "stage gate"} <= set(names)
    assert [n for n in names if n.startswith("gate trial")] == [
        "gate trial 1 batch 1",
        "gate trial 2 batch 1",
        "gate trial 3 batch 1",
    ]
    infer = [e for e in doc["traceEvents"] if e["name"] == "infer m batch 1"]
    assert len(infer) == 60 and sorted({e["dur"] for e in infer}) == [1000.0, 3000.0]  # microseconds, as scripted
    assert [e["args"]["i"] for e in infer[:3]] == [0, 1, 2] and infer[0]["args"]["trial"] == 1
    assert doc["otherData"]["nvtx"].startswith("off")
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in doc["traceEvents"])
    assert tracing.active() is None  # off again after the command


def test_nvtx_ranges_are_pushed_and_popped_around_each_inference(model, monkeypatch, standin_clock):
    calls = []
    fake = types.SimpleNamespace(
        push_range=lambda name, domain=None: calls.append(("push", name, domain)),
        pop_range=lambda domain=None: calls.append(("pop", domain)),
    )
    monkeypatch.setitem(sys.modules, "nvtx", fake)  # a recording stand-in for the nvtx package
    standin_engine(monkeypatch, StandInSession(standin_clock, [1.0]))
    with tracing.trace(None):
        gate(model)
    pushed = [c[1] for c in calls if c[0] == "push"]
    assert len(pushed) == sum(c[0] == "pop" for c in calls) and {c[-1] for c in calls} == {"deploykit"}
    assert "stage gate" in pushed and pushed.count("infer m batch 1") >= 60  # warm-up and every timed run


def test_tracing_off_is_the_run_itself(standin_clock):
    run = lambda: None  # noqa: E731
    assert tracing.active() is None and tracing.wrap(run, "x") is run
    with tracing.span("nothing"):
        pass
    tracing.iterations("x", [1, 2], [0.1, 0.2])  # no tracer: nothing kept


def test_the_environment_variable_turns_it_on_for_any_run(tmp_path):
    out = tmp_path / "env.json"
    code = "import deploykit.tracing as t\nwith t.span('from the environment'):\n    pass\n"
    env = {**os.environ, "DEPLOYKIT_TRACE": str(out), "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert [e["name"] for e in events(out)["traceEvents"] if e["ph"] == "X"] == ["from the environment"]


def test_nvtx_only_tracing_keeps_no_events(monkeypatch):
    """Without a trace file nothing reads the events: a long NVTX-only run must not accumulate them."""
    calls = []
    fake = types.SimpleNamespace(
        push_range=lambda name, domain=None: calls.append(name), pop_range=lambda domain=None: None
    )
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    with tracing.trace(None) as tracer:
        for i in range(1000):
            with tracing.span("frame", i=i):
                pass
        tracing.iterations("loop", list(range(100)), [0.1] * 100)
        tracing.wrap(lambda: None, "infer")()
    assert tracer.events == [] and tracer.threads == {}
    assert calls.count("frame") == 1000 and calls.count("infer") == 1  # the NVTX ranges were still pushed


def test_a_trace_file_keeps_every_event(tmp_path):
    with tracing.trace(tmp_path / "t.json") as tracer:
        for _ in range(3):
            with tracing.span("frame"):
                pass
        tracing.iterations("loop", [0, 1], [0.1, 0.2])
    assert [e["name"] for e in tracer.events] == ["frame"] * 3 + ["loop"] * 2
    assert len([e for e in events(tmp_path / "t.json")["traceEvents"] if e["ph"] == "X"]) == 5
