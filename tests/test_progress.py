"""Progress where the user is: a live block in a notebook (no widgets), bars on a terminal, plain
lines in a log, none with progress=False; the notebook block ends as one line per stage."""

from __future__ import annotations

import io
import sys
import types

import pytest

from deploykit import progress


class Handle:
    """A stand-in for IPython's DisplayHandle: records what was shown."""

    def __init__(self, shown: list[str], bundle: dict) -> None:
        self.shown = shown
        shown.append(bundle["text/plain"])

    def update(self, bundle: dict, raw: bool = False) -> None:
        self.shown.append(bundle["text/plain"])


@pytest.fixture
def display(monkeypatch):
    """IPython.display.display replaced by a recorder (the list of texts shown, in order)."""
    shown: list[str] = []
    ipython_display = pytest.importorskip("IPython.display")
    monkeypatch.setattr(ipython_display, "display", lambda bundle, raw=False, display_id=False: Handle(shown, bundle))
    return shown


def _run(reporter) -> None:
    reporter.event("stage_start", stage="export")
    reporter.event("stage_end", stage="export", status="ran", seconds=1.5, digest="ab" * 32)
    reporter.event("stage_start", stage="parity")
    with reporter.task("parity samples", 4) as advance:
        for _ in range(4):
            advance()
    reporter.event("stage_end", stage="parity", status="reused", seconds=0.01, digest="cd" * 32)


def test_the_notebook_block_draws_bars_then_leaves_one_line_per_stage(display, monkeypatch):
    monkeypatch.setattr(progress.NotebookReporter, "EVERY_S", 0.0)
    reporter = progress.NotebookReporter()
    _run(reporter)
    reporter.close()
    assert "export running" in display[0]
    assert any("parity samples [" in s and "4/4" in s for s in display)  # the bar while the samples ran
    assert display[-1] == "export ran 1.50s abababababab\nparity reused 0.01s cdcdcdcdcdcd"


def test_a_run_that_reports_nothing_leaves_nothing(display):
    reporter = progress.NotebookReporter()
    reporter.close()
    assert display == []


def test_reporting_picks_the_reporter_for_where_the_user_is(monkeypatch, display):
    with progress.reporting(None, False) as r:
        assert isinstance(r, progress.SilentReporter)
    given = progress.JsonReporter(io.StringIO())
    with progress.reporting(given, False) as r:
        assert r is given  # an explicit reporter wins
    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    with progress.reporting(None, None) as r:
        assert isinstance(r, progress.NotebookReporter)
        r.event("stage_end", stage="gate", status="ran", seconds=0.2, digest="ef" * 32)
    assert display[-1] == "gate ran 0.20s efefefefefef"
    monkeypatch.setattr(progress, "in_notebook", lambda: False)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a CI log: not a terminal
    with progress.reporting(None, None) as r:
        assert isinstance(r, progress.PlainReporter)
        _run(r)
    assert sys.stderr.getvalue() == "export ran 1.50s abababababab\nparity reused 0.01s cdcdcdcdcdcd\n"


def test_in_notebook_asks_the_running_shell_for_a_kernel(monkeypatch):
    shell = types.SimpleNamespace(kernel=object())
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: shell  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", fake)
    assert progress.in_notebook()
    shell.kernel = None  # a terminal IPython has no kernel
    assert not progress.in_notebook()
    monkeypatch.delitem(sys.modules, "IPython")
    assert not progress.in_notebook()
