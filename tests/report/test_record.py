"""The run record's pieces: checks and their verdict lines, warnings, wording, and the HTML plots
that never touch matplotlib's global state."""

from pathlib import Path

import pytest

from deploykit.record.collect import _warnings
from deploykit.record.model import Check, RunRecord, StageStatus, worst_of
from deploykit.report.markdown import change
from deploykit.stages.gate import spread_warnings
from deploykit.stages.quantize import QuantizeSummary, RepairSummary, _hint


def test_baseline_changes_read_as_slower_or_faster():
    assert change(0.12) == "12.0% slower" and change(-0.827) == "82.7% faster" and change(0.0) == "unchanged"


def test_the_deciding_check_is_the_worst_failure_else_the_closest_to_its_limit():
    a = Check("parity", "a vs onnx", "pass", True, "rel_l2", 0.01, 0.1, "<=")
    b = Check("parity", "b vs onnx", "pass", True, "cosine", 0.999, 0.995, ">=")  # uses 20% of its margin
    record = RunRecord("m", "fp32", "onnxruntime", "", checks=(a, b))
    assert record.deciding("parity") is b and record.exit_code == 0 and record.verdict == "PASS"
    c = Check("parity", "c vs torch", "fail", False, "rel_l2", 0.3, 0.1, "<=")
    failed = RunRecord("m", "fp32", "onnxruntime", "", checks=(a, b, c))
    assert failed.deciding("parity") is c and failed.exit_code == 1 and c.verdict_line() == "rel_l2 0.3 > 0.1"
    stopped = RunRecord("m", "fp32", "onnxruntime", "", checks=(a,), error="boom", error_code=4)
    assert stopped.exit_code == 4 and stopped.verdict == "ERROR"
    assert RunRecord.from_dict(failed.to_dict()) == failed
    worse = Check("parity", "d vs onnx", "fail", False, "cosine", 0.5, 0.995, ">=")  # far past its limit
    both = RunRecord("m", "fp32", "onnxruntime", "", checks=(a, c, worse))
    assert both.deciding("parity") is worse
    from deploykit.report.terminal import verdict_lines

    assert verdict_lines(both)[0].startswith("parity: FAIL — failed: d vs onnx cosine 0.5 < 0.995 (2 of 3")


def test_a_failed_run_says_why_in_every_view_and_junit_says_each_metric_once():
    from deploykit.report import junit, markdown
    from deploykit.report.terminal import result_line

    store = "/srv/ci/.deploykit"
    c = Check(
        "parity", "scores vs onnx", "fail", False, "rel_l2", 0.3, 0.1, "<=", "rel_l2 0.3 > 0.1; cosine 0.9 < 0.995"
    )
    record = RunRecord(
        "m",
        "fp32",
        "onnxruntime",
        "",
        checks=(c,),
        error="parity failed: scores vs onnx: rel_l2 0.3 > 0.1",
        hint=f"the full report is {store}/objects/{'ab' * 32}/parity.json",
        error_code=1,
        workdir=store,
        stages=(
            StageStatus(
                "parity",
                "ran",
                0.1,
                "ab" * 32,
                error=f"parity failed (hint: the full report is {store}/objects/{'ab' * 32}/parity.json)",
            ),
        ),
    )
    data = record.to_dict()
    assert (data["error"], data["error_code"], data["exit_code"], data["verdict"]) == (
        "parity failed: scores vs onnx: rel_l2 0.3 > 0.1",
        1,
        1,
        "FAIL",
    )
    assert result_line(record).startswith("result: FAIL (exit 1) — 1 failed: parity scores vs onnx")
    xml = junit.render(record)
    assert 'errors="0"' in xml and 'failures="1"' in xml
    assert 'message="rel_l2 0.3 &gt; 0.1 (cosine 0.9 &lt; 0.995)"' in xml  # rel_l2 once, the other reason kept
    md = markdown.render(record)
    assert store not in md and f"parity.json (artifact {'ab' * 6})" in md
    from deploykit.report import html

    page = html.render_page(record, with_plots=False)
    label = f"<span class='note'>store: {store}</span>"  # the lineage names the store once, on purpose
    assert page.count(store) == page.count(label) == 1
    body = page.replace(label, "")
    assert store not in body and f"parity.json (artifact {'ab' * 6})" in body  # hints: portable, as in Markdown
    assert "the full report is parity.json" in body and "parity failed" in body


