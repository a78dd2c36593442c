"""The HTML report (CLI and notebook views), the Markdown summary, and JUnit details."""

import re

import pytest

import deploykit
from deploykit.record.collect import from_store
from deploykit.report import markdown
from deploykit.stages import default_stages
from tests.conftest import run_cli


def test_report_command_writes_one_self_contained_file(tiny, tmp_path):
    pytest.importorskip("matplotlib", reason="plots need matplotlib (pip install matplotlib)")
    cfg, store = tiny
    out = tmp_path / "out" / "report.html"
    code, stdout, err = run_cli("report", "tiny", "-w", str(store), "-o", str(out))
    assert code == 0, err
    page = out.read_text()
    for section in (
        "Stages",
        "Artifact lineage",
        "Parity",
        "Gate",
        "Throughput and latency (ms)",
        "Platform and tools",
    ):
        assert f">{section}" in page
    assert not re.search(r"""(src|href)=['"]?(https?:|//)""", page)  # nothing fetched from elsewhere
    images = re.findall(r"src='data:image/png;base64,[A-Za-z0-9+/=]+'", page)
    assert len(images) == 5  # features, pooled, latency histogram, percentile bars, latency over time
    assert "onnxruntime" in page and "torch" in page  # tool versions


def test_report_of_one_artifact_shows_its_lineage(tiny, tmp_path):
    cfg, store = tiny
    gate = deploykit.convert(cfg, workdir=store).artifacts["gate"]
    record, note = from_store(str(store), gate.digest[:10], default_stages())
    assert "gate" in record.details and "parity" not in record.details and note == ""
    assert [r["kind"] for r in record.details["lineage"]][:2] == ["bench-report", "engine"]
    assert [s.stage for s in record.stages][-1] == "gate" and {s.status for s in record.stages} == {"stored"}


def test_unknown_run_or_artifact_exits_2(tiny, tmp_path):
    code, _, err = run_cli("report", "nope", "-w", str(tiny[1]), "-o", str(tmp_path / "r.html"))
    assert code == 2 and "neither a run name nor an artifact" in err


def test_notebook_view_shows_the_same_summary(tiny, tmp_path):
    pytest.importorskip("matplotlib", reason="plots need matplotlib (pip install matplotlib)")
    cfg, store = tiny
    result = deploykit.convert(cfg, workdir=store)
    fragment = result._repr_html_()
    assert "<table>" in fragment and "Parity" in fragment and "Gate" in fragment and "base64" not in fragment
    full = result.report_html(tmp_path / "r.html")
    assert full.count("data:image/png;base64,") == 5 and (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_failed_run_renders_with_its_failures(tiny, tmp_path):
    cfg, store = tiny
    with pytest.raises(deploykit.DeployKitError) as e:
        deploykit.convert(cfg, workdir=store, gate__targets={"default": {"fps": 1e9}})
    fragment = e.value.result._repr_html_()
    assert "failed" in fragment and "fps" in fragment and "&lt; target 1e+09" in fragment


def test_markdown_summary_has_the_parity_section_with_outputs(tiny):
    cfg, store = tiny
    record = deploykit.convert(cfg, workdir=store).record
    md = markdown.render(record)
    assert md.startswith("## deploykit tiny.fp32.onnxruntime — PASS (exit 0)")
    assert "### parity — PASS" in md and "| features | onnx |" in md and "| pooled | torch |" in md


def test_without_matplotlib_the_page_renders_and_says_so(tiny, tmp_path, monkeypatch):
    from deploykit.report import plots

    monkeypatch.setattr(plots, "available", lambda: False)
    cfg, store = tiny
    out = tmp_path / "r.html"
    assert run_cli("report", "tiny", "-w", str(store), "-o", str(out))[0] == 0
    page = out.read_text()
    assert "base64" not in page and "needs matplotlib" in page and ">Parity" in page


def test_the_search_plot_draws_with_the_figure_api_and_leaves_pyplot_alone():
    """Reports render inside other programs (notebooks, CI): drawing must not pick a backend or touch
    pyplot's global state."""
    pytest.importorskip("matplotlib", reason="plots need matplotlib (pip install matplotlib)")
    import subprocess
    import sys

    code = (
        "import sys, base64\n"
        "from deploykit.report import plots\n"
        "rows = [{'step': i, 'latency_vs_top': 0.6 + 0.1 * i, 'worst_ratio': 3.0 / (i + 1), 'passed': i > 2,\n"
        "         'kept': i in (0, 3), 'chosen': i == 3} for i in range(5)]\n"
        "uri = plots.search_pareto(rows, 'ms')\n"
        "assert base64.b64decode(uri.split(',', 1)[1])[:8] == b'\\x89PNG\\r\\n\\x1a\\n'\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
