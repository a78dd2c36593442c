"""gate.soak_s on a stand-in session and clock: drift, memory growth, NaN/Inf and errors each fail the
gate with a check of their own, a clean soak passes, and a soak is measured on every run."""

import numpy as np
import pytest

from deploykit.errors import TargetMissed
from deploykit.metrics import soak
from tests.conftest import run_cli
from tests.standins import StandInSession, gate, gate_model, standin_engine

SOAK = {"gate.soak_s": 30, "gate.soak.check_every_s": 1.0}


@pytest.fixture
def model(tmp_path):
    return gate_model(tmp_path)


class Ageing(StandInSession):
    """Twice as slow after 15,000 runs, NaN outputs after 20,000, a failing call every 5,000th run."""

    def run_once(self):
        super().run_once()
        if self.runs > 100 and self.runs % 5000 == 0:
            raise RuntimeError("CUDA error: an illegal memory access (stand-in)")


def test_a_soak_fails_on_drift_memory_growth_nan_and_errors(model, monkeypatch, standin_clock):
    session = Ageing(
        standin_clock,
        [1.0] * 15000 + [2.0] * 100000,
        outputs=lambda n: {"y": np.full((1, 8), np.nan if n > 20000 else 0.0, np.float32)},
    )
    standin_engine(monkeypatch, session)
    start = standin_clock.ns
    monkeypatch.setattr(soak, "rss_bytes", lambda: (100 << 20) + int((standin_clock.ns - start) / 1e9 * (10 << 20)))
    with pytest.raises(TargetMissed) as e:
        gate(model, overrides=SOAK)
    g = e.value.result.gate
    failed = {c["name"]: c for c in g["checks"] if not c["passed"]}
    assert set(failed) == {"soak latency drift", "soak resident memory growth", "soak NaN/Inf", "soak errors"}
    s = g["soak"]
    assert s["drift"]["window_s"] == 10.0 and s["drift"]["first_p50_ms"] == 1.0 and s["drift"]["last_p50_ms"] == 2.0
    assert failed["soak latency drift"]["measured"] == pytest.approx(1.0)
    assert failed["soak resident memory growth"]["measured"] == pytest.approx(200.0, abs=15.0)
    assert s["nonfinite"]["first"].startswith("output 'y' at ")
    assert s["errors"]["count"] >= 4 and "illegal memory access" in s["errors"]["first"]
    assert s["seconds"] == pytest.approx(30.0, abs=0.01) and len(s["per_second"]) == 30
    names = [c.name for c in e.value.result.record.group("gate")]
    assert "default batch 1: soak latency drift" in names  # a JUnit testcase and a verdict of its own


def test_a_clean_soak_passes_and_is_measured_on_every_run(model, monkeypatch, standin_clock):
    session = StandInSession(standin_clock, [1.0, 1.2])
    standin_engine(monkeypatch, session)
    monkeypatch.setattr(soak, "rss_bytes", lambda: 100 << 20)
    first = gate(
        model,
        overrides={**SOAK, "gate.soak_s": 5, "gate.targets": {"default": {"deadline_ms": 1.1, "max_miss_rate": 0.6}}},
    )
    s = first.gate["soak"]
    assert first.passed and s["iterations"] == pytest.approx(5000 / 1.1, abs=10) and s["errors"]["count"] == 0
    # alternating 1.0 / 1.2 ms: half late, never more than two in a row (an output check takes one run between)
    assert s["deadline"]["miss_rate"] == pytest.approx(0.5, abs=0.002) and s["deadline"]["longest_miss_run"] <= 2
    again = gate(
        model,
        overrides={**SOAK, "gate.soak_s": 5, "gate.targets": {"default": {"deadline_ms": 1.1, "max_miss_rate": 0.6}}},
    )
    assert again.record.stage("gate").status == "ran" and not again.record.gate_cached
    assert again.record.stage("build").status == "reused"


def test_soak_flag_and_a_soak_past_the_time_limit(model, monkeypatch, standin_clock):
    code, _, err = run_cli("gate", str(model), "-w", str(model.parent / "store"), "--soak", "9000")
    assert code == 2 and "gate.soak_s: 9000 s does not fit in the gate's time limit of 7200 s" in err
    standin_engine(monkeypatch, StandInSession(standin_clock, [1.0]))
    code, out, err = run_cli("gate", str(model), "-w", str(model.parent / "store"), "--soak", "2")
    assert code == 0, err
    assert "soak 2.0 s (" in out and "RSS " in out and "0 errors" in out