def test_a_build_only_run_does_not_claim_checks_passed():
    from deploykit.report.terminal import result_line

    built = RunRecord(
        "m", "fp32", "onnxruntime", "", stages=(StageStatus("ingest", "ran"), StageStatus("build", "ran"))
    )
    assert (
        result_line(built)
        == "result: PASS (exit 0) — no checks: the run stopped after build, before parity and the gate"
    )


def test_worst_metric_ignores_unchecked_and_infinite_limits():
    metrics = {"max_abs": 0.5, "rel_l2": 0.02, "cosine": 0.9999}
    assert worst_of(metrics, {"max_abs": None, "rel_l2": 0.1, "cosine": 0.995}) == ("rel_l2", 0.02, 0.1, "<=")
    assert worst_of(metrics, {"max_abs": float("inf"), "rel_l2": 0.1, "cosine": 0.99999})[0] == "cosine"


def test_high_trial_spread_is_a_warning_that_says_how_high():
    report = {"trials_count": 5, "spread": {"p50_ms": {"min": 1.0, "max": 1.5, "rel": 0.45}}}
    [warning] = spread_warnings(report, 0.10)
    assert "45%" in warning and "1.000-1.500 ms" in warning and "above 10%" in warning
    assert spread_warnings({"spread": {"p50_ms": {"min": 1.0, "max": 1.05, "rel": 0.05}}}, 0.10) == []


def test_a_tensorrt_flavour_graph_timed_on_the_cpu_says_so():
    details = {"gate": {"evaluator": "the graph as written on the CPU", "warnings": []}}
    [warning] = _warnings(details, "tensorrt", "onnxruntime")
    assert "TensorRT-flavour graph timed with onnxruntime on the CPU" in warning and "says nothing" in warning
    assert _warnings(details, "onnxruntime", "onnxruntime") == []


def test_the_spent_repair_budget_does_not_advise_enabling_repair():
    spent = QuantizeSummary(repair=RepairSummary(False, 8, ["a"], "iteration budget spent (8)"))
    hint = _hint(spent, Path("precision.json"))
    assert "enable quantize.repair" not in hint
    assert "iteration budget spent (8)" in hint and "max_iterations" in hint
    assert "enable quantize.repair (quantize__repair__enabled=True)" in _hint(QuantizeSummary(), Path("precision.json"))
    from deploykit.config.surface import command_line

    with command_line():
        assert "enable quantize.repair (--auto-repair)" in _hint(QuantizeSummary(), Path("precision.json"))


def test_report_plots_leave_the_matplotlib_backend_alone(tiny, tmp_path):
    matplotlib = pytest.importorskip("matplotlib", reason="plots need matplotlib")
    import deploykit

    matplotlib.use("svg")  # a notebook's inline backend stands in here: anything but Agg
    before = matplotlib.get_backend()
    cfg, store = tiny
    html = deploykit.convert(cfg, workdir=store).report_html(tmp_path / "r.html")
    assert html.count("data:image/png;base64,") == 5
    assert matplotlib.get_backend() == before


def test_the_record_of_a_failed_run_holds_its_error_and_code(tiny, tmp_path):
    import json

    import deploykit
    from deploykit.errors import TargetMissed

    cfg, store = tiny
    with pytest.raises(TargetMissed) as caught:
        deploykit.convert(
            cfg, workdir=store, report_dir=tmp_path / "reports", progress=False, targets={"default": {"fps": 1e9}}
        )
    record = caught.value.result.record
    assert record.error == caught.value.message and record.error_code == 1 and record.exit_code == 1
    stored = json.loads((tmp_path / "reports" / "run.json").read_text())
    assert (stored["error"], stored["error_code"], stored["exit_code"], stored["verdict"]) == (
        caught.value.message,
        1,
        1,
        "FAIL",
    )
    assert str(store.resolve()) not in (tmp_path / "reports" / "summary.md").read_text()
