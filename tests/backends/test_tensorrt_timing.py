"""The TensorRT session's timing options on the TensorRT/CUDA test doubles (trt_double.py): gate.cuda_graph
on/off over the build's cuda_graphs, a stream priority for `deploykit stack`, device memory for a soak.
These check our logic against the doubles; no engine is built and no GPU runs here."""

import pytest

from deploykit.backends.tensorrt import TensorRTBackend
from tests.backends.test_tensorrt import built_engine, double_session, feeds


def test_cuda_graph_off_enqueues_even_where_the_build_allows_graphs(monkeypatch, tmp_path):
    fake, session = double_session(monkeypatch, tmp_path)
    run = session.engine_timed_runner(feeds(4), cuda_graph="off")
    fake.cudart.calls.clear()
    run()
    assert session.runner_info == {"mode": "enqueue", "why": "gate.cuda_graph is off"}
    assert "graph" not in fake.cudart.calls


def test_cuda_graph_on_captures_where_the_build_turned_graphs_off(monkeypatch, tmp_path):
    fake, session = double_session(monkeypatch, tmp_path, cuda_graphs=False)
    run = session.timed_runner(feeds(4), cuda_graph="on")
    fake.cudart.calls.clear()
    run()
    assert session.runner_info == {"mode": "cuda-graph", "why": ""} and "graph" in fake.cudart.calls
    session.timed_runner(feeds(4))()  # auto: the build's choice again
    assert session.runner_info["why"] == "cuda_graphs is off in the build options"


@pytest.mark.parametrize(("priority", "clamped"), [(-1000, -5), (1000, 0), (-2, -2)])
def test_a_stream_priority_is_clamped_into_the_device_range(monkeypatch, tmp_path, priority, clamped):
    fake, engine = built_engine(monkeypatch, tmp_path, None)
    TensorRTBackend().load(engine, stream_priority=priority)
    assert f"stream priority {clamped}" in fake.cudart.calls


def test_device_memory_in_use_for_a_soak(monkeypatch, tmp_path):
    _, session = double_session(monkeypatch, tmp_path)
    assert session.device_memory_used() == 2 << 30
    assert TensorRTBackend().timing_refusals(None) == {}  # type: ignore[arg-type]
