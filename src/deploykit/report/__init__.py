"""Report renderers: JSON is written by the stages; JUnit XML and Markdown for CI; HTML for people.

Modules: ``jsonio`` (strict JSON), ``junit``, ``markdown``, ``baseline`` (load and compare a previous
gate report), ``collect`` (gather a run's reports from the store), ``html`` and ``plots``
(matplotlib, imported only when a report with plots renders).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from deploykit.report.collect import StageInfo


def write_html(workdir: str | Path, ref: str, output: str | Path, stages: Sequence[StageInfo],
               with_plots: bool = True) -> Path:
    """Render the run or artifact ``ref`` from the store at ``workdir`` into one self-contained HTML file.

    Args:
        workdir: the artifact store.
        ref: a run name (the config's ``name``) or an artifact digest (or a unique prefix).
        output: the HTML file to write.
        stages: what the stages are (``deploykit.stages.default_stages()``; :func:`deploykit.api.write_report`
            passes them).
        with_plots: embed plots (needs matplotlib; without it the page says so).
    """
    from deploykit.report.collect import from_store
    from deploykit.report.html import render_page

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(render_page(from_store(str(workdir), ref, stages), with_plots), encoding="utf-8")
    return output
